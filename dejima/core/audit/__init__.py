"""The exit audit's rules: which changes between two snapshots of a mount can run code later.

Detect by location and key (research/persistence.md §3-4): a change to a place that runs code is
a finding whatever its content; watched config files are parsed and diffed key by key, and one
that no longer parses is itself a finding (fail closed). Correlations and content signals raise
severities, never create findings alone. The catalogue (catalogue.py) is data.

    audit(before, after, contents, kind)  findings for one mount, worst first
    watched(path, kind)                   whether the start snapshot keeps a file's bytes
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from dejima.core.audit.catalogue import CATALOGUE_VERSION
from dejima.core.audit.configs import config_findings, kept_by_rules
from dejima.core.audit.correlate import correlate
from dejima.core.audit.environment import environment_findings
from dejima.core.audit.fallback import fallback_findings
from dejima.core.audit.files import file_findings
from dejima.core.audit.git import derived_watch, git_findings
from dejima.core.audit.lockfiles import lockfile_findings
from dejima.core.audit.model import MOUNT_KINDS, SEVERITIES, Contents, Finding, View, in_dependency_tree, rank
from dejima.core.audit.names import name_findings
from dejima.core.audit.trees import tree_findings
from dejima.core.snapshot import Snapshot, diff

__all__ = ["CATALOGUE_VERSION", "MOUNT_KINDS", "SEVERITIES", "Contents", "Finding", "audit", "derived_watch", "rank",
           "watched"]

# Files the git and lockfile rules read at both ends.
_ANYWHERE = frozenset((".gitmodules", ".lfsconfig", ".gitattributes", ".gitignore", "package-lock.json",
                       "npm-shrinkwrap.json", "Cargo.lock", "uv.lock", "poetry.lock", "go.sum"))
_IN_GIT_DIR = frozenset(("config", "config.worktree", "commondir", "gitdir", "exclude", "attributes",
                         "sparse-checkout", "packed-refs"))


def watched(path: str, kind: str = "workspace") -> bool:
    """Files whose bytes the start snapshot keeps, so rules can diff them and restore them.
    Asked of every file at session start: the cheap tests come first."""
    if kind == "workspace":
        if ".git" in path:
            parts = path.split("/")
            if ".git" in parts:
                return "hooks" in parts or parts[-1] in _IN_GIT_DIR
        if path[path.rfind("/") + 1:] in _ANYWHERE and not in_dependency_tree(path):
            return True
    return kept_by_rules(path, kind)


def _deduplicated(found: list[Finding]) -> list[Finding]:
    """One finding per (rule, path, key): the worst, with every note."""
    best: dict[tuple[str, str, str], Finding] = {}
    for item in found:
        key = (item.rule, item.path, item.key)
        other = best.get(key)
        if other is not None:
            worse, better = (other, item) if rank(item.severity) > rank(other.severity) else (item, other)
            item = replace(better, notes=tuple(dict.fromkeys((*better.notes, *worse.notes))))
        best[key] = item
    return sorted(best.values(), key=lambda f: (-rank(f.severity), f.path, f.rule, f.key))


def audit(before: Snapshot, after: Snapshot, contents: Contents, kind: str = "workspace",
          listdir: Callable[[str], list[str]] | None = None) -> list[Finding]:
    """Findings for the changes from ``before`` to ``after`` (one mount), worst first.
    ``contents(side, path)`` returns a file's bytes at "before" or "after" (None when unknown);
    ``listdir(directory)`` the names in a directory now (default: from ``after``)."""
    view = View(before, after, diff(before, after), contents, kind, listdir)
    found = [*config_findings(view), *file_findings(view), *name_findings(view), *tree_findings(view),
             *environment_findings(view)]
    if kind == "workspace":
        found.extend(git_findings(view))
        found.extend(lockfile_findings(view))
    found = correlate(found, view)
    found.extend(fallback_findings(view, found))
    return _deduplicated(found)
