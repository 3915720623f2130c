"""What the audit produces (findings), what it reads (a view of the two snapshots), and the
severity scale (research/persistence.md §2)."""

from __future__ import annotations

import hashlib
import json
import posixpath
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import NamedTuple

from dejima.core.snapshot import Change, Snapshot, SnapshotEntry, joined_paths

SEVERITIES = ("info", "low", "medium", "high", "critical")

# Which mount a snapshot is of: the workspace gets every rule; the per-project home and the
# manifest caches are dejima's own and only ever used inside sessions (research §3.8, M01-M02).
MOUNT_KINDS = ("workspace", "home", "cache")


def rank(severity: str) -> int:
    return SEVERITIES.index(severity)


def raised(severity: str, levels: int = 1) -> str:
    return SEVERITIES[min(rank(severity) + levels, len(SEVERITIES) - 1)]


@dataclass(frozen=True, slots=True)
class Finding:
    rule: str  # catalogue id (G01, I01, ...) or a generic fallback (X01, ...)
    severity: str
    path: str  # relative to the mount's root
    key: str  # the config key, when the finding is about one
    evidence: str  # one line: what changed
    fingerprint: str  # binds an acknowledgement to exactly this content
    remedy: str = "review"
    notes: tuple[str, ...] = ()  # correlations and content signals that raised the severity
    # More evidence: the other changes found in the same file ("RULE severity: evidence"), and
    # "context: ..." for changed keys that run nothing (a task's label).
    lines: tuple[str, ...] = ()
    value: str = field(default="", compare=False)  # the raw new value (rules read it; not stored)

    def raise_by(self, note: str, levels: int = 1) -> Finding:
        if note in self.notes:
            return self
        return replace(self, severity=raised(self.severity, levels), notes=(*self.notes, note))


def constituents(item: Finding) -> list[tuple[str, str]]:
    """(rule, severity) of every change a finding covers: its own, and those merged into it."""
    found = [(item.rule, item.severity)]
    for line in item.lines:
        head = line.partition(": ")[0].split(" ")
        if len(head) == 2 and head[1] in SEVERITIES:
            found.append((head[0], head[1]))
    return found


def first_few(items: list[str], limit: int, sep: str = ", ", more: str = " and ") -> str:
    """The first ``limit`` items joined by ``sep``, and how many more there are: evidence stays short."""
    rest = len(items) - limit
    return sep.join(items[:limit]) + (f"{more}{rest} more" if rest > 0 else "")


def fingerprint(rule: str, path: str, key: str, value: str | bytes) -> str:
    data = value.encode("utf-8", "surrogateescape") if isinstance(value, str) else value
    head = "\0".join((rule, path, key)).encode("utf-8", "surrogateescape")
    return hashlib.sha256(head + b"\0" + data).hexdigest()


def finding(rule: str, severity: str, path: str, evidence: str, value: str | bytes, key: str = "",
            remedy: str = "review") -> Finding:
    raw = value if isinstance(value, str) else ""
    return Finding(rule, severity, path, key, evidence, fingerprint(rule, path, key, value), remedy, value=raw)


Contents = Callable[[str, str], "bytes | None"]  # (side "before"/"after", path) -> bytes, None if absent


class Artifact(NamedTuple):
    """What a package's pinned artifact holds (an npm tarball or a wheel read from a cache, its hash
    checked): each regular file's path inside the package and SHA-256 (hex); ``texts``: the few
    entries a verification reads whole (a wheel's entry_points.txt and ``#!python`` scripts)."""

    files: dict[str, str]
    texts: dict[str, str] | None = None


# The pinned artifacts asked for at once (npm SRI integrities, python_verify.wheel_key) -> each one,
# or why it cannot be had.
Artifacts = Callable[[list[str]], "dict[str, Artifact | str]"]


# A pass over every entry costs about what asking the directories of an eighth of them does.
_PASS_AFTER = 8


def _named_in(joined: str, names: tuple[str, ...]) -> list[str]:
    """The paths of ``joined`` (``View._joined``) whose last component is one of ``names``, in no
    order (``View.named`` sorts them): each found by ``str.find`` (C) where the name ends a path
    after a '/' or a NUL."""
    found: list[str] = []
    for name in set(names):
        needle = name + "\0"
        at = joined.find(needle, 1)
        while at >= 0:
            if joined[at - 1] in "/\0":
                found.append(joined[joined.rfind("\0", 0, at) + 1:at + len(name)])
            at = joined.find(needle, at + 1)
    return found


@dataclass
class View:
    """The two snapshots of one mount, their difference, and the bytes of the files rules read."""

    before: Snapshot
    after: Snapshot
    changes: list[Change]
    contents: Contents
    kind: str = "workspace"
    # The names in a directory now, from the filesystem (None: from the snapshot, slower on a big one).
    listdir: Callable[[str], list[str]] | None = None
    _text: dict[tuple[str, str], str | None] = field(default_factory=dict)
    _named: dict[tuple[str, tuple[str, ...]], list[str]] = field(default_factory=dict)
    # The packages' pinned artifacts (None: none can be had, nothing is verified against them).
    artifacts: Artifacts | None = None
    memo: dict[str, object] = field(default_factory=dict)  # results one rule computes and another reads
    # What the session image's tools write in a Python environment, and where this mount was in the
    # session (venv_facts.SessionPython; None: nothing is known, own files are not verified).
    python: object = None
    # ``changes`` are every difference between the sides (rules.audit diffs them itself): what the
    # end names is what the start named, less what was removed, plus what was added.
    complete: bool = False
    # joined_paths(before), when made ahead (while the session ran).
    before_paths: str | None = None

    @cached_property
    def changed(self) -> dict[str, Change]:
        """Paths whose content or existence changed (the first change of each path)."""
        found: dict[str, Change] = {}
        for change in self.changes:
            if change.what in ("added", "modified", "type", "link-target"):
                found.setdefault(change.path, change)
        return found

    def directory_above(self, kind: str, directory: str, holds: Callable[[str], bool],
                        outermost: bool = False) -> str | None:
        """The nearest (or with ``outermost``, the outermost) of ``directory`` and the directories
        above it for which ``holds`` is true (the mount's root is not asked). Each directory is asked
        once per audit and per ``kind``: a tree of thousands of files has far fewer directories."""
        memo: dict[str, str | None] = self.memo.setdefault(f"above:{kind}", {})  # type: ignore[assignment]
        if not directory:
            return None
        if directory not in memo:
            parent = directory.rpartition("/")[0]
            if outermost:
                memo[directory] = self.directory_above(kind, parent, holds, True) or (
                    directory if holds(directory) else None)
            else:
                memo[directory] = directory if holds(directory) else self.directory_above(kind, parent, holds)
        return memo[directory]

    def entry(self, path: str, side: str = "after") -> SnapshotEntry | None:
        return (self.after if side == "after" else self.before).get(path)

    def data(self, path: str, side: str = "after") -> bytes | None:
        entry = self.entry(path, side)
        if entry is None or entry.kind != "file":
            return None
        return self.contents(side, path)

    def text(self, path: str, side: str = "after") -> str | None:
        """A file's content as text (undecodable bytes kept as surrogates), cached."""
        key = (side, path)
        if key not in self._text:
            data = self.data(path, side)
            self._text[key] = None if data is None else data.decode("utf-8", "surrogateescape")
        return self._text[key]

    def json_object(self, path: str) -> dict[str, object] | None:
        """A file's content as a JSON object (None when absent, not JSON, or not an object)."""
        text = self.text(path)
        if text is None:
            return None
        try:
            document = json.loads(text)
        except (ValueError, RecursionError):
            return None
        return document if isinstance(document, dict) else None

    def new_lines(self, path: str) -> list[str]:
        """Lines of the file now that were not in it at the start (all of them if unknown then)."""
        after = self.text(path)
        if after is None:
            return []
        before = set((self.text(path, "before") or "").splitlines())
        return [line for line in after.splitlines() if line not in before]

    def worth_a_pass(self) -> bool:
        """Whether the changes are a good part of the entries (an install): a pass over every path
        (``named``) then costs less than asking each change's directories on their own."""
        return len(self.changes) * _PASS_AFTER >= len(self.after)

    def named(self, *names: str, side: str = "after") -> list[str]:
        """Paths whose last component is one of ``names``, sorted (cached)."""
        key = (side, names)
        if key not in self._named:
            snapshot = self.after if side == "after" else self.before
            if any("/" in n or "\0" in n or not n for n in names):  # no last component: the long way
                suffixes = tuple(f"/{n}" for n in names)
                found = [p for p in snapshot if p.endswith(suffixes) or p in names]
            elif side == "after" and self.complete:  # no pass over the end's paths
                after = self.after
                found = [p for p in self.named(*names, side="before") if p in after] + _named_in(self._added(), names)
            else:
                found = _named_in(self._joined(side, snapshot), names)
            self._named[key] = sorted(found)
        return self._named[key]

    def _added(self) -> str:
        """The paths added, joined as ``_joined`` joins a side's: searched in C (an install adds 20k)."""
        if "joined:added" not in self.memo:
            self.memo["joined:added"] = joined_paths([c.path for c in self.changes if c.what == "added"])
        return self.memo["joined:added"]  # type: ignore[return-value]

    def _joined(self, side: str, snapshot: Snapshot) -> str:
        """Every path of a side, each between NULs: searched in C for any name."""
        if side == "before" and self.before_paths is not None:
            return self.before_paths
        key = f"joined:{side}"
        if key not in self.memo:
            self.memo[key] = joined_paths(snapshot)
        return self.memo[key]  # type: ignore[return-value]

    def siblings(self, directory: str) -> list[str]:
        """The names in a directory at the end."""
        if self.listdir is not None:
            return self.listdir(directory)
        return self._children.get(directory, [])

    @cached_property
    def _children(self) -> dict[str, list[str]]:
        index: dict[str, list[str]] = {}
        for path in self.after:
            parent, _, name = path.rpartition("/")
            index.setdefault(parent, []).append(name)
        return index

    @cached_property
    def by_inode(self) -> dict[int, list[str]]:
        index: dict[int, list[str]] = {}
        for path, entry in self.after.items():
            if entry.kind == "file" and entry.nlink > 1:
                index.setdefault(entry.inode, []).append(path)
        return index


# The names installed dependencies and Python environments usually have: where a session's start
# keeps no bytes (a cost bound). Which directories are trees is decided by treeroots.py, by records.
_DEPENDENCY_TREE = re.compile(r"(?:^|/)(?:node_modules|vendor|\.pnpm|\.venv|venv|\.tox|\.nox|__pypackages__|"
                              r"site-packages|\.conda)/")


def in_dependency_tree(path: str) -> bool:
    """Under a directory named like a dependency tree or environment: a hint for what to skip at a
    session's start, never a verdict (treeroots.in_tree decides, from the tools' records)."""
    return _DEPENDENCY_TREE.search(path) is not None


def resolve(base_dir: str, target: str) -> str | None:
    """A target path resolved lexically from ``base_dir`` (mount-relative); None if it leaves the
    mount or is absolute."""
    if target.startswith("/") or target.startswith("~"):
        return None
    joined = posixpath.normpath(posixpath.join(base_dir, target))
    if joined == ".." or joined.startswith("../"):
        return None
    return "" if joined == "." else joined
