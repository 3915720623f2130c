"""Walks a mount with lstat and hashes its regular files: never follows links, never opens a FIFO,
socket or device, never crosses into another filesystem, never runs anything from the tree.

The walk is split over forked processes (one per CPU; walk_shares.py): each inherits the start
snapshot through fork and sends back only what differs from it, and a directory that lists as the
start walk saw it is not compared child by child, so the end-of-session audit costs little more
than ``git status`` does. Without fork, the same walk runs in-process.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from itertools import chain
from operator import attrgetter, itemgetter
from pathlib import Path
from typing import Protocol, TypeVar

from dejima.adapters.fork_workers import SnapshotError as SnapshotError  # raised here too: callers catch it from here
from dejima.adapters.fork_workers import gc_paused
from dejima.adapters.fork_workers import workers as default_workers
from dejima.adapters.hashed_file import hashed_content
from dejima.adapters.walk_shares import Digested, Result, Row, Unit, frontier, walk_shares
from dejima.core import snapshot as snapshots
from dejima.core.snapshot import (
    Children,
    Listing,
    Snapshot,
    SnapshotEntry,
    StartListing,
    joined_names,
    listing_digest,
    missing,
    nested_dirs,
)

# The C part (_stat_compare.c), built with dejima where a compiler was (setup.py): the trusted
# directories' comparison, and lstat without os.stat_result's float times. Without it the walk does
# both in Python, slower on a large tree (the 100k-file bench's end: ~1.7 x); `dejima doctor` says which one runs.
_same_directory: Callable[[int, str, str, tuple[str, ...], list[list[int]]], bool] | None
_lstat_all: Callable[[int, list[str]], tuple[list[str], Sequence[ChildStat]]] | None
try:
    from dejima.adapters._stat_compare import lstat_all as _lstat_all
    from dejima.adapters._stat_compare import same_directory as _same_directory
except ImportError:
    _same_directory = _lstat_all = None
NATIVE = _same_directory is not None

KINDS = {stat.S_IFREG: "file", stat.S_IFDIR: "dir", stat.S_IFLNK: "symlink", stat.S_IFIFO: "fifo",
          stat.S_IFSOCK: "socket", stat.S_IFCHR: "char", stat.S_IFBLK: "block"}
_ROOT = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC  # the mount itself may be reached through a link
_DIR_FLAGS = _ROOT | os.O_NOFOLLOW

# A directory with a child whose ctime is this recent is walked in full next time: a change in the
# same tick of the file system's clock as the walk's read would not move the ctime it recorded
# (git's "racy clean"). Covers a clock tick, and file systems that keep seconds or two.
RACY_NS = 3_000_000_000
# The end walk sends back the bytes of the new and changed files it hashed, for the rules to read
# without opening them again: each up to this size, and up to this much in all per process. Small:
# sending costs what reading again does for a file of ~16 kB, and after an install the rules read
# few of the files (npm: 600 package.json of 21k files; an 8 MB budget sent 16 MB for 140 of them).
SEND_FILE, SEND_TOTAL = 16 << 10, 1 << 20
# What a listing digest covers of each child, besides its name: ctime moves with any change to the
# inode (content, mode, owner, links, xattrs, times) and cannot be set back from user space.
_STAT_KEY = attrgetter("st_mode", "st_ino", "st_dev", "st_ctime_ns", "st_mtime_ns", "st_size")
_STAT_FIELDS = {"inode": "st_ino", "ctime_ns": "st_ctime_ns", "size": "st_size"}  # a SnapshotEntry's, lstat's


class ChildStat(Protocol):
    """What the walk reads of a child's lstat: os.stat_result's fields of these names (the C
    part's Stat has only these)."""

    @property
    def st_mode(self) -> int: ...
    @property
    def st_ino(self) -> int: ...
    @property
    def st_dev(self) -> int: ...
    @property
    def st_nlink(self) -> int: ...
    @property
    def st_uid(self) -> int: ...
    @property
    def st_gid(self) -> int: ...
    @property
    def st_size(self) -> int: ...
    @property
    def st_mtime_ns(self) -> int: ...
    @property
    def st_ctime_ns(self) -> int: ...


class InconsistentWalk(SnapshotError):
    """Even walked again, the tree did not hold still: ``paths`` are the entries the walk cannot
    account for (changed while it was walked); ``snapshot`` is the rest, which it can."""

    def __init__(self, paths: list[str], snapshot: Snapshot) -> None:
        shown = ", ".join(paths[:5]) + (f" and {len(paths) - 5} more" if len(paths) > 5 else "")
        super().__init__(f"the tree changed while it was walked; unsure about {shown}",
                         hint="something on the host is writing there; check those paths by hand")
        self.paths, self.snapshot = paths, snapshot


class _Walk:
    """One process's share of the walk.

    At the end of a session (``previous``, the start snapshot): the entries that differ from it,
    new and changed files hashed, and the listings of changed directories; a directory whose
    listing digest is the one the start walk took (``trusted``) holds the start's children, each
    unchanged, and is not compared child by child: it lists the names the start's entries name, and
    each child's inode, ctime and size are theirs (``listings``, where prepared during the session:
    the long way's comparison, one list per field), or else its listing digest is the start's. At the start
    (``digests``, those a previous walk left; empty for a full walk): each directory's listing
    digest; a directory whose digest is known is trusted as it was, any other is recorded in full
    (watched files hashed) with its listing and new digest."""

    def __init__(self, root: str, device: int, previous: Snapshot | None, hash_path: Callable[[str], bool],
                 list_all: bool = False, digests: dict[str, bytes] | None = None, racy_after: int = 0,
                 trusted: dict[str, bytes] | None = None, nested: Children | None = None,
                 listings: dict[str, StartListing] | None = None) -> None:
        self.root, self.device, self.hash_path = root, device, hash_path
        self.trusted = trusted or {}
        self.at_start = listings or {}  # the start's listings (``listings`` is what this walk sends back)
        self.column_names = snapshots.START_COLUMNS
        self.columns = [attrgetter(_STAT_FIELDS[column]) for column in self.column_names]
        # ``nested_dirs`` of ``previous``: a trusted directory's subdirectories to walk, without a look at each child.
        self.nested = nested
        # Every directory's listing sent back, not only those whose ctime moved: a walk that found
        # the tree inconsistent (something wrote there within the clock tick of the start walk, so
        # a directory changed without its ctime moving) then finds every removal.
        self.list_all = list_all
        self.checking = previous is not None  # the end of a session: every new or changed file is hashed
        self.previous: Snapshot = previous or {}
        self.digests, self.racy_after = digests, racy_after
        self.rows: list[Row] = []
        self.listings: list[Listing] = []
        self.digested: Digested = []
        self.contents: dict[str, bytes] = {}
        self.budget = SEND_TOTAL
        self.seen = 0
        # Equal modes and owners as one object each: marshal then writes references (measured with a
        # non-root owner: saving a third faster, loading a sixth).
        self.same: dict[int, int] = {}

    def fresh(self) -> _Walk:
        return _Walk(self.root, self.device, self.previous if self.checking else None, self.hash_path,
                     self.list_all, self.digests, self.racy_after, self.trusted, self.nested, self.at_start)

    def new_directories(self) -> dict[str, int]:
        """The directories this share recorded that the start did not hold, each with its link count."""
        get = self.previous.get  # a row: SnapshotEntry's fields (path, kind, ..., nlink 7th)
        return {row[0]: row[6] for row in self.rows if row[1] == "dir" and get(row[0]) is None} if self.checking else {}

    def result(self) -> Result:
        return self.rows, self.listings, self.seen, self.digested, self.contents

    def subtrees(self, units: Iterable[Unit]) -> Result:
        for unit in units:  # taken one at a time: another process may take the next
            stack = [unit]
            while stack:
                stack.extend(self.directory(*stack.pop()))
        return self.result()

    def directory(self, relative: str, listed: bool) -> list[Unit]:
        """Records one directory's children; returns the subdirectories to walk, each with whether
        its listing is needed to find what was removed from it."""
        fd = -1
        try:
            try:  # children are lstat'ed relative to the directory's fd: a shorter lookup, and no links
                fd = os.open(os.path.join(self.root, relative), _DIR_FLAGS) if relative else os.open(self.root, _ROOT)
                # Its own entry changed (``listed``): a child was added, removed or renamed; no digest to try.
                if not listed and self._as_listed(relative, fd):
                    self.seen += len(self.at_start[relative][1][0])
                    return self._nested(relative)
                listing, opened = os.listdir(fd), True
            except OSError:
                listing, opened, listed = [], False, self.checking  # what it held is out of view: count it as gone
            names, infos = _stats(fd, listing)
            if self.digests is not None:
                return self._digested(relative, fd, names, infos)
            if opened and not listed and relative in self.trusted and self._as_start(relative, names, infos):
                return self._unchanged(relative, names, infos)
            return self._children(relative, fd, names, infos, listed, len(listing))
        finally:
            if fd >= 0:
                os.close(fd)

    def _as_listed(self, relative: str, fd: int) -> bool:
        """``_as_start`` asked in C, before the directory is listed or any child lstat'ed in Python
        (the walk's cost on a large tree): it reads the directory and compares the start's names,
        in their order, and each child's columns with the start entry's. Any other answer, or no C
        part, is the long way's to give."""
        start = self.at_start.get(relative)
        return _same_directory is not None and start is not None and self.nested is not None \
            and not self.list_all and relative in self.trusted \
            and _same_directory(fd, start[0], f"/{relative}/" if relative else "/", self.column_names, start[1])

    def _as_start(self, relative: str, names: list[str], infos: Sequence[ChildStat]) -> bool:
        """Whether a directory the start listed with no racy child (``trusted``) lists as it did
        then: the same names in the same order, each child's columns the start entry's (a list
        compared in C, no digest to make); or, where the start holds its entries in another order
        than its listing's (a state kept before starts regrouped them) or none were prepared, its
        listing digest the start walk's."""
        start = self.at_start.get(relative)
        if start is not None and start[0] == joined_names(relative, names) and \
                all(list(map(column, infos)) == values for column, values in zip(self.columns, start[1], strict=True)):
            return True
        return self.trusted[relative] == _digest(names, infos)

    def _unchanged(self, relative: str, names: list[str], infos: Sequence[ChildStat]) -> list[Unit]:
        """An end walk's directory that lists as the start walk saw it: every child the start's
        own object, the subdirectories walked in turn."""
        self.seen += len(names)
        if self.list_all:
            self.listings.append((relative, names))
        if self.nested is not None:
            return self._nested(relative)
        prefix, device = relative + "/" if relative else "", self.device
        return [(prefix + name, False) for name, info in zip(names, infos, strict=True)
                if stat.S_ISDIR(info.st_mode) and info.st_dev == device]

    def _nested(self, relative: str) -> list[Unit]:
        """A trusted directory's subdirectories to walk: the same children as at the start, so
        those that held entries then (``nested``)."""
        assert self.nested is not None
        return [(path, False) for path in self.nested.get(relative, ())]

    def _children(self, relative: str, fd: int, names: list[str], infos: Sequence[ChildStat],
                  listed: bool, listed_count: int) -> list[Unit]:
        """Each child compared with the start's entry (``listed_count``: how many the directory
        listed, those gone before their lstat included)."""
        prefix = relative + "/" if relative else ""
        get, subdirs = self.previous.get, []
        for name, info in zip(names, infos, strict=True):
            path = prefix + name
            old = get(path)
            # ctime moves with every change to an inode (content, mode, owner, links, times, xattrs)
            # and cannot be set back from inside a container: an unchanged entry keeps its object.
            if old is None or old.ctime_ns != info.st_ctime_ns or old.inode != info.st_ino or old.size != info.st_size:
                if self._record(path, name, fd, info, old):
                    subdirs.append((path, self.checking and old is not None))
            elif old.kind == "dir" and info.st_dev == self.device:
                subdirs.append((path, False))
        self.seen += len(names)
        if listed or len(names) != listed_count or self.list_all:
            self.listings.append((relative, names))
        return subdirs

    def _digested(self, relative: str, fd: int, names: list[str], infos: Sequence[ChildStat]) -> list[Unit]:
        """A start walk's directory: trusted as the previous walk recorded it when its digest is
        the same (no child added, removed or changed: each would move a ctime, an inode or a name);
        otherwise every child recorded, with the listing and the new digest."""
        prefix = relative + "/" if relative else ""
        self.seen += len(names)
        digest = _digest(names, infos)
        assert self.digests is not None
        if self.digests.get(relative) == digest:
            self.digested.append((relative, digest))  # seen again: kept (a directory not seen drops its own)
            return [(prefix + name, False) for name, info in zip(names, infos, strict=True)
                    if stat.S_ISDIR(info.st_mode) and info.st_dev == self.device]
        subdirs = [(prefix + name, False) for name, info in zip(names, infos, strict=True)
                   if self._record(prefix + name, name, fd, info, None)]
        self.listings.append((relative, names))
        racy = any(info.st_ctime_ns >= self.racy_after for info in infos)
        self.digested.append((relative, None if racy else digest))
        return subdirs

    def _record(self, path: str, name: str, fd: int, info: ChildStat, old: SnapshotEntry | None) -> bool:
        """Adds a new or changed entry; returns whether to walk into it."""
        kind = KINDS.get(stat.S_IFMT(info.st_mode), "other")
        digest = target = caps = None
        if kind == "symlink":
            try:
                target = os.readlink(name, dir_fd=fd)
            except OSError:
                target = None  # vanished while walking
        elif kind == "file" and (self.checking or self.hash_path(path)):
            keep = self.checking and info.st_size <= SEND_FILE and info.st_size <= self.budget
            digest, data, caps = hashed_content(name, info.st_size, fd, keep, f"{self.root}/{path}")
            if data is not None:
                self.contents[path] = data
                self.budget -= len(data)
        same, mode, uid, gid = self.same.setdefault, stat.S_IMODE(info.st_mode), info.st_uid, info.st_gid
        self.rows.append((path, kind, same(mode, mode), same(uid, uid), same(gid, gid), info.st_size,
                          info.st_nlink, info.st_ino, info.st_ctime_ns, info.st_mtime_ns, digest, target, caps))
        descend = kind == "dir" and info.st_dev == self.device
        was_dir = kind == "dir" if self.digests is not None else old is not None and old.kind == "dir"
        if was_dir and not descend and (self.checking or self.digests is not None):
            self.listings.append((path, []))  # what it held is not walked any more
        return descend


def _digest(names: list[str], infos: Sequence[ChildStat]) -> bytes:
    """The listing digest of a directory's children (what the start walk keeps, the end compares)."""
    return listing_digest(names, list(chain.from_iterable(map(_STAT_KEY, infos))))


def _stats(fd: int, listing: list[str]) -> tuple[list[str], Sequence[ChildStat]]:
    """The names and lstat results of the children listed (in the directory open as ``fd``) that
    are still there. os.listdir and lstat: no DirEntry object per child."""
    if _lstat_all is not None:
        return _lstat_all(fd, listing)
    lstat = os.lstat
    try:
        return listing, [lstat(name, dir_fd=fd) for name in listing]
    except OSError:  # one vanished since the listing: left out, of the digest too
        names, infos = [], []
        for name in listing:
            try:
                infos.append(lstat(name, dir_fd=fd))
            except OSError:
                continue
            names.append(name)
        return names, infos


def _assemble(previous: Snapshot | None, entries: Snapshot, results: list[Result],
              children: Children | None = None, regroup: bool = False) -> tuple[Snapshot, list[str]]:
    """``entries``, a copy of ``previous``, updated with what the walk found; and the paths it
    recorded again or removed (every other entry is ``previous``'s own object). ``children``:
    ``children_of(previous)``, when built already. ``regroup``: the entries recorded again move
    to the end, in the order recorded (a start walk records a directory's children together, in
    its listing's order: kept so, the end compares the directory with its start listing)."""
    listings: list[Listing] = []
    seen = 0
    changed: list[str] = []
    for rows, lists, count, *_ in results:
        paths = list(map(itemgetter(0), rows))
        if regroup:
            for path in paths:
                entries.pop(path, None)
        entries.update(zip(paths, map(SnapshotEntry._make, rows), strict=True))
        changed += paths
        listings += lists
        seen += count
    # Removed entries are found through the listings of the directories whose ctime moved (adding,
    # removing or renaming an entry moves it), and only when the count of entries says some are
    # gone; the count then checks that trust. Sending back every name instead costs 25-50 ms more.
    if previous and len(entries) != seen:
        for path in missing(previous, listings, children):
            if entries.pop(path, None) is not None:
                changed.append(path)
    if len(entries) != seen:
        listed = {f"{d}/{n}" if d else n for d, names in listings for n in names}
        raise InconsistentWalk(sorted(p for p in entries if p not in listed), entries)
    return entries, changed


def _walk_once(root: Path, previous: Snapshot | None, hash_path: Callable[[str], bool], count: int,
               list_all: bool, trusted: dict[str, bytes] | None,
               children: Children | None, sizes: dict[str, int] | None,
               entries: Snapshot | None, contents: dict[str, bytes] | None,
               listed: dict[str, list[str]] | None,
               listings: dict[str, StartListing] | None = None) -> tuple[Snapshot, list[str]]:
    with gc_paused():
        # Copied before the fork: its reference counts are written now, not page by page after it.
        if entries is None:
            entries = dict(previous) if previous else {}  # unchanged entries stay the same objects
        nested = nested_dirs(children) if children is not None and trusted else None
        front = _Walk(str(root), os.stat(root).st_dev, previous, hash_path, list_all, trusted=trusted, nested=nested,
                      listings=listings if trusted else None)
        units = frontier(front, count, children, sizes)
        shares, _ = walk_shares(front, units, min(count, len(units)) if units else 1, sizes=sizes)
        results = [front.result(), *shares]
        walked = _assemble(previous, entries, results, children)
        for result in results:  # only those of a walk that added up
            if contents is not None:
                contents.update(result[4])
            if listed is not None:
                listed.update(result[1])
        return walked


WALK_ATTEMPTS = 3  # the fast walk, then walks that list every directory
T = TypeVar("T")


def take_snapshot(root: Path, previous: Snapshot | None = None, hash_path: Callable[[str], bool] = lambda path: True,
                  workers: int | None = None, trusted: dict[str, bytes] | None = None) -> Snapshot:
    """See ``walk_changes``: the snapshot alone."""
    return walk_changes(root, previous, hash_path, workers, trusted)[0]


def walk_changes(root: Path, previous: Snapshot | None = None, hash_path: Callable[[str], bool] = lambda path: True,
                 workers: int | None = None, trusted: dict[str, bytes] | None = None,
                 children: Children | None = None, sizes: dict[str, int] | None = None,
                 entries: Snapshot | None = None,
                 contents: dict[str, bytes] | None = None,
                 listed: dict[str, list[str]] | None = None,
                 listings: dict[str, StartListing] | None = None) -> tuple[Snapshot, list[str]]:
    """Every entry under ``root`` (itself excluded), keyed by its relative path.

    Regular files are hashed when ``hash_path`` says so, or when ``previous`` (the start snapshot)
    knew them with another (size, ctime, inode): a process in the container can set mtime but not
    ctime, so an unchanged tuple is an unchanged file, and only changed files are read. Entries
    that did not change are ``previous``'s own objects, which makes ``diff`` fast. ``workers``:
    how many processes walk (default: one per CPU; 1 walks in this process). ``trusted``: the
    listing digests the walk that took ``previous`` left (``Walked.digests``): a directory that
    still lists the same (names; mode, inode, device, ctime, mtime and size of each child) is
    ``previous``'s without a comparison per child. ``children``: ``children_of(previous)``, when
    built already (removed entries are then found without a pass over ``previous``; a trusted
    directory's subdirectories without a look at each child); ``sizes``: ``subtree_sizes(children)``,
    by which the walk is shared out; ``entries``: a copy of ``previous`` made ahead, which the walk
    updates in place (otherwise it copies ``previous`` itself); ``contents``: filled with the bytes
    of the new and changed files the walk hashed (SEND_FILE, SEND_TOTAL), the very bytes hashed;
    ``listed``: with the names in each directory the walk listed (those it held that changed; an
    empty list for one it could not open or would not enter); ``listings``: ``start_listings`` of
    ``previous`` for the directories of ``trusted``, by which those that list as they did are
    trusted without their digest.

    A walk that does not add up (the host wrote there while the start walk ran, e.g. git's own
    gc) is done again, listing every directory and comparing every child; InconsistentWalk names
    what still does not.
    Also returns the paths recorded again or removed: ``diff`` needs to look at no other.
    """
    count = max(1, workers or default_workers())
    return _retried(lambda attempt: _walk_once(root, previous, hash_path, count, list_all=attempt > 0,
                                               trusted=trusted if attempt == 0 and previous else None,
                                               children=children, sizes=sizes,
                                               entries=entries if attempt == 0 else None, contents=contents,
                                               listed=listed, listings=listings))


def _retried(walk: Callable[[int], T]) -> T:
    """``walk(attempt)`` until it adds up, at most WALK_ATTEMPTS times (the last InconsistentWalk is raised)."""
    for attempt in range(WALK_ATTEMPTS - 1):
        try:
            return walk(attempt)
        except InconsistentWalk:
            pass
    return walk(WALK_ATTEMPTS - 1)


@dataclass
class Known:
    """What a previous walk of a mount left: its directories' listing digests (trusted where the
    tree still lists the same), and its entries, loaded while the new walk runs."""

    digests: dict[str, bytes]
    load: Callable[[], Snapshot]


@dataclass
class Walked:
    snapshot: Snapshot
    digests: dict[str, bytes]  # of the directories walked whose children were not racy then
    changed: list[str]  # the paths recorded or removed: every other entry is the known one
    used_known: bool  # False when the walk was done again in full
    results: list[Result] = field(default_factory=list)  # what the walk recorded, listed and digested
    known: Known | None = None  # set while the known entries are still to be loaded: ``complete``

    def complete(self) -> Snapshot:
        """Loads the known entries and applies what the walk recorded (InconsistentWalk when
        they do not add up to what it counted)."""
        if self.known is not None:
            self.snapshot, self.changed = complete_start(self.known.load(), self.results)
            self.known = None
        return self.snapshot


def start_snapshot(root: Path, hash_path: Callable[[str], bool] = lambda path: True, known: Known | None = None,
                   workers: int | None = None, defer: bool = False) -> Walked:
    """The snapshot of a session's start: like ``take_snapshot`` without ``previous`` (files
    hashed when ``hash_path`` says so), with every directory's listing digest. Given ``known``,
    the entries of directories whose digest is unchanged are ``known``'s own objects and only the
    others are recorded; a walk that does not add up is done again in full. ``defer``: the known
    entries are loaded by ``Walked.complete``, later (the walk needs only their digests)."""
    count = max(1, workers or default_workers())
    # racy_after is taken before each walk: what the walk reads later is newer
    return _retried(lambda attempt: _start_once(root, hash_path, known if attempt == 0 else None, count,
                                                time.time_ns() - RACY_NS, defer))


def _start_once(root: Path, hash_path: Callable[[str], bool], known: Known | None, count: int,
                racy_after: int, defer: bool) -> Walked:
    with gc_paused():
        digests = known.digests if known is not None else {}
        front = _Walk(str(root), os.stat(root).st_dev, None, hash_path, digests=digests, racy_after=racy_after)
        units = frontier(front, count)
        # Not deferred, the children walk while this process loads the known entries (the
        # largest part of the start on a big tree, and not needed by the children).
        load = known.load if known is not None and not defer else None
        shares, loaded = walk_shares(front, units, count, meanwhile=load)
        results = [front.result(), *shares]
        # Only what this walk saw: racy directories (None) keep no digest, nor those it did not walk
        # (gone, or on another file system); the end walk trusts these.
        fresh = {d: v for result in results for d, v in result[3] if v is not None}
        walked = Walked({}, fresh, [], known is not None, results, known if defer else None)
        if not defer or known is None:
            walked.snapshot, walked.changed = complete_start(loaded if loaded is not None else {}, results)
        return walked


def complete_start(entries: Snapshot, results: list[Result]) -> tuple[Snapshot, list[str]]:
    """``entries`` (the known ones, changed in place) with what a start walk recorded applied; and
    the paths it recorded or removed."""
    with gc_paused():
        # A child that was a directory and is not walked into any more takes what was below it along.
        gone: list[Listing] = [(row[0], []) for rows, *_ in results for row in rows
                               if row[1] != "dir" and (old := entries.get(row[0])) is not None and old.kind == "dir"]
        return _assemble(entries, entries, [*results, ([], gone, 0, [], {})], regroup=True)
