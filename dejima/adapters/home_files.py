"""Files dejima writes into a directory the session can change (its home) before a session starts.

Nothing a previous session left on the way is trusted or followed: each directory is opened one
component at a time without following a link, and each file is written as a new file renamed over
its name (a hard link keeps its other name's bytes). Whatever stands in the way — a link, a file or a
FIFO where a directory goes, a directory where the file goes — is removed, and the caller gets one
note for each, to show as a warning: a start never fails on what a session planted in its home.
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Sequence
from pathlib import Path

from dejima.adapters.nofollow_open import DIRECTORY_FLAGS, read_regular

Owner = tuple[int, int] | None  # the session's user, given the files when the launcher runs as root


def _kind(directory: int, name: str) -> int:
    """The file type of ``name`` (0 when there is none), the name itself, never a link's target."""
    try:
        return stat.S_IFMT(os.stat(name, dir_fd=directory, follow_symlinks=False).st_mode)
    except FileNotFoundError:
        return 0


def _remove(directory: int, name: str, kind: int) -> None:
    if kind == stat.S_IFDIR:
        shutil.rmtree(name, dir_fd=directory)  # the descriptor-based walk: it follows no link inside
    else:
        os.unlink(name, dir_fd=directory)


_KIND_NAMES = {stat.S_IFLNK: "a link", stat.S_IFDIR: "a directory", stat.S_IFREG: "a file", stat.S_IFIFO: "a FIFO",
               stat.S_IFSOCK: "a socket", stat.S_IFCHR: "a device", stat.S_IFBLK: "a device"}


def open_within(root: Path | str, parents: Sequence[str], owner: Owner, notes: list[str], shown: str = "~",
                mode: int = 0o700) -> int:
    """A descriptor of ``root``/``parents``, each missing directory made (``mode``, the owner's); anything
    else in the way is removed and noted. ``shown`` names ``root`` in the notes. The caller closes it."""
    fd = os.open(root, DIRECTORY_FLAGS)
    try:
        for index, part in enumerate(parents):
            kind = _kind(fd, part)
            if kind not in (0, stat.S_IFDIR):
                _remove(fd, part, kind)
                notes.append(f"{shown}/{'/'.join(parents[:index + 1])} was {_KIND_NAMES.get(kind, 'something else')}; "
                             "replaced by a directory")
            if kind != stat.S_IFDIR:
                os.mkdir(part, mode, dir_fd=fd)
                if owner is not None and os.getuid() == 0:
                    os.chown(part, *owner, dir_fd=fd, follow_symlinks=False)
            inner = os.open(part, DIRECTORY_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = inner
        return fd
    except BaseException:
        os.close(fd)
        raise


def read_existing(directory: int, name: str, limit: int) -> bytes | None:
    """The bytes of the regular file ``name``, None when there is none; ValueError (saying what is there)
    for anything else: a link, a directory, a FIFO, a file larger than ``limit``."""
    kind = _kind(directory, name)
    if kind == 0:
        return None
    if kind != stat.S_IFREG:
        raise ValueError(f"it is {_KIND_NAMES.get(kind, 'not a regular file')}")
    try:
        return read_regular(directory, name, limit)
    except FileNotFoundError:
        return None
    except OSError as exc:  # swapped for a link since (ELOOP)
        raise ValueError(f"not a regular file ({exc.strerror})") from None


def replace(directory: int, name: str, data: bytes, mode: int, owner: Owner, notes: list[str] | None,
            shown: str) -> None:
    """``name`` in ``directory`` holds ``data`` and nothing else: a new file renamed over it (a directory
    in the way, which rename cannot replace, is removed first). Anything but a regular file found there
    is noted, unless ``notes`` is None (a caller that read the name first has said what it found)."""
    kind = _kind(directory, name)
    if kind == stat.S_IFDIR:
        _remove(directory, name, kind)
    if kind not in (0, stat.S_IFREG) and notes is not None:
        notes.append(f"{shown} was {_KIND_NAMES.get(kind, 'something else')}; replaced by a file")
    temporary = f".{name}.dejima-new"
    stale = _kind(directory, temporary)
    if stale:
        _remove(directory, temporary, stale)
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode,
                 dir_fd=directory)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fchmod(fd, mode)  # whatever the umask
        if owner is not None and os.getuid() == 0:
            os.fchown(fd, *owner)
    finally:
        os.close(fd)
    os.rename(temporary, name, src_dir_fd=directory, dst_dir_fd=directory)


__all__ = ["Owner", "open_within", "read_existing", "replace"]
