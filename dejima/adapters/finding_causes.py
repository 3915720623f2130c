"""Whether what a finding found is still on disk: a finding whose file is removed, back to its start,
or back to content that was acknowledged is closed, with a note saying which; one whose very content
is back is open again.

Asked at the end of every session's audit, before a start is admitted, and when `dejima-audit` lists
findings. Only what one path's state says is judged (its kind, content, mode and owner, read without
following links): a finding about a whole tree, or about no path, stays as it is. Nothing is closed
while a session runs on the workspace, since its agent may have moved the file away for the moment;
content put back later opens the finding again, whoever puts it back.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from typing import NamedTuple

from dejima.adapters.findings import FileState, FindingStore, Stored
from dejima.adapters.nofollow_open import FILE_FLAGS, open_directory
from dejima.adapters.session_dirs import live_sessions_on
from dejima.adapters.tree_walk import KINDS

# Findings about more than their path: an audit that could not judge, bytecode found in many files.
_NOT_ONE_PATH = frozenset(("X00", "B11"))
# The mode bits rules judge: setuid, setgid, sticky, every execute bit, others' write.
_MODE_BITS = 0o7113
# A file larger than this is not hashed at every listing: its finding stays as it is (F07's big files).
_HASH_LIMIT = 64 << 20


class PathState(NamedTuple):
    kind: str | None  # None: absent
    sha256: str | None = None
    target: str | None = None
    mode: int = 0
    uid: int = 0
    gid: int = 0


def current(root: str, path: str) -> PathState | None:
    """The path's state now (None: it cannot be told, e.g. a link on the way to it)."""
    *parents, name = path.split("/")
    try:
        fd = open_directory(root, parents)
    except OSError as exc:
        return PathState(None) if exc.errno == errno.ENOENT else None
    try:
        info = os.stat(name, dir_fd=fd, follow_symlinks=False)
        kind = KINDS.get(stat.S_IFMT(info.st_mode))
        sha = target = None
        if kind == "symlink":
            target = os.readlink(name, dir_fd=fd)
        elif kind == "file":
            if info.st_size > _HASH_LIMIT:
                return None
            sha = _hash(fd, name)
        return PathState(kind, sha, target, info.st_mode, info.st_uid, info.st_gid)
    except FileNotFoundError:
        return PathState(None)
    except OSError:
        return None
    finally:
        os.close(fd)


def _hash(directory: int, name: str) -> str:
    digest = hashlib.sha256()
    fd = os.open(name, FILE_FLAGS, dir_fd=directory)
    try:
        while chunk := os.read(fd, 1 << 20):
            digest.update(chunk)
    finally:
        os.close(fd)
    return digest.hexdigest()


def _same(now: PathState, kind: str | None, sha256: str | None, target: str | None, mode: int | None,
          uid: int | None, gid: int | None, strict: bool) -> bool:
    """Whether ``now`` is that state. ``strict``: every part must be known and equal (to close); else what
    is unknown is taken as equal (to open again: the fail-closed way)."""
    if now.kind != kind:
        return False
    if kind is None:
        return True
    if kind == "file" and (sha256 != now.sha256 if sha256 or strict else False):
        return False
    if kind == "symlink" and (target != now.target if target is not None or strict else False):
        return False
    if kind not in ("file", "symlink"):
        return False  # a directory's or a special file's content is not one value
    for known, present in ((None if mode is None else mode & _MODE_BITS, now.mode & _MODE_BITS),
                           (uid, now.uid), (gid, now.gid)):
        if known is None and strict or known is not None and known != present:
            return False
    return True


def _found(state: FileState, now: PathState) -> bool:
    """The content the finding found is there now."""
    if state.after_kind is None:
        return False  # a finding about a removal: what is back is judged by the next audit
    return _same(now, state.after_kind, state.after_sha256, state.after_target, state.after_mode, state.after_uid,
                 state.after_gid, strict=False)


def _before_target(store: FindingStore, stored: Stored) -> str | None:
    if stored.state is None or stored.state.before_kind != "symlink":
        return None
    data = store.get([stored.id])[0].state
    return os.fsdecode(data.before) if data is not None and data.before is not None else None


def _why_gone(store: FindingStore, stored: Stored, now: PathState, reviewed: list[Stored]) -> str | None:
    state = stored.state
    assert state is not None
    if now.kind is None:
        return "closed: removed" if state.after_kind is not None else None
    if _same(now, state.before_kind, state.before_sha256, _before_target(store, stored), state.before_mode,
             state.before_uid, state.before_gid, strict=True):
        return f"closed: restored to its content before session {stored.session}"
    for other in reviewed:
        assert other.state is not None
        if other.state.after_kind is not None and _same(
                now, other.state.after_kind, other.state.after_sha256, other.state.after_target,
                other.state.after_mode, other.state.after_uid, other.state.after_gid, strict=True):
            return f"closed: the file is back to the content acknowledged in finding {other.id}"
    return None


def settle(store: FindingStore, workspace: str, but: str = "") -> int:
    """Close the unreviewed findings of ``workspace`` whose cause is gone and open again those whose cause is
    back (``but``: the session asking, which does not count as one that runs); returns how many closed."""
    if not workspace:
        return 0
    found = [s for s in store.with_states(workspace) if s.finding.rule not in _NOT_ONE_PATH and s.root]
    if not found:
        return 0
    running = bool(live_sessions_on(workspace, but=but))
    reviewed: dict[tuple[str, str], list[Stored]] = {}
    for s in found:
        if s.acked:
            reviewed.setdefault((s.root, s.finding.path), []).append(s)
    close: dict[str, list[int]] = {}
    reopen: list[int] = []
    for s in found:
        if s.acked or s.state is None or (running and s.closed is None):
            continue
        now = current(s.root, s.finding.path)
        if now is None:
            continue
        if _found(s.state, now):
            if s.closed is not None:
                reopen.append(s.id)
        elif s.closed is None:
            note = _why_gone(store, s, now, reviewed.get((s.root, s.finding.path), []))
            if note is not None:
                close.setdefault(note, []).append(s.id)
    for note, ids in close.items():
        store.close_findings(ids, note)
    if reopen:
        store.reopen_findings(reopen, "reopened: the content it found is back")
    return sum(map(len, close.values()))


def settle_all(store: FindingStore, workspace: str | None) -> None:
    """``settle`` for one workspace, or for every workspace with findings (None)."""
    for each in [workspace] if workspace is not None else store.workspaces():
        settle(store, each)

