"""Settings a harness needs, merged into files of the session's home before each session.

The home is the session's to change, so nothing on the way is trusted: each directory is opened
one component at a time without following a link, the file is read without following one, and
the result replaces it by a rename inside that directory (a link planted there is replaced, never
written through). A file the program left that cannot be read as its format is replaced by the
settings alone, and the caller is told.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Mapping
from typing import Any

from dejima.adapters.nofollow_open import DIRECTORY_FLAGS, open_directory, read_regular
from dejima.adapters.tomledit import merged_text
from dejima.core.connect import merge_into, settings_format

MAX_BYTES = 4 * 1024 * 1024  # a settings file larger than this is not one dejima merges into


def _with(fmt: str, data: bytes | None, values: Mapping[str, Any]) -> bytes:
    """The file's text with ``values`` merged in; ValueError when it cannot be read as ``fmt``
    (json's, tomlkit's and UnicodeDecodeError all are)."""
    text = data.decode("utf-8") if data else ""
    if fmt == "toml":
        return merged_text(text, values).encode()
    current = json.loads(text) if text.strip() else {}
    if not isinstance(current, dict):
        raise ValueError("its top level is not an object")
    return (json.dumps(merge_into(current, values), indent=2, ensure_ascii=False) + "\n").encode()


def _read(directory: int, name: str) -> bytes | None:
    """The file's bytes, None when there is none; ValueError for anything dejima does not read."""
    try:
        return read_regular(directory, name, MAX_BYTES)
    except FileNotFoundError:
        return None
    except OSError as exc:  # a link (ELOOP)...: not a file dejima reads
        raise ValueError(f"not a regular file ({exc.strerror})") from None


def _directory(home: str, parents: list[str], owner: tuple[int, int] | None, notes: list[str]) -> int:
    """The directory ``home/parents``, each missing one made (0700, the session's user's); a link
    in the way is removed (and noted), never followed; anything else in the way raises OSError."""
    fd = open_directory(home, [])
    try:
        for index, part in enumerate(parents):
            if stat.S_ISLNK(_mode(fd, part)):
                os.unlink(part, dir_fd=fd)
                notes.append(f"~/{'/'.join(parents[:index + 1])} was a link; replaced by a directory")
            try:
                os.mkdir(part, 0o700, dir_fd=fd)
                if owner is not None and os.getuid() == 0:
                    os.chown(part, *owner, dir_fd=fd, follow_symlinks=False)
            except FileExistsError:
                pass
            inner = os.open(part, DIRECTORY_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = inner
        return fd
    except BaseException:
        os.close(fd)
        raise


def _mode(directory: int, name: str) -> int:
    try:
        return os.stat(name, dir_fd=directory, follow_symlinks=False).st_mode
    except FileNotFoundError:
        return 0


def merge_settings(home: str, files: Mapping[str, Mapping[str, Any]], owner: tuple[int, int] | None) -> list[str]:
    """Merge ``files`` (path in the home -> settings) into the home; returns one line per thing
    that was replaced rather than merged into (a file that could not be read, a link)."""
    replaced: list[str] = []
    for path, values in files.items():
        *parents, name = path.split("/")
        fmt = settings_format(path)
        directory = _directory(home, parents, owner, replaced)
        try:
            try:
                text = _with(fmt, _read(directory, name), values)
            except ValueError as exc:
                replaced.append(f"~/{path} could not be read as {fmt.upper()} ({exc}); replaced by the harness's "
                                "settings")
                text = _with(fmt, None, values)
            temporary = f".{name}.dejima-new"
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                         dir_fd=directory)
            try:
                os.write(fd, text)
                if owner is not None and os.getuid() == 0:
                    os.fchown(fd, *owner)
            finally:
                os.close(fd)
            os.rename(temporary, name, src_dir_fd=directory, dst_dir_fd=directory)
        finally:
            os.close(directory)
    return replaced


__all__ = ["merge_settings"]
