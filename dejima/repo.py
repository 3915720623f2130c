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


def _regular_file(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


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
    return WorkspaceFacts(root_files=names, remote_hosts=hosts)


def read_repo_policy(workspace: Path) -> RepoPolicy:
    path = workspace / REPO_POLICY_FILE
    if not _regular_file(path):
        return RepoPolicy()
    with open(path, "rb") as stream:
        text = stream.read(MAX_CONFIG_BYTES).decode("utf-8", "replace")
    return parse_repo_policy(text, str(path))
