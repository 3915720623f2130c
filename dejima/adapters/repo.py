"""Reads what detection needs from the workspace, treating it as untrusted input.

No git command runs on the workspace (hooks, fsmonitor and filters could run code): the git
config is read as text, and symbolic links are never followed out of the tree.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

from dejima.core.resolve import REPO_POLICY_FILE, RepoPolicy, WorkspaceFacts, parse_repo_policy

_URL = re.compile(r"^\s*(?:url|pushurl)\s*=\s*(\S+)", re.IGNORECASE | re.MULTILINE)
_HOST = re.compile(r"^(?:[a-z+]+://)?(?:[^@/]+@)?(\[[^\]]+\]|[^:/\s]+)", re.IGNORECASE)
MAX_CONFIG_BYTES = 1 << 20


def remote_hosts(config_text: str) -> frozenset[str]:
    """Host names of the remotes in a git config: https://host/x, ssh://git@host/x, git@host:x."""
    hosts = set()
    for url in _URL.findall(config_text):
        match = _HOST.match(url)
        if match:
            hosts.add(match.group(1).lower().strip("[]"))
    return frozenset(hosts)


def remote_repositories(config_text: str, host: str) -> tuple[str, ...]:
    """Paths (owner/repo) of the remotes on ``host``: what a session may push to there."""
    found = []
    for url in _URL.findall(config_text):
        match = _HOST.match(url)
        if match and match.group(1).lower().strip("[]") == host.lower():
            rest = url[match.end():]
            if "://" in url:
                rest = re.sub(r"^:\d+", "", rest)  # a port: ssh://git@host:22/owner/repo
            path = rest.lstrip(":/").removesuffix("/").removesuffix(".git")
            if path:
                found.append(path)
    return tuple(dict.fromkeys(found))


def git_config_text(workspace: Path) -> str:
    """The workspace's .git/config as text (empty when it is not a plain file in a plain .git)."""
    config = workspace / ".git" / "config"
    if not _regular_file(config) or (workspace / ".git").is_symlink():
        return ""
    with open(config, "rb") as stream:
        return stream.read(MAX_CONFIG_BYTES).decode("utf-8", "replace")


def _regular_file(path: Path) -> bool:
    return stat.S_ISREG(_mode(path))


# Detection looks one level down, in at most this many folders of at most this many names each.
SUB_FOLDERS, SUB_NAMES = 64, 2000
# Folders whose contents say nothing about the project's own toolchain (installed or built trees).
NOT_PROJECT_FOLDERS = frozenset({"node_modules", "vendor", "target", "venv", "env", "__pycache__", "dist", "build",
                                 "site-packages", "bower_components"})


def _sub_files(workspace: Path, names: frozenset[str]) -> frozenset[str]:
    found = []
    folders = sorted(n for n in names if not n.startswith(".") and n not in NOT_PROJECT_FOLDERS)
    for name in folders[:SUB_FOLDERS]:
        if not stat.S_ISDIR(_mode(workspace / name)):
            continue
        try:
            with os.scandir(workspace / name) as entries:
                for index, entry in enumerate(entries):
                    if index >= SUB_NAMES:
                        break
                    found.append(f"{name}/{entry.name}")
        except OSError:
            continue
    return frozenset(found)


def _mode(path: Path) -> int:
    try:
        return os.lstat(path).st_mode  # a link to a folder is not followed
    except OSError:
        return 0


def workspace_facts(workspace: Path) -> WorkspaceFacts:
    try:
        names = frozenset(os.listdir(workspace))
    except OSError:
        names = frozenset()
    config = workspace / ".git" / "config"
    hosts: frozenset[str] = frozenset()
    if _regular_file(workspace / ".git" / "config") and not (workspace / ".git").is_symlink():
        with open(config, "rb") as stream:
            hosts = remote_hosts(stream.read(MAX_CONFIG_BYTES).decode("utf-8", "replace"))
    return WorkspaceFacts(root_files=names, remote_hosts=hosts, sub_files=_sub_files(workspace, names))


def read_repo_policy(workspace: Path) -> RepoPolicy:
    path = workspace / REPO_POLICY_FILE
    if not _regular_file(path):
        return RepoPolicy()
    with open(path, "rb") as stream:
        text = stream.read(MAX_CONFIG_BYTES).decode("utf-8", "replace")
    return parse_repo_policy(text, str(path))
