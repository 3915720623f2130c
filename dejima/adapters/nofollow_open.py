"""Opening what lies beneath a mount without following a link planted on the way: the audit reads
and restores paths in a tree the session wrote, where any directory may have been swapped for a
link since it was walked."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Sequence
from pathlib import Path

# O_NOFOLLOW and O_NONBLOCK: a file swapped for a link or a FIFO after its lstat is refused instead
# of followed or waited on.
FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def open_directory(root: Path | str, parents: Sequence[str], follow_root: bool = False,
                   one_device: bool = False) -> int:
    """A descriptor of ``root``/``parents``, opened one component at a time, none of them a link
    (``root`` itself may be one when ``follow_root``: a mount reached through a link) and, with
    ``one_device``, none on another file system. Raises OSError (its filename the component that
    failed); the caller closes the descriptor."""
    fd = os.open(root, DIRECTORY_FLAGS & ~os.O_NOFOLLOW if follow_root else DIRECTORY_FLAGS)
    try:
        device = os.fstat(fd).st_dev
        for part in parents:
            inner = os.open(part, DIRECTORY_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = inner
            if one_device and os.fstat(fd).st_dev != device:
                raise OSError(errno.EXDEV, "on another file system", part)
        return fd
    except BaseException:
        os.close(fd)
        raise


def read_regular(directory: int, name: str, limit: int) -> bytes:
    """The bytes of the regular file ``name`` in the directory open as ``directory``, opened
    without following a link or waiting on a FIFO. Raises FileNotFoundError when it is absent,
    OSError when it cannot be opened (ELOOP: a link), ValueError when it is not a regular file or
    is larger than ``limit``."""
    fd = os.open(name, FILE_FLAGS, dir_fd=directory)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ValueError("not a regular file")
        if info.st_size > limit:
            raise ValueError(f"larger than {limit >> 20} MiB" if limit % (1 << 20) == 0 else
                             f"larger than {limit} bytes")
        # A buffer the size fstat gives (and a byte more, to see growth), not the limit's: os.read
        # allocates what it is asked, and the rules read hundreds of small files at the end.
        data = os.read(fd, min(info.st_size + 1, limit))
        if info.st_size < len(data) < limit:  # it grew since: read on to the limit, as one read of it would
            data += os.read(fd, limit - len(data))
        return data
    finally:
        os.close(fd)
