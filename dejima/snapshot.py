"""Walks a mount with lstat and hashes its regular files: never follows links, never opens a FIFO,
socket or device, never crosses into another filesystem, never runs anything from the tree.

The walk is split over forked processes (one per CPU): each inherits the start snapshot through
fork and sends back only what differs from it, so the end-of-session audit costs about what
``git status`` does. Without fork, the same walk runs in-process.
"""

from __future__ import annotations

import errno
import gc
import hashlib
import marshal
import os
import signal
import stat
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from operator import itemgetter
from pathlib import Path
from typing import Any

from dejima.core.snapshot import Entry, Listing, Snapshot, decode, encode, missing
from dejima.errors import DiagnosticError

MAX_HASH_BYTES = 64 << 20
KINDS = {stat.S_IFREG: "file", stat.S_IFDIR: "dir", stat.S_IFLNK: "symlink", stat.S_IFIFO: "fifo",
          stat.S_IFSOCK: "socket", stat.S_IFCHR: "char", stat.S_IFBLK: "block"}
_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_ROOT = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC  # the mount itself may be reached through a link
_DIR_FLAGS = _ROOT | os.O_NOFOLLOW
_MAX_WORKERS = 8  # lstat-bound: more processes mostly cost forks
_UNITS_PER_WORKER = 8  # directories dealt to each process, so one big directory does not idle the rest

Row = tuple[Any, ...]  # an Entry's fields as a plain tuple: what marshal carries
Result = tuple[list[Row], list[Listing], int]  # a share's rows, listings, and how many entries it saw


class SnapshotError(DiagnosticError):
    """The walk could not see the whole tree: a partial snapshot would hide changes."""

    reference = "audit-snapshot-failed"


class InconsistentWalk(SnapshotError):
    """Even walked again, the tree did not hold still: ``paths`` are the entries the walk cannot
    account for (changed while it was walked); ``snapshot`` is the rest, which it can."""

    def __init__(self, paths: list[str], snapshot: Snapshot) -> None:
        shown = ", ".join(paths[:5]) + (f" and {len(paths) - 5} more" if len(paths) > 5 else "")
        super().__init__(f"the tree changed while it was walked; unsure about {shown}",
                         hint="something on the host is writing there; check those paths by hand")
        self.paths, self.snapshot = paths, snapshot


def _hash(name: str, size: int, directory: int) -> str:
    digest = hashlib.sha256()
    # O_NOFOLLOW and O_NONBLOCK: a file swapped for a link or a FIFO between lstat and open is
    # refused instead of followed or waited on.
    try:
        fd = os.open(name, _OPEN_FLAGS, dir_fd=directory)
    except OSError as exc:
        return f"unreadable:{exc.errno}"  # still compared: a change of readability is a change
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return "not-a-file"
        remaining = min(size, MAX_HASH_BYTES)
        while remaining > 0:
            chunk = os.read(fd, min(1 << 20, remaining))
            if not chunk:
                break
            digest.update(chunk)
            remaining -= len(chunk)
    finally:
        os.close(fd)
    return digest.hexdigest() + ("" if size <= MAX_HASH_BYTES else f"+truncated:{size}")


def _caps(path: str) -> bool | None:
    if not hasattr(os, "getxattr"):
        return None
    try:
        return bool(os.getxattr(path, "security.capability", follow_symlinks=False))
    except OSError as exc:
        return False if exc.errno in (errno.ENODATA, errno.ENOTSUP) else None


class _Walk:
    """One process's share of the walk: the entries that differ from ``previous`` (all of them
    without one; new and changed files hashed) and the listings of changed directories."""

    def __init__(self, root: str, device: int, previous: Snapshot | None, hash_path: Callable[[str], bool],
                 list_all: bool = False) -> None:
        self.root, self.device, self.hash_path = root, device, hash_path
        # Every directory's listing sent back, not only those whose ctime moved: a walk that found
        # the tree inconsistent (something wrote there within the clock tick of the start walk, so
        # a directory changed without its ctime moving) then finds every removal.
        self.list_all = list_all
        self.checking = previous is not None  # the end of a session: every new or changed file is hashed
        self.previous: Snapshot = previous or {}
        self.rows: list[Row] = []
        self.listings: list[Listing] = []
        self.seen = 0
        # Equal modes and owners as one object each: marshal then writes references (measured with a
        # non-root owner: saving a third faster, loading a sixth).
        self.same: dict[int, int] = {}

    def fresh(self) -> _Walk:
        return _Walk(self.root, self.device, self.previous if self.checking else None, self.hash_path,
                     self.list_all)

    def result(self) -> Result:
        return self.rows, self.listings, self.seen

    def subtrees(self, units: Iterable[tuple[str, bool]]) -> None:
        stack = list(units)
        while stack:
            stack.extend(self.directory(*stack.pop()))

    def directory(self, relative: str, listed: bool) -> list[tuple[str, bool]]:
        """Records one directory's children; returns the subdirectories to walk, each with whether
        its listing is needed to find what was removed from it."""
        fd = -1
        try:  # children are lstat'ed relative to the directory's fd: a shorter lookup, and no links
            fd = os.open(os.path.join(self.root, relative), _DIR_FLAGS) if relative else os.open(self.root, _ROOT)
            children = list(os.scandir(fd))
        except OSError:
            children, listed = [], self.checking  # what it held is out of view: count it as gone
        try:
            return self._children(relative, fd, children, listed)
        finally:
            if fd >= 0:
                os.close(fd)

    def _children(self, relative: str, fd: int, children: list[os.DirEntry[str]],
                  listed: bool) -> list[tuple[str, bool]]:
        prefix = relative + "/" if relative else ""
        get, subdirs, vanished = self.previous.get, [], set()
        for child in children:
            try:
                info = child.stat(follow_symlinks=False)
            except OSError:
                vanished.add(child.name)
                continue
            path = prefix + child.name
            old = get(path)
            # ctime moves with every change to an inode (content, mode, owner, links, times, xattrs)
            # and cannot be set back from inside a container: an unchanged entry keeps its object.
            if old is None or old.ctime_ns != info.st_ctime_ns or old.inode != info.st_ino or old.size != info.st_size:
                if self._record(path, child.name, fd, info, old):
                    subdirs.append((path, self.checking and old is not None))
            elif old.kind == "dir" and info.st_dev == self.device:
                subdirs.append((path, False))
        self.seen += len(children) - len(vanished)
        if listed or vanished or self.list_all:
            self.listings.append((relative, [c.name for c in children if c.name not in vanished]))
        return subdirs

    def _record(self, path: str, name: str, fd: int, info: os.stat_result, old: Entry | None) -> bool:
        """Adds a new or changed entry; returns whether to walk into it."""
        kind = KINDS.get(stat.S_IFMT(info.st_mode), "other")
        digest = target = caps = None
        if kind == "symlink":
            try:
                target = os.readlink(name, dir_fd=fd)
            except OSError:
                target = None  # vanished while walking
        elif kind == "file" and (self.checking or self.hash_path(path)):
            digest, caps = _hash(name, info.st_size, fd), _caps(os.path.join(self.root, path))
        same, mode, uid, gid = self.same.setdefault, stat.S_IMODE(info.st_mode), info.st_uid, info.st_gid
        self.rows.append((path, kind, same(mode, mode), same(uid, uid), same(gid, gid), info.st_size,
                          info.st_nlink, info.st_ino, info.st_ctime_ns, info.st_mtime_ns, digest, target, caps))
        descend = kind == "dir" and info.st_dev == self.device
        if self.checking and old is not None and old.kind == "dir" and not descend:
            self.listings.append((path, []))  # what it held is not walked any more
        return descend


@contextmanager
def _gc_paused() -> Iterator[None]:
    # Building 100k entries would trigger full collections that scan all of them, several times.
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _workers() -> int:
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return min(cpus, _MAX_WORKERS) if hasattr(os, "fork") else 1


def _frontier(front: _Walk, count: int) -> list[tuple[str, bool]]:
    """Walks the top of the tree here until there are enough directories to deal out."""
    units = front.directory("", front.checking)  # the root is no entry: its listing is always taken
    while count > 1 and units and len(units) < count * _UNITS_PER_WORKER:
        units.extend(front.directory(*units.pop(0)))
    return units


def _fork(walk: _Walk, units: list[tuple[str, bool]]) -> tuple[int, int]:
    """Walks ``units`` in a child process; returns its pid and the pipe its result comes through."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child only reads the filesystem and writes to its pipe
        code = 2  # stopped before its result was written
        try:
            os.close(read_end)
            try:
                walk.subtrees(units)
                data, status = marshal.dumps(walk.result()), 0
            except BaseException as exc:  # reported to the parent, which raises
                data, status = marshal.dumps(repr(exc)), 1
            with open(write_end, "wb") as pipe:
                pipe.write(data)
            code = status
        finally:
            os._exit(code)
    os.close(write_end)
    return pid, read_end


def _collect(pid: int, read_end: int) -> Result:
    try:
        with open(read_end, "rb") as pipe:
            data = pipe.read()
    finally:
        code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    try:
        result = marshal.loads(data) if code in (0, 1) else f"exit status {code}"
    except (EOFError, ValueError, TypeError) as exc:
        result = f"unreadable result: {exc}"
    if code != 0 or not isinstance(result, tuple):
        raise SnapshotError(f"a snapshot walker process failed ({result}); the snapshot would be partial",
                            hint="run the audit again; if it fails again, report it")
    return result


def _walk_shares(front: _Walk, units: list[tuple[str, bool]], count: int) -> list[Result]:
    """Deals ``units`` round-robin to ``count`` processes, this one included."""
    shares, children, local = [units[i::count] for i in range(count)], [], front.fresh()
    try:
        for share in shares[1:]:
            try:
                children.append(_fork(front.fresh(), share))
            except OSError:
                local.subtrees(share)  # no fork: the same walk, here
        local.subtrees(shares[0])
        results = [local.result()]
        while children:
            results.append(_collect(*children.pop(0)))
        return results
    finally:
        for pid, read_end in children:  # left only by an error: stop and reap them
            os.kill(pid, signal.SIGKILL)
            os.close(read_end)
            os.waitpid(pid, 0)


def _assemble(previous: Snapshot | None, entries: Snapshot, results: list[Result]) -> Snapshot:
    """``entries``, a copy of ``previous``, updated with what the walk found."""
    listings: list[Listing] = []
    seen = 0
    for rows, lists, count in results:
        entries.update(zip(map(itemgetter(0), rows), map(Entry._make, rows), strict=True))
        listings += lists
        seen += count
    # Removed entries are found through the listings of the directories whose ctime moved (adding,
    # removing or renaming an entry moves it), and only when the count of entries says some are
    # gone; the count then checks that trust. Sending back every name instead costs 25-50 ms more.
    if previous and len(entries) != seen:
        for path in missing(previous, listings):
            entries.pop(path, None)
    if len(entries) != seen:
        listed = {f"{d}/{n}" if d else n for d, names in listings for n in names}
        raise InconsistentWalk(sorted(p for p in entries if p not in listed), entries)
    return entries


def _walk_once(root: Path, previous: Snapshot | None, hash_path: Callable[[str], bool], count: int,
               list_all: bool) -> Snapshot:
    with _gc_paused():
        # Copied before the fork: its reference counts are written now, not page by page after it.
        entries = dict(previous) if previous else {}  # unchanged entries stay the same objects
        front = _Walk(str(root), os.stat(root).st_dev, previous, hash_path, list_all)
        units = _frontier(front, count)
        shares = _walk_shares(front, units, min(count, len(units))) if units else []
        return _assemble(previous, entries, [front.result(), *shares])


WALK_ATTEMPTS = 3  # the fast walk, then walks that list every directory


def take_snapshot(root: Path, previous: Snapshot | None = None,
                  hash_path: Callable[[str], bool] = lambda path: True, workers: int | None = None) -> Snapshot:
    """Every entry under ``root`` (itself excluded), keyed by its relative path.

    Regular files are hashed when ``hash_path`` says so, or when ``previous`` (the start snapshot)
    knew them with another (size, ctime, inode): a process in the container can set mtime but not
    ctime, so an unchanged tuple is an unchanged file, and only changed files are read. Entries
    that did not change are ``previous``'s own objects, which makes ``diff`` fast. ``workers``:
    how many processes walk (default: one per CPU; 1 walks in this process).

    A walk that does not add up (the host wrote there while the start walk ran, e.g. git's own
    gc) is done again, listing every directory; InconsistentWalk names what still does not.
    """
    count = max(1, workers or _workers())
    for attempt in range(WALK_ATTEMPTS):
        try:
            return _walk_once(root, previous, hash_path, count, list_all=attempt > 0)
        except InconsistentWalk:
            if attempt == WALK_ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")


def read_kept(root: Path, snapshot: Snapshot, keep: Callable[[str], bool], limit: int = 1 << 20) -> dict[str, bytes]:
    """The bytes of the regular files ``keep`` selects (the audit diffs them and can restore them)."""
    kept: dict[str, bytes] = {}
    for path in filter(keep, snapshot):
        entry = snapshot[path]
        if entry.kind != "file" or entry.size > limit:
            continue
        try:
            fd = os.open(os.path.join(root, path), _OPEN_FLAGS)
        except OSError:
            continue
        try:
            if stat.S_ISREG(os.fstat(fd).st_mode):
                kept[path] = os.read(fd, limit)
        finally:
            os.close(fd)
    return kept


def save_snapshot(path: Path, snapshot: Snapshot) -> None:
    """Writes ``snapshot`` to ``path`` (mode 0600), atomically: a reader sees the old file or the new."""
    with _gc_paused():
        data = encode(snapshot)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        with open(fd, "wb") as file:
            os.fchmod(fd, 0o600)  # a stale temporary file keeps its mode through O_CREAT
            file.write(data)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def load_snapshot(path: Path) -> Snapshot:
    """Reads what ``save_snapshot`` wrote; raises ValueError for anything else."""
    data = path.read_bytes()
    try:
        with _gc_paused():
            return decode(data)
    except ValueError as exc:
        raise ValueError(f"the snapshot state file {path} is unusable: {exc}") from exc
