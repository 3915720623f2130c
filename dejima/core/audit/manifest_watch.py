"""The workspace paths a session's manifests ask the exit audit to watch (``[audit] watch``): a
file, or with a trailing "/" everything under a directory. The start snapshot keeps their bytes;
a change there that no rule of the catalogue judges is a finding (X07, fallback.py). Where the
catalogue knows a path, its verdict stands, a quiet one too: it is finer (package.json is diffed
key by key, so a new dependency is no finding)."""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dejima.core.audit import watched
from dejima.core.audit.configs import has_own_rules, rules_for

if TYPE_CHECKING:
    from dejima.core.manifest import Manifest


@dataclass(frozen=True, slots=True)
class Watch:
    path: str  # normalised: "tools/" is a directory, "./" the whole workspace, anything else one file
    source: str  # the manifest that asked (Manifest.source)

    @property
    def prefix(self) -> str | None:
        """What every path under a directory entry starts with; None for a file entry."""
        if not self.path.endswith("/"):
            return None
        return "" if self.path == "./" else self.path

    def covers(self, path: str) -> bool:
        prefix = self.prefix
        return path == self.path if prefix is None else path.startswith(prefix)


def watch_entry(entry: str, source: str) -> Watch:
    """One entry as a manifest wrote it ("./tools/", "a//b"), normalised."""
    path = posixpath.normpath(entry)
    if path == ".":
        return Watch("./", source)
    return Watch(path + "/" if entry.endswith("/") else path, source)


def watch_of(manifests: Iterable[Manifest]) -> tuple[Watch, ...]:
    """Every manifest's entries, with the manifest that asked for each."""
    return tuple(watch_entry(entry, m.source) for m in manifests for entry in m.audit_watch)


def catalogue_knows(path: str) -> bool:
    """Whether the catalogue's own rules judge this workspace path: a path rule covers it, or it is
    in a git directory, which has rules of its own (a tree is asked of the view: treeroots.in_tree)."""
    return watched(path, "workspace") or bool(rules_for(path)) or _in_git_dir(path)


def asked(watch: Sequence[Watch], start: bool = True) -> Callable[[str], bool]:
    """Whether an entry covers a path outside git directories and, at a session's ``start`` (whose
    bytes are kept), outside the names dependency trees usually have (the end asks its view which
    trees are trees). Asked of every file, so the entries are folded into one set and one prefix tuple."""
    files = frozenset(w.path for w in watch if w.prefix is None)
    prefixes = tuple(prefix for w in watch if (prefix := w.prefix) is not None)
    if not files and not prefixes:
        return lambda path: False
    excluded = has_own_rules if start else _in_git_dir
    return lambda path: (path in files or path.startswith(prefixes)) and not excluded(path)


def _in_git_dir(path: str) -> bool:
    return ".git" in path.split("/")


def asked_by(path: str, watch: Sequence[Watch]) -> Watch | None:
    """The first entry that covers a path (the manifest named in its finding)."""
    return next((w for w in watch if w.covers(path)), None)
