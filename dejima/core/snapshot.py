"""Snapshots of a writable mount and their difference: the audit's raw material (pure values).

An entry is what ``lstat`` saw plus, for regular files, a content hash; links are never followed
and special files never opened (the adapter in dejima/snapshot.py takes care of that). Paths are
relative to the mount's root, '/'-separated, as text (surrogate-escaped when not UTF-8).
"""

from __future__ import annotations

import stat
from dataclasses import dataclass
from typing import NamedTuple


class Entry(NamedTuple):
    """A NamedTuple, not a dataclass: a snapshot holds one per file, and building them is the
    audit's hot path."""

    path: str
    kind: str  # file, dir, symlink, fifo, socket, char, block
    mode: int  # permission bits incl. setuid/setgid/sticky
    uid: int
    gid: int
    size: int
    nlink: int
    inode: int
    ctime_ns: int
    sha256: str | None = None  # regular files
    target: str | None = None  # symlinks

    @property
    def executable(self) -> bool:
        return self.kind == "file" and bool(self.mode & 0o111)

    @property
    def privileged_bits(self) -> int:
        return self.mode & (stat.S_ISUID | stat.S_ISGID)


@dataclass(frozen=True, slots=True)
class Change:
    path: str
    what: str  # added, removed, modified, mode, type, link-target, owner
    before: Entry | None
    after: Entry | None


Snapshot = dict[str, Entry]


def _content_changed(old: Entry, new: Entry) -> bool:
    if old.sha256 is not None and new.sha256 is not None:
        return old.sha256 != new.sha256
    # Not hashed at the start: the (size, ctime, inode) tuple decides; ctime cannot be set back.
    return (old.size, old.ctime_ns, old.inode) != (new.size, new.ctime_ns, new.inode)


def diff(before: Snapshot, after: Snapshot) -> list[Change]:
    """Every difference between two snapshots of one mount, sorted by path."""
    changes: list[Change] = []
    for path in sorted(set(before) | set(after)):
        old, new = before.get(path), after.get(path)
        if old is None:
            changes.append(Change(path, "added", None, new))
        elif new is None:
            changes.append(Change(path, "removed", old, None))
        elif old.kind != new.kind:
            changes.append(Change(path, "type", old, new))
        else:
            if new.kind == "file" and _content_changed(old, new):
                changes.append(Change(path, "modified", old, new))
            if old.target != new.target:
                changes.append(Change(path, "link-target", old, new))
            if old.mode != new.mode:
                changes.append(Change(path, "mode", old, new))
            if (old.uid, old.gid) != (new.uid, new.gid):
                changes.append(Change(path, "owner", old, new))
    return changes
