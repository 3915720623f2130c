"""Reads the flags of git's index file (.git/index, versions 2-4) without running git: the paths
marked assume-unchanged or skip-worktree, which `git status` stops looking at (research G20)."""

from __future__ import annotations

import struct

ASSUME_VALID = 0x8000
EXTENDED = 0x4000
SKIP_WORKTREE = 0x4000  # in the extended flags
_FIXED = 40  # ctime, mtime, dev, ino, mode, uid, gid, size
_NAME_MASK = 0xFFF  # the name's length in the flags; this value: that long or longer


class GitIndexError(ValueError):
    pass


def start_flags_key(index: str) -> str:
    """Where the start state keeps an index's hidden paths (the index itself is too big to keep);
    a NUL makes it a name no file can have."""
    return f"\0hidden-by\0{index}"


def hash_size(config: list[tuple[str, str]]) -> int:
    """Object id size in the index, from the repository's parsed config."""
    return 32 if dict(config).get("extensions.objectformat", "").lower() == "sha256" else 20


def _varint(data: bytes, at: int) -> tuple[int, int]:
    """Git's offset varint (index v4 path compression)."""
    byte = data[at]
    value, at = byte & 0x7F, at + 1
    while byte & 0x80:
        byte = data[at]
        value = ((value + 1) << 7) | (byte & 0x7F)
        at += 1
    return value, at


def hidden_paths(data: bytes, hash_size: int = 20) -> dict[str, str]:
    """Paths the index marks so that `git status` skips them -> "assume-unchanged"/"skip-worktree".
    Raises ValueError for a file that is not an index of a known version."""
    if len(data) < 12 or data[:4] != b"DIRC":
        raise GitIndexError("not a git index")
    version, count = struct.unpack(">II", data[4:12])
    if version not in (2, 3, 4):
        raise GitIndexError(f"index version {version}")
    try:
        return _hidden_v4(data, count, hash_size) if version == 4 else _hidden_padded(data, count, hash_size)
    except (struct.error, ValueError, IndexError) as exc:
        raise GitIndexError(f"truncated or corrupt index: {exc}") from exc


def _hidden_padded(data: bytes, count: int, hash_size: int) -> dict[str, str]:
    """Versions 2 and 3: each entry NUL-padded to a multiple of 8. Its name's length is read from
    its flags, as git reads it (a name of 0xFFF bytes or more: up to its NUL); the path is decoded
    only for a flagged entry (the end audit reads a 100k-entry index whenever git touched it)."""
    at, hidden, flags_at, find = 12, {}, _FIXED + hash_size, data.index
    for _ in range(count):
        name = at + flags_at
        flags = data[name] << 8 | data[name + 1]
        name += 2
        if flags & (ASSUME_VALID | EXTENDED):  # rare: flagged, or extended flags to read
            extended = 0
            if flags & EXTENDED:
                extended = data[name] << 8 | data[name + 1]
                name += 2
            end = _name_end(data, name, flags)
            if flags & ASSUME_VALID or extended & SKIP_WORKTREE:
                hidden[data[name:end].decode("utf-8", "surrogateescape")] = \
                    "assume-unchanged" if flags & ASSUME_VALID else "skip-worktree"
        else:
            length = flags & _NAME_MASK
            end = name + length if length < _NAME_MASK else find(b"\0", name + _NAME_MASK)
        at += (end - at) // 8 * 8 + 8  # the name's NUL, then padding up to a multiple of 8
    if at > len(data):  # the last entry ran past the end (an earlier one: an IndexError above)
        raise GitIndexError("an entry runs past the end of the index")
    return hidden


def _name_end(data: bytes, name: int, flags: int) -> int:
    length = flags & _NAME_MASK
    return name + length if length < _NAME_MASK else data.index(b"\0", name + _NAME_MASK)


def _hidden_v4(data: bytes, count: int, hash_size: int) -> dict[str, str]:
    """Version 4: names prefix-compressed against the previous entry's, NUL-terminated, unpadded."""
    at, previous, hidden = 12, b"", {}
    for _ in range(count):
        at += _FIXED + hash_size
        (flags,) = struct.unpack(">H", data[at:at + 2])
        at += 2
        extended = 0
        if flags & EXTENDED:
            (extended,) = struct.unpack(">H", data[at:at + 2])
            at += 2
        strip, at = _varint(data, at)
        end = data.index(b"\0", at)
        path = previous[:len(previous) - strip] + data[at:end]
        at = end + 1
        previous = path
        if flags & ASSUME_VALID or extended & SKIP_WORKTREE:
            text = path.decode("utf-8", "surrogateescape")
            hidden[text] = "assume-unchanged" if flags & ASSUME_VALID else "skip-worktree"
    return hidden
