"""Reads what the audit records of a regular file: its content hash and whether it carries file
capabilities, without following a link or waiting on a FIFO swapped in after its lstat."""

from __future__ import annotations

import errno
import hashlib
import os
import stat

MAX_HASH_BYTES = 64 << 20
_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def content_hash(name: str, size: int, directory: int) -> str:
    """The SHA-256 of the regular file ``name`` in the directory open as ``directory`` (its first
    MAX_HASH_BYTES, marked as truncated past them), or why it could not be read."""
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


def capabilities(path: str) -> bool | None:
    """Whether the file carries file capabilities (None: cannot tell)."""
    if not hasattr(os, "getxattr"):
        return None
    try:
        return bool(os.getxattr(path, "security.capability", follow_symlinks=False))
    except OSError as exc:
        return False if exc.errno in (errno.ENODATA, errno.ENOTSUP) else None
