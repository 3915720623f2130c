"""Reads what the audit records of a regular file: its content hash and whether it carries file
capabilities, without following a link or waiting on a FIFO swapped in after its lstat."""

from __future__ import annotations

import errno
import hashlib
import os
import stat

from dejima.adapters.nofollow_open import FILE_FLAGS

MAX_HASH_BYTES = 64 << 20


def hashed_content(name: str, size: int, directory: int, keep: bool = False) -> tuple[str, bytes | None]:
    """The SHA-256 of the regular file ``name`` in the directory open as ``directory`` (its first
    MAX_HASH_BYTES, marked as truncated past them), or why it could not be read; and with ``keep``
    the very bytes it hashed (None when it read none: not a regular file, or unreadable)."""
    digest, chunks = hashlib.sha256(), []
    try:
        fd = os.open(name, FILE_FLAGS, dir_fd=directory)  # a link or FIFO swapped in: refused
    except OSError as exc:
        return f"unreadable:{exc.errno}", None  # still compared: a change of readability is a change
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return "not-a-file", None
        remaining = min(size, MAX_HASH_BYTES)
        while remaining > 0:
            chunk = os.read(fd, min(1 << 20, remaining))
            if not chunk:
                break
            digest.update(chunk)
            if keep:
                chunks.append(chunk)
            remaining -= len(chunk)
    finally:
        os.close(fd)
    return digest.hexdigest() + ("" if size <= MAX_HASH_BYTES else f"+truncated:{size}"), \
        b"".join(chunks) if keep else None


def capabilities(path: str) -> bool | None:
    """Whether the file carries file capabilities (None: cannot tell)."""
    if not hasattr(os, "getxattr"):
        return None
    try:
        return bool(os.getxattr(path, "security.capability", follow_symlinks=False))
    except OSError as exc:
        return False if exc.errno in (errno.ENODATA, errno.ENOTSUP) else None
