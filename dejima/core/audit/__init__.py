"""The exit audit's rules: which changes between two snapshots of a mount can run code later.

Detect by location and key (research/persistence.md §3-4): a change to a place that runs code is
a finding whatever its content; watched config files are parsed and diffed key by key, and one
that no longer parses is itself a finding (fail closed). Correlations and content signals raise
severities, never create findings alone. The catalogue (catalogue.py) is data.

    rules.audit(before, after, contents, kind)  findings for one mount, worst first
    watched(path, kind)                         whether the start snapshot keeps a file's bytes
    manifest_watch                              the paths a session's manifests ask to watch too

The rules themselves (rules.py, and yaml, xml and configparser under configfiles.py) are imported
only by what runs them: a session's start needs ``watched`` alone, while its filter starts.
"""

from __future__ import annotations

from dejima.core.audit.catalogue import CATALOGUE_VERSION
from dejima.core.audit.configs import kept_by_rules
from dejima.core.audit.git import derived_watch
from dejima.core.audit.model import (
    MOUNT_KINDS,
    SEVERITIES,
    Contents,
    Finding,
    constituents,
    in_dependency_tree,
    rank,
)

__all__ = ["CATALOGUE_VERSION", "MOUNT_KINDS", "SEVERITIES", "Contents", "Finding", "constituents", "derived_watch",
           "rank", "watched"]

# Files the git and lockfile rules, and the trees' verification, read at both ends.
_ANYWHERE = frozenset((".gitmodules", ".lfsconfig", ".gitattributes", ".gitignore", "package-lock.json",
                       "npm-shrinkwrap.json", "Cargo.lock", "uv.lock", "poetry.lock", "go.sum", "yarn.lock"))
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
