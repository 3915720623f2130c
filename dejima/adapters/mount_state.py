"""What the audit keeps of a mount between sessions, so the next start walks only what changed;
and the files snapshots are kept in (a session's start state too).

After an audit, a mount's state is its start snapshot as a shared base file plus a small delta,
and the listing digests of its directories, minus those the session changed. The next start
trusts a directory's recorded entries only when its listing digest (names and lstat data of its
children: mode, inode, device, ctime, mtime, size) is the same on disk; ctime moves with every
change to an inode and user space cannot set it back, so a file the host rewrote between sessions,
mtime restored or not, is recorded again. Directories with a child changed within RACY_NS of a
walk keep no digest (git's racy-clean rule).

The state lives in ``$XDG_STATE_HOME/dejima/audit/mounts/<key>/`` (the host user's, mode 0700,
never mounted into a container), keyed by the mount's kind, path, device and inode: a moved or
replaced workspace has no state and is walked in full. Files are replaced atomically and carry a
checksum; anything unreadable, from another version, or naming another mount is ignored (a full
walk), never trusted.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dejima.adapters import host
from dejima.adapters.fork_workers import gc_paused
from dejima.adapters.tree_walk import Known
from dejima.core.snapshot import Delta, Snapshot, apply_delta, decode, encode, frame, unframe

_MAGIC = b"dejima-mount-state 1\n"
# File systems whose timestamps come from this kernel's clock: on a network or FUSE file system
# the ctime comes from elsewhere, and the racy rule cannot be trusted.
LOCAL_FILESYSTEMS = frozenset(("ext2", "ext3", "ext4", "xfs", "btrfs", "tmpfs", "zfs", "f2fs", "overlay",
                               "bcachefs", "jfs", "reiserfs"))
COMPACT_RATIO, COMPACT_MIN = 20, 1000  # a delta past 1/20 of the entries (and 1000) makes a new base
STALE_SECONDS = 30 * 86400  # a mount state unused this long is dropped


def mounts_dir() -> Path:
    return host.state_dir() / "audit" / "mounts"


@dataclass(frozen=True)
class MountIdentity:
    kind: str
    root: str
    device: int
    inode: int

    @property
    def key(self) -> str:
        return hashlib.sha256(f"{self.kind}\0{self.root}\0{self.device}\0{self.inode}".encode(
            "utf-8", "surrogateescape")).hexdigest()[:32]


def mount_identity(kind: str, root: Path) -> MountIdentity:
    info = os.stat(root)
    return MountIdentity(kind, os.path.realpath(root), info.st_dev, info.st_ino)


@dataclass
class State:
    """A mount's start snapshot as ``base`` (an encoded snapshot file) plus ``delta``, with the
    listing digests a start walk can trust; ``extra`` holds derived values cached with it."""

    identity: MountIdentity
    base: Path
    delta: Delta
    digests: dict[str, bytes]
    extra: dict[str, Any] = field(default_factory=dict)

    def known(self) -> Known:
        base, change = self.base, self.delta
        return Known(self.digests, lambda: apply_delta(load_snapshot(base), change))


def encode_state(state: State, base_name: str) -> bytes:
    i = state.identity
    return frame(_MAGIC, {"identity": (i.kind, i.root, i.device, i.inode), "base": base_name, "delta": state.delta,
                          "digests": state.digests, "extra": state.extra})


def decode_state(data: bytes, directory: Path) -> State:
    """What ``encode_state`` wrote; ValueError for anything else."""
    raw = unframe(_MAGIC, data, "mount state")
    try:
        kind, root, device, inode = raw["identity"]
        rows, removed = raw["delta"]
        base = directory / raw["base"]
        if os.path.basename(raw["base"]) != raw["base"]:
            raise ValueError("a base outside its directory")
        return State(MountIdentity(kind, root, device, inode), base, (list(rows), list(removed)), dict(raw["digests"]),
                     dict(raw["extra"]))
    except (EOFError, TypeError, KeyError, ValueError) as exc:
        raise ValueError(f"cannot be decoded: {exc}") from exc


def save_snapshot(path: Path, snapshot: Snapshot) -> None:
    """Writes ``snapshot`` to ``path`` (mode 0600), atomically."""
    with gc_paused():
        data = encode(snapshot)
    host.write_atomically(path, data)


def load_snapshot(path: Path) -> Snapshot:
    """Reads what ``save_snapshot`` wrote; raises ValueError for anything else."""
    data = path.read_bytes()
    try:
        with gc_paused():
            return decode(data)
    except ValueError as exc:
        raise ValueError(f"the snapshot state file {path} is unusable: {exc}") from exc


def filesystem(root: Path) -> str | None:
    """The type of the file system ``root`` is on (None when /proc/self/mountinfo does not say)."""
    device = os.stat(root).st_dev
    wanted = f"{os.major(device)}:{os.minor(device)}"
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return None
    found = None
    for line in lines:  # the last mount of a device wins: mounts stack
        fields = line.split(" ")
        if len(fields) > 2 and fields[2] == wanted and " - " in line:
            found = line.split(" - ", 1)[1].split(" ", 1)[0]
    return found


def recall(kind: str, root: Path) -> State | None:
    """The state the last audit of this very mount left, or None (then the start walks in full)."""
    try:
        mine = mount_identity(kind, root)
        if filesystem(root) not in LOCAL_FILESYSTEMS:
            return None
        directory = mounts_dir() / mine.key
        state = decode_state((directory / "state").read_bytes(), directory)
    except (OSError, ValueError):
        return None
    return state if state.identity == mine else None


def new_base(mine: MountIdentity, snapshot: Snapshot) -> Path:
    """Writes ``snapshot`` as a new base file of this mount's state directory."""
    directory = mounts_dir() / mine.key
    host.ensure_private_dir(directory)
    path = directory / f"base-{secrets.token_hex(8)}.snapshot"
    save_snapshot(path, snapshot)
    return path


def oversized(delta: Delta, snapshot: Snapshot) -> bool:
    """Whether a start's delta is past what a new base replaces (1/COMPACT_RATIO of the entries,
    and COMPACT_MIN): the start after many changes on the host (a branch switched)."""
    return len(delta[0]) + len(delta[1]) > max(COMPACT_MIN, len(snapshot) // COMPACT_RATIO)


def remember(state: State, snapshot: Snapshot, changed_dirs: set[str]) -> None:
    """Keeps ``state`` (the session's start) for the next start, without the digests of
    ``changed_dirs``: what the session changed there is walked again. Compacts a large delta
    into a new base (``snapshot``: the start snapshot), and drops bases no longer named."""
    directory = mounts_dir() / state.identity.key
    host.ensure_private_dir(directory)
    digests = {d: v for d, v in state.digests.items()  # nor those of directories that are gone
               if d not in changed_dirs and (not d or getattr(snapshot.get(d), "kind", None) == "dir")}
    base, change = state.base, state.delta
    if oversized(change, snapshot):  # not made one during the session (audit_start.MountState)
        base, change = new_base(state.identity, snapshot), ([], [])
    elif base.parent != directory:  # the session's own copy: linked in beside the mount's state
        kept = directory / f"base-{secrets.token_hex(8)}.snapshot"
        try:
            os.link(base, kept)
        except OSError:  # another file system: a copy
            shutil.copyfile(base, kept)
        base = kept
    kept_state = State(state.identity, base, change, digests, state.extra)
    host.write_atomically(directory / "state", encode_state(kept_state, base.name))
    for old in directory.glob("base-*.snapshot"):
        if old != base:
            old.unlink(missing_ok=True)  # a session that started from it holds its own link
    _prune(directory.name)


def _prune(current: str) -> None:
    """Drops the states of mounts no session used for STALE_SECONDS (moved, replaced, deleted)."""
    cutoff = time.time() - STALE_SECONDS
    for directory in mounts_dir().iterdir():
        try:
            stale = directory.name != current and (directory / "state").stat().st_mtime < cutoff
        except OSError:
            stale = False  # no state yet, or being written
        if stale:
            shutil.rmtree(directory, ignore_errors=True)


def forget(kind: str, root: Path) -> None:
    """Drops a mount's state: the next start walks in full."""
    try:
        (mounts_dir() / mount_identity(kind, root).key / "state").unlink(missing_ok=True)
    except OSError:
        pass
