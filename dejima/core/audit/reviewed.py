"""What a changed file is judged against when its start content is itself what an earlier audit
flagged (reviewed or not): the content before that earlier change, not the session's start.

Without it a review lowers every later finding on the file: an acknowledged task that runs on
folder open, pointed at a new command, was "a command changed" (medium) where a new such task is
critical. With it, the file is judged as the whole change since it was last unflagged, so new
content is a new finding at its rules' full severity, and the reviewed content (put back, or only
relabelled) gives the reviewed finding again, whose acknowledgement covers it.

The lineage is keyed by a path's content (``identity``): "this content was flagged, judged against
that baseline". It is written once per content and only ever makes a judgement stricter.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import NamedTuple

from dejima.core.snapshot import Snapshot, SnapshotEntry

ABSENT = "absent"


class Baseline(NamedTuple):
    """A path's state before the first flagged change of its lineage (kind None: absent)."""

    kind: str | None
    mode: int | None = None
    uid: int | None = None
    gid: int | None = None
    sha256: str | None = None  # a regular file's (None: not hashed then)
    target: str | None = None  # a link's
    data: bytes | None = None  # a regular file's bytes, when they were kept


def identity(kind: str | None, sha256: str | None = None, target: str | None = None) -> str | None:
    """A path's content as one value (None: no single value says it, a directory's or an unhashed file's)."""
    if kind is None:
        return ABSENT
    if kind == "file":
        return f"file:{sha256}" if sha256 else None
    if kind == "symlink":
        return f"symlink:{target}" if target is not None else None
    return None


def entry_identity(entry: SnapshotEntry | None) -> str | None:
    return identity(None) if entry is None else identity(entry.kind, entry.sha256, entry.target)


def judged_against(before: Snapshot, kept: dict[str, bytes], after: Snapshot, paths: Iterable[str],
                   base_of: Callable[[str, str], Baseline | None]) -> tuple[Snapshot, dict[str, bytes]]:
    """``before`` and ``kept`` with each changed path whose start content has a lineage (``base_of(path,
    identity)``) set to its baseline; the very same objects when none has (the usual case)."""
    bases = {}
    for path in paths:
        start = entry_identity(before.get(path))
        base = base_of(path, start) if start is not None else None
        if base is not None and identity(base.kind, base.sha256, base.target) != start:
            bases[path] = base
    if not bases:
        return before, kept
    before, kept = dict(before), dict(kept)
    for path, base in bases.items():
        kept.pop(path, None)
        if base.kind is None:
            before.pop(path, None)
            continue
        template = before.get(path) or after.get(path)
        assert template is not None  # a changed path is in one of them
        if path not in before:  # made in the session: its times and inode are not the baseline's
            template = template._replace(inode=0, ctime_ns=0, mtime_ns=0, nlink=1)
        size = len(base.data) if base.data is not None else -1
        before[path] = template._replace(
            kind=base.kind, mode=template.mode if base.mode is None else base.mode,
            uid=template.uid if base.uid is None else base.uid, gid=template.gid if base.gid is None else base.gid,
            size=size, sha256=(base.sha256 or "unknown") if base.kind == "file" else None, target=base.target)
        if base.kind == "file" and base.data is not None:
            kept[path] = base.data
    return before, kept
