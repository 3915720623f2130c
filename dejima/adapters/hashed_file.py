"""Reads what the audit records of a regular file: its content hash and whether it carries file
capabilities, without following a link or waiting on a FIFO swapped in after its lstat."""

from __future__ import annotations

import errno
import hashlib
import os
import stat

from dejima.adapters.nofollow_open import FILE_FLAGS

MAX_HASH_BYTES = 64 << 20
_ONE_READ = 1 << 20  # bytes read at once


def hashed_content(name: str, size: int, directory: int, keep: bool = False,
                   path: str = "") -> tuple[str, bytes | None, bool | None]:
    """The SHA-256 of the regular file ``name`` in the directory open as ``directory`` (its first
    MAX_HASH_BYTES, marked as truncated past them), or why it could not be read; with ``keep`` the
    very bytes it hashed (None when it read none: not a regular file, or unreadable); and whether
    it carries file capabilities (``capabilities``), read from the open file (by ``path``, its
    full path, when it cannot be opened: one lookup fewer per file on the walk's hot path)."""
    try:
        fd = os.open(name, FILE_FLAGS, dir_fd=directory)  # a link or FIFO swapped in: refused
    except OSError as exc:  # still compared: a change of readability is a change
        return f"unreadable:{exc.errno}", None, capabilities(path) if path else None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return "not-a-file", None, capabilities(path) if path else None
        caps = capabilities(fd)
        if size <= _ONE_READ:  # most files: one read, hashed at once
            chunk = os.read(fd, size)
            return hashlib.sha256(chunk).hexdigest(), chunk if keep else None, caps
        digest, chunks = hashlib.sha256(), []
        remaining = min(size, MAX_HASH_BYTES)
        while remaining > 0:
            chunk = os.read(fd, min(_ONE_READ, remaining))
            if not chunk:
                break
            digest.update(chunk)
            if keep:
                chunks.append(chunk)
            remaining -= len(chunk)
    finally:
        os.close(fd)
    return digest.hexdigest() + ("" if size <= MAX_HASH_BYTES else f"+truncated:{size}"), \
        b"".join(chunks) if keep else None, caps


def capabilities(path: str | int) -> bool | None:
    """Whether the file (a path, or an open descriptor) carries file capabilities (None: cannot tell)."""
    if not hasattr(os, "getxattr"):
        return None
    try:
        if isinstance(path, int):
            return bool(os.getxattr(path, "security.capability"))
        return bool(os.getxattr(path, "security.capability", follow_symlinks=False))
    except OSError as exc:
        return False if exc.errno in (errno.ENODATA, errno.ENOTSUP) else None
