"""Exit-audit rules: which changes between two snapshots can run code later on the host.

Detect by location and key (research/persistence.md §3-4): a change to an auto-executing place
is a finding whatever its content. Watched config files are parsed; one that no longer parses is
itself a finding (fail closed). This is the first set of rules (git hooks, git config keys, the
git dir itself, IDE and agent configs, privilege bits, special files, links out of the tree);
the key lists are data, meant to grow.
"""

from __future__ import annotations

import hashlib
import posixpath
from collections.abc import Callable
from dataclasses import dataclass

from dejima.core.gitconfig import GitConfigError, parse_git_config
from dejima.core.snapshot import Change, Snapshot, diff

SEVERITIES = ("low", "medium", "high", "critical")

GIT_CONFIG_FILES = (".git/config", ".git/config.worktree")
# Keys a normal session may change without a finding.
GIT_ALLOWED = {"core.repositoryformatversion", "core.filemode", "core.logallrefupdates", "core.ignorecase",
               "core.precomposeunicode", "core.bare", "user.name", "user.email", "pull.rebase", "push.default",
               "init.defaultbranch", "rerere.enabled"}
GIT_CRITICAL = ("core.hookspath", "core.fsmonitor", "core.worktree", "include.path", "credential.helper",
                "core.sshcommand", "core.askpass", "core.gitproxy")
GIT_CRITICAL_PATTERNS = ("includeif.*.path", "credential.*.helper", "filter.*.clean", "filter.*.smudge",
                         "filter.*.process", "protocol.*.allow", "remote.*.uploadpack", "remote.*.receivepack")
GIT_HIGH = ("core.pager", "core.editor", "sequence.editor", "diff.external", "gpg.program", "web.browser",
            "interactive.difffilter", "core.attributesfile", "core.excludesfile", "alias.*", "pager.*",
            "diff.*.textconv", "diff.*.command", "merge.*.driver", "mergetool.*.cmd", "difftool.*.cmd",
            "gpg.*.program", "url.*.insteadof", "url.*.pushinsteadof", "remote.*.url", "remote.*.pushurl",
            "submodule.*.update", "trailer.*.cmd", "trailer.*.command")
GIT_HOUSEKEEPING = ("objects/", "refs/", "logs/", "index", "HEAD", "ORIG_HEAD", "FETCH_HEAD", "COMMIT_EDITMSG",
                    "packed-refs", "description", "info/refs", "hooks/", "config", "config.worktree")
# Files an IDE or an agent reads and may act on (run tasks, hooks, servers) when the user opens the repo.
EXEC_CONFIGS = {
    ".vscode/tasks.json": "critical", ".vscode/settings.json": "high", ".vscode/launch.json": "high",
    ".vscode/extensions.json": "medium", ".claude/settings.json": "critical", ".claude/settings.local.json": "critical",
    ".mcp.json": "critical", ".cursor/mcp.json": "critical", ".envrc": "critical", ".idea/workspace.xml": "high",
    ".devcontainer/devcontainer.json": "high", ".gemini/settings.json": "critical", ".codex/config.toml": "critical",
}


@dataclass(frozen=True, slots=True)
class Finding:
    rule: str
    severity: str
    path: str
    key: str
    evidence: str
    fingerprint: str  # binds an acknowledgement to exactly this content


def _fingerprint(rule: str, path: str, key: str, value: str) -> str:
    return hashlib.sha256("\0".join((rule, path, key, value)).encode("utf-8", "surrogateescape")).hexdigest()


def _finding(rule: str, severity: str, path: str, key: str, evidence: str, value: str) -> Finding:
    return Finding(rule, severity, path, key, evidence, _fingerprint(rule, path, key, value))


def _matches(key: str, pattern: str) -> bool:
    head, star, tail = pattern.partition("*")
    if not star:
        return key == pattern
    return key.startswith(head) and key.endswith(tail) and len(key) > len(head) + len(tail)


def git_key_severity(key: str, value: str) -> str | None:
    lowered = key.lower()
    if lowered in GIT_ALLOWED:
        return None
    if lowered == "core.fsmonitor" and value.lower() in ("true", "false"):
        return "low"
    if lowered in GIT_CRITICAL or any(_matches(lowered, p) for p in GIT_CRITICAL_PATTERNS):
        return "critical"
    if lowered in GIT_HIGH or any(_matches(lowered, p) for p in GIT_HIGH if "*" in p):
        return "critical" if lowered.startswith("alias.") and value.startswith("!") else "high"
    return "medium"


def _git_config_findings(path: str, old: bytes | None, new: bytes | None) -> list[Finding]:
    if new is None:
        return []
    try:
        after = parse_git_config(new.decode("utf-8", "surrogateescape"))
    except GitConfigError as exc:
        return [_finding("G-unparseable", "high", path, "", f"no longer parses as git config: {exc}",
                         hashlib.sha256(new).hexdigest())]
    try:
        before = set(parse_git_config(old.decode("utf-8", "surrogateescape"))) if old is not None else set()
    except GitConfigError:
        before = set()
    found = []
    for key, value in after:
        if (key, value) in before:
            continue
        severity = git_key_severity(key, value)
        if severity is not None:
            found.append(_finding("G-config", severity, path, key, f"{key} = {value}", value))
    return found


def _housekeeping(inside_git: str) -> bool:
    # objects/info/ holds alternates: a way to read objects from host paths, not housekeeping.
    return inside_git.startswith(GIT_HOUSEKEEPING) and not inside_git.startswith("objects/info/")


def _escapes(path: str, target: str) -> bool:
    if target.startswith("/"):
        return True
    resolved = posixpath.normpath(posixpath.join(posixpath.dirname(path), target))
    return resolved == ".." or resolved.startswith("../")


def _entry_findings(change: Change) -> list[Finding]:
    new, path = change.after, change.path
    found: list[Finding] = []
    if new is None:
        return found
    value = new.sha256 or new.target or new.kind
    if new.privileged_bits and (change.before is None or not change.before.privileged_bits):
        found.append(_finding("F-setuid", "critical", path, "", f"mode {oct(new.mode)} (setuid/setgid)", value))
    if new.kind in ("char", "block"):
        found.append(_finding("F-device", "critical", path, "", f"a {new.kind} device node", value))
    elif new.kind in ("fifo", "socket") and change.what in ("added", "type"):
        found.append(_finding("F-special", "medium", path, "", f"a {new.kind}", value))
    if new.kind == "symlink" and new.target is not None and _escapes(path, new.target):
        found.append(_finding("F-symlink-out", "high", path, "", f"symlink to {new.target}, outside the tree", value))
    if path == ".git" and change.what == "type":
        found.append(_finding("G-gitdir", "critical", path, "", f".git became a {new.kind}", value))
    if path.startswith(".git/hooks/") and not path.endswith(".sample") and new.kind != "dir":
        found.append(_finding("G-hook", "critical", path, "", f"git hook {change.what}", value))
    elif path == ".git/hooks" and change.what == "type":
        found.append(_finding("G-hook", "critical", path, "", f".git/hooks became a {new.kind}", value))
    elif path in EXEC_CONFIGS and change.what in ("added", "modified", "type"):
        found.append(_finding("C-exec-config", EXEC_CONFIGS[path], path, "", f"{path} {change.what}", value))
    elif (path.startswith(".git/") and path not in GIT_CONFIG_FILES and change.what in ("added", "modified", "type")
          and not _housekeeping(path[len(".git/"):])):
        found.append(_finding("G-other", "medium", path, "", f"{path} {change.what} inside .git", value))
    return found


def audit(before: Snapshot, after: Snapshot, contents: Callable[[str, str], bytes | None]) -> list[Finding]:
    """Findings for the changes from ``before`` to ``after``. ``contents(side, path)`` returns a
    watched file's bytes at "before" or "after" (None when absent)."""
    findings: list[Finding] = []
    for change in diff(before, after):
        findings.extend(_entry_findings(change))
        if change.path in GIT_CONFIG_FILES and change.what in ("added", "modified"):
            findings.extend(_git_config_findings(change.path, contents("before", change.path),
                                                 contents("after", change.path)))
    return sorted(findings, key=lambda f: (-SEVERITIES.index(f.severity), f.path, f.key))


def watched(path: str) -> bool:
    """Files whose content the snapshot keeps, so rules can diff them and restore them."""
    return path in GIT_CONFIG_FILES or path in EXEC_CONFIGS or path.startswith(".git/hooks/")
