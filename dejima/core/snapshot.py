"""Snapshots of a writable mount, their difference and their encoding on disk: the audit's raw
material (pure values).

An entry is what ``lstat`` saw plus, for regular files, a content hash; links are never followed
and special files never opened (the adapter in dejima/adapters/tree_walk.py takes care of that). Paths are
relative to the mount's root, '/'-separated, as text (surrogate-escaped when not UTF-8).
"""

from __future__ import annotations

import hashlib
import marshal
import stat
import struct
import zlib
from collections.abc import Iterable, Iterator
from itertools import chain, compress, filterfalse, groupby, repeat
from operator import attrgetter, is_not, itemgetter, methodcaller
from typing import Any, NamedTuple

# An encoded snapshot: this line, a CRC-32 of the body, then the body: marshal of the entries as
# plain tuples. marshal is the fastest codec for them (JSON is 2-3 x slower) and, unlike pickle,
# builds only plain values.
_MAGIC = b"dejima-snapshot 1\n"


def mode_text(mode: int) -> str:
    """Permission bits as chmod and ls -n write them (0644, 4755), never Python's 0o644."""
    return f"{stat.S_IMODE(mode):04o}"


class SnapshotEntry(NamedTuple):
    """A NamedTuple, not a dataclass: a snapshot holds one per file, and building them is the
    audit's hot path."""

    path: str
    kind: str  # file, dir, symlink, fifo, socket, char, block
    mode: int  # permission bits incl. setuid/setgid/sticky
    uid: int
    gid: int
    size: int
    nlink: int
    inode: int
    ctime_ns: int
    mtime_ns: int  # settable from inside the container: evidence, never trusted
    sha256: str | None = None  # regular files
    target: str | None = None  # symlinks
    caps: bool | None = None  # regular files: carries security.capability (None: not checked)

    @property
    def privileged_bits(self) -> int:
        return self.mode & (stat.S_ISUID | stat.S_ISGID)


class Change(NamedTuple):
    """A NamedTuple, as SnapshotEntry: an install makes one per file, and a frozen dataclass's
    making costs four times a tuple's (the end audit's diff of a 21k-file tree: 19 → 7 ms)."""

    path: str
    what: str  # added, removed, modified, mode, type, link-target, owner, nlink
    before: SnapshotEntry | None
    after: SnapshotEntry | None


Snapshot = dict[str, SnapshotEntry]
Listing = tuple[str, list[str]]  # a directory (relative path, "" for the root) and the names it holds
Children = dict[str, list[str]]  # a directory ("" for the root) -> the paths of its children


def _content_changed(old: SnapshotEntry, new: SnapshotEntry) -> bool:
    if old.sha256 is not None and new.sha256 is not None:
        return old.sha256 != new.sha256
    # Not hashed at the start: the (size, ctime, inode) tuple decides; ctime cannot be set back.
    return (old.size, old.ctime_ns, old.inode) != (new.size, new.ctime_ns, new.inode)


def changed_paths(before: Snapshot, after: Snapshot) -> list[str]:
    """The paths whose entries may differ (added, removed, or recorded again)."""
    return _candidates(before, after)


def _candidates(before: Snapshot, after: Snapshot) -> list[str]:
    """The paths whose entries may differ. A walk given ``previous`` keeps each unchanged entry as
    the very same object, so identity skips those without a Python-level loop."""
    paths = list(compress(after, map(is_not, map(before.get, after), after.values())))
    added = sum(1 for path in paths if path not in before)
    if len(after) - added != len(before):  # some path of ``before`` is missing from ``after``
        paths.extend(filterfalse(after.__contains__, before))
    return paths


def _changes(path: str, old: SnapshotEntry, new: SnapshotEntry) -> list[Change]:
    if old.kind != new.kind:
        return [Change(path, "type", old, new)]
    found = []
    if new.kind == "file" and _content_changed(old, new):
        found.append(Change(path, "modified", old, new))
    if old.target != new.target:
        found.append(Change(path, "link-target", old, new))
    if old.mode != new.mode:
        found.append(Change(path, "mode", old, new))
    if (old.uid, old.gid) != (new.uid, new.gid):
        found.append(Change(path, "owner", old, new))
    if new.kind == "file" and old.nlink != new.nlink:  # a new hard link to the file, or one less
        found.append(Change(path, "nlink", old, new))
    return found


def by_directory(changes: list[Change]) -> Iterator[tuple[str, list[Change]]]:
    """Each run of ``changes`` (sorted by path, as ``diff`` gives them) in one directory, with that
    directory: what rules ask once per directory are asked once per run (the runs cut out in C)."""
    parents = map(itemgetter(0), map(methodcaller("rpartition", "/"), map(attrgetter("path"), changes)))
    for directory, run in groupby(zip(parents, changes, strict=True), key=itemgetter(0)):
        yield directory, list(map(itemgetter(1), run))


def joined_paths(paths: Iterable[str]) -> str:
    """Every path (of a snapshot) between NULs (in no path): searched in C for any last component
    (audit.model.View.named)."""
    return "\0" + "\0".join(paths) + "\0"


def diff(before: Snapshot, after: Snapshot, candidates: Iterable[str] | None = None) -> list[Change]:
    """Every difference between two snapshots of one mount, sorted by path. ``candidates``: the
    only paths that can differ, when the walk that made ``after`` says so (all others are
    ``before``'s own objects)."""
    paths = sorted(_candidates(before, after) if candidates is None else candidates)
    olds = list(map(before.get, paths))
    if not any(olds):  # every path added (an install): each made in C, no bytecode per path
        return list(map(Change._make, zip(paths, repeat("added"), olds, map(after.get, paths))))
    changes: list[Change] = []
    for path, old in zip(paths, olds, strict=True):
        new = after.get(path)
        if old is None:
            changes.append(Change(path, "added", None, new))
        elif new is None:
            changes.append(Change(path, "removed", old, None))
        else:
            changes.extend(_changes(path, old, new))
    return changes


def missing(before: Snapshot, listings: list[Listing], children: Children | None = None) -> list[str]:
    """The paths of ``before`` gone from the listed directories, and everything that was below them.
    ``children``: ``children_of(before)``, when built already (then no pass over all of ``before``)."""
    present = {directory: set(names) for directory, names in listings}
    if children is not None:
        return _missing_below(before, present, children)
    # The paths under a listed directory, picked in C (no bytecode per entry of a large tree);
    # then those it no longer lists.
    parents = map(itemgetter(0), map(methodcaller("rpartition", "/"), before))
    gone = [path for path in compress(before, map(present.__contains__, parents))
            if (parted := path.rpartition("/"))[2] not in present[parted[0]]]
    below = tuple(path + "/" for path in gone if before[path].kind == "dir")
    return gone + [path for path in before if path.startswith(below)] if below else gone


def _missing_below(before: Snapshot, present: dict[str, set[str]], children: Children) -> list[str]:
    gone = [path for directory, names in present.items() for path in children.get(directory, ())
            if path.rpartition("/")[2] not in names]
    below: list[str] = []
    stack = [path for path in gone if before[path].kind == "dir"]
    while stack:
        inside = children.get(stack.pop(), [])
        below += inside
        stack += inside  # a file has no children: looked up, found none
    return gone + below


def children_of(snapshot: Snapshot) -> Children:
    """Each directory's children in ``snapshot`` (built while a session runs: the end audit then
    finds what was removed from a directory without a pass over every entry)."""
    index: Children = {}
    parents = map(itemgetter(0), map(methodcaller("rpartition", "/"), snapshot))
    # A walk records a directory's children together: one group each, mostly.
    for parent, group in groupby(zip(parents, snapshot, strict=True), key=itemgetter(0)):
        index.setdefault(parent, []).extend(map(itemgetter(1), group))
    return index


def nested_dirs(children: Children) -> Children:
    """Each directory's subdirectories that hold entries, from ``children_of`` a snapshot: below a
    directory that lists as it did then, the only ones to walk into (any other held nothing, or
    was on another file system, and a change to that would have moved its own ctime)."""
    nested: Children = {}
    for directory in children:
        if directory:
            nested.setdefault(directory.rpartition("/")[0], []).append(directory)
    return nested


# What the end walk compares of each child of a directory the start listed with no racy child, to
# trust the directory without its listing digest: the fields of the long way's comparison
# (tree_walk._Walk._children), which every change to a child moves (ctime cannot be set back).
START_COLUMNS = ("inode", "ctime_ns", "size")
# A directory's children at the start: their names as ``joined_names`` joins them, and each of
# START_COLUMNS as a list, in the snapshot's order.
StartListing = tuple[str, list[list[int]]]


def joined_names(directory: str, names: list[str]) -> str:
    """The names in ``directory`` as one text, as ``start_listings`` keeps them: each followed by
    the directory's path ('/' is in no name, so the text is unambiguous), joined in one call."""
    return f"/{directory}/".join(names) if directory else "/".join(names)


def start_listings(snapshot: Snapshot, children: Children, directories: Iterable[str]) -> dict[str, StartListing]:
    """What each of ``directories`` held in ``snapshot`` (``children``: ``children_of`` it), for
    the end walk to compare a directory's listing with, child by child (built while a session runs)."""
    columns = [attrgetter(column) for column in START_COLUMNS]
    listings: dict[str, StartListing] = {}
    for directory in directories:
        paths = children.get(directory, [])
        entries = list(map(snapshot.__getitem__, paths))
        # "/".join of the paths is the names joined as ``joined_names`` does, after the first prefix.
        skip = len(directory) + 1 if directory and paths else 0
        listings[directory] = ("/".join(paths)[skip:], [list(map(column, entries)) for column in columns])
    return listings


def subtree_sizes(children: Children) -> dict[str, int]:
    """How many entries each directory of ``children`` holds, at any depth (the end walk deals its
    directories out to processes by these)."""
    sizes = {directory: len(paths) for directory, paths in children.items()}
    for directory in sorted(children, key=lambda d: d.count("/") + bool(d), reverse=True):  # deepest first
        parent = directory.rpartition("/")[0]
        if directory and parent in sizes:
            sizes[parent] += sizes[directory]
    return sizes


def listing_digest(names: list[str], values: list[int]) -> bytes:
    """What one directory holds, as its children's names and stat values (the same number for
    each, in listing order): equal digests mean no child was added, removed, renamed or changed in
    any way that moves its ctime. A cryptographic hash, not a CRC: the session chooses names,
    sizes and mtimes. '/' cannot be part of a name, so the names joined by it are unambiguous."""
    try:
        packed = b"q" + struct.pack(f"={len(values)}q", *values)  # one call: the walk's hot path
    except struct.error:  # a value past 64 bits (some inode numbers): the slower, general form
        packed = b"m" + marshal.dumps(values, 2)
    digest = hashlib.blake2b(packed, digest_size=16)
    digest.update("/".join(names).encode("utf-8", "surrogateescape"))
    return digest.digest()


Delta = tuple[list[tuple[object, ...]], list[str]]  # entries (as rows) that differ, paths removed


def compose(previous: Delta, snapshot: Snapshot, changed: Iterable[str]) -> Delta:
    """The delta from a base to ``snapshot``, given ``previous`` (from the base to the snapshot a
    walk started from) and the paths that walk ``changed`` (recorded again or removed)."""
    rows = {row[0]: row for row in previous[0]}
    removed = set(previous[1])
    for path in changed:
        rows.pop(path, None)  # recorded again: after the others, in the order recorded
        entry = snapshot.get(path)
        if entry is None:
            removed.add(path)
        else:
            rows[path] = tuple(entry)
            removed.discard(path)
    return list(rows.values()), sorted(removed)


def apply_delta(base: Snapshot, change: Delta) -> Snapshot:
    """``base`` (changed in place) with ``change`` applied."""
    rows, removed = change
    paths = list(map(itemgetter(0), rows))
    for path in chain(removed, paths):  # a row after the base's entries, in the delta's order (``compose``)
        base.pop(path, None)
    base.update(zip(paths, map(SnapshotEntry._make, rows), strict=True))
    return base


def frame(magic: bytes, value: Any) -> bytes:
    """``value`` marshalled, after ``magic`` (what it is, which version) and a CRC-32 of it."""
    body = marshal.dumps(value)
    return magic + zlib.crc32(body).to_bytes(4, "big") + body


def unframe(magic: bytes, data: bytes, what: str) -> Any:
    """What ``frame`` made with ``magic``; ValueError for anything else (``what`` names it)."""
    start = len(magic) + 4
    if not data.startswith(magic) or len(data) < start:
        raise ValueError(f"not a {what}, or one from another version")
    body = memoryview(data)[start:]
    if zlib.crc32(body) != int.from_bytes(data[len(magic):start], "big"):
        raise ValueError("corrupt: its checksum does not match")
    try:
        return marshal.loads(body)
    except (EOFError, TypeError, ValueError) as exc:
        raise ValueError(f"cannot be decoded: {exc}") from exc


def encode(snapshot: Snapshot) -> bytes:
    return frame(_MAGIC, list(map(tuple, snapshot.values())))


def decode(data: bytes) -> Snapshot:
    """What ``encode`` made; ValueError for anything else."""
    rows = unframe(_MAGIC, data, "dejima snapshot")
    try:
        if not isinstance(rows, list):
            raise TypeError(f"a {type(rows).__name__}, not a list of entries")
        return dict(zip(map(itemgetter(0), rows), map(SnapshotEntry._make, rows), strict=True))
    except (EOFError, TypeError, ValueError, IndexError) as exc:
        raise ValueError(f"cannot be decoded: {exc}") from exc
