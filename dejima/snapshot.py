"""Walks a mount with lstat and hashes its regular files: never follows links, never opens a FIFO,
socket or device, never runs anything from the tree."""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Callable
from pathlib import Path

from dejima.core.snapshot import Entry, Snapshot

MAX_HASH_BYTES = 64 << 20
_KINDS = {stat.S_IFREG: "file", stat.S_IFDIR: "dir", stat.S_IFLNK: "symlink", stat.S_IFIFO: "fifo",
          stat.S_IFSOCK: "socket", stat.S_IFCHR: "char", stat.S_IFBLK: "block"}


def _hash(path: str, size: int) -> str:
    digest = hashlib.sha256()
    # O_NOFOLLOW and O_NONBLOCK: a file swapped for a link or a FIFO between lstat and open is
    # refused instead of followed or waited on.
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
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


def take_snapshot(root: Path, previous: Snapshot | None = None,
                  hash_path: Callable[[str], bool] = lambda path: True) -> Snapshot:
    """Every entry under ``root`` (itself excluded), keyed by its relative path.

    Regular files are hashed when ``hash_path`` says so, or when ``previous`` (the start snapshot)
    knew them with another (size, ctime, inode): a process in the container can set mtime but not
    ctime, so an unchanged tuple is an unchanged file, and only changed files are read.
    """
    entries: Snapshot = {}
    device = os.lstat(root).st_dev
    stack = [""]
    while stack:
        relative = stack.pop()
        directory = os.path.join(root, relative) if relative else str(root)
        try:
            children = list(os.scandir(directory))
        except OSError:
            continue
        for child in children:
            path = f"{relative}/{child.name}" if relative else child.name
            try:
                info = child.stat(follow_symlinks=False)
            except OSError:
                continue  # vanished while walking
            kind = _KINDS.get(stat.S_IFMT(info.st_mode), "other")
            old = previous.get(path) if previous is not None else None
            same = (old is not None and old.kind == kind == "file"
                    and (old.size, old.ctime_ns, old.inode) == (info.st_size, info.st_ctime_ns, info.st_ino))
            if kind != "file":
                digest = None
            elif same:
                digest = old.sha256 if old is not None else None
            elif hash_path(path) or previous is not None:
                digest = _hash(child.path, info.st_size)
            else:
                digest = None
            entry = Entry(
                path=path, kind=kind, mode=stat.S_IMODE(info.st_mode), uid=info.st_uid, gid=info.st_gid,
                size=info.st_size, nlink=info.st_nlink, inode=info.st_ino, ctime_ns=info.st_ctime_ns,
                sha256=digest, target=os.readlink(child.path) if kind == "symlink" else None,
            )
            entries[path] = entry
            if kind == "dir" and info.st_dev == device:
                stack.append(path)
    return entries


def read_kept(root: Path, snapshot: Snapshot, keep: Callable[[str], bool], limit: int = 1 << 20) -> dict[str, bytes]:
    """The bytes of the regular files ``keep`` selects (the audit diffs them and can restore them)."""
    kept: dict[str, bytes] = {}
    for path, entry in snapshot.items():
        if entry.kind != "file" or not keep(path) or entry.size > limit:
            continue
        try:
            fd = os.open(os.path.join(root, path), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            if stat.S_ISREG(os.fstat(fd).st_mode):
                kept[path] = os.read(fd, limit)
        finally:
            os.close(fd)
    return kept
