"""A session's start state of one mount (what the exit audit compares the end with): every entry,
and the bytes of the files the rules read. What the last audit of the mount left is trusted where
its directories still list the same (mount_state.py); the entries it trusts are loaded during the
session when the bytes to keep can be found without them."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path

from dejima.adapters import mount_state
from dejima.adapters.mount_state import State
from dejima.adapters.start_contents import hashed_paths, keep
from dejima.adapters.tree_walk import SnapshotError, Walked, start_snapshot
from dejima.core.audit import watched
from dejima.core.audit.manifest_watch import Watch, asked
from dejima.core.snapshot import (
    Children,
    Snapshot,
    StartListing,
    children_of,
    compose,
    joined_paths,
    start_listings,
    subtree_sizes,
)


@dataclass(frozen=True, slots=True)
class Mount:
    kind: str  # workspace, home or cache (core.audit.MOUNT_KINDS)
    root: Path
    watch: tuple[Watch, ...] = ()  # a workspace's: the paths the session's manifests ask to watch


@dataclass
class MountState:
    mount: Mount
    snapshot: Snapshot
    kept: dict[str, bytes]
    start: State | None = None  # kept for the next start (mount_state.py), when the audit judged it
    # A start walk whose trusted entries are still to be loaded (``begin`` loads them during the
    # session; ``ready`` waits for them), and what went wrong doing it.
    walked: Walked | None = None
    failure: BaseException | None = None
    loading: threading.Thread | None = field(default=None, repr=False)
    # Derived from the complete snapshot during the session, for the end: each directory's
    # children (what was removed is found without a pass over every entry) and how many entries
    # it holds (the walk is shared out by them), the hashed files.
    children: Children | None = field(default=None, repr=False)
    sizes: dict[str, int] | None = field(default=None, repr=False)
    hashed: list[str] | None = field(default=None, repr=False)
    # A copy of the complete snapshot (and the snapshot it copies): the end walk's to update in place.
    copy: tuple[Snapshot, Snapshot] | None = field(default=None, repr=False)
    # The children of each directory the start listed with no racy child, as the end walk compares
    # them (snapshot.start_listings), and the snapshot they are of.
    listings: tuple[Snapshot, dict[str, StartListing]] | None = field(default=None, repr=False)
    # Every path of the start snapshot between NULs (snapshot.joined_paths), and the snapshot it is of.
    paths: tuple[Snapshot, str] | None = field(default=None, repr=False)

    def begin(self) -> None:
        """Completes the start snapshot and derives what the end needs from it, on a thread: the
        session runs meanwhile (``join`` before any fork)."""
        if self.loading is None and self.children is None:
            self.loading = threading.Thread(target=self._prepare, name="audit-start", daemon=True)
            self.loading.start()

    def join(self) -> None:
        if self.loading is not None:
            self.loading.join()
            self.loading = None

    def ready(self) -> Snapshot:
        """The start snapshot, complete (raises what loading it raised)."""
        self.join()
        self._complete()
        if self.failure is not None:
            raise self.failure
        return self.snapshot

    def _prepare(self) -> None:
        self._complete()
        if self.failure is None:
            self.hashed, children = hashed_paths(self.snapshot), children_of(self.snapshot)
            self.children, self.sizes = children, subtree_sizes(children)
            self.copy_for_end()
            self.paths = self.snapshot, joined_paths(self.snapshot)
            if self.start is not None:
                self.listings = self.snapshot, start_listings(self.snapshot, children, self.start.digests)
                if mount_state.oversized(self.start.delta, self.snapshot):
                    self._compact(self.start)

    def _compact(self, start: State) -> None:
        """The start snapshot written as a base while the session runs, its delta emptied: the end
        keeps it for the next start (mount_state.remember) instead of writing it then (~100 ms at
        100k entries, on the end's path). The session's own start state, its base and delta, stays
        as saved (a launcher that dies is audited from it)."""
        path = start.base.with_name(f"{start.base.stem}.base.snapshot")
        try:
            mount_state.save_snapshot(path, self.snapshot)
        except OSError:
            return  # written at the end, as before
        start.base, start.delta = path, ([], [])

    def start_listings(self) -> dict[str, StartListing] | None:
        """What ``_prepare`` made of the start snapshot for the end walk (None when the snapshot is
        not the one it was made of any more)."""
        return self.listings[1] if self.listings is not None and self.listings[0] is self.snapshot else None

    def joined_paths(self, snapshot: Snapshot) -> str | None:
        """What ``_prepare`` joined of the start snapshot's paths, if ``snapshot`` is the one it joined."""
        return self.paths[1] if self.paths is not None and self.paths[0] is snapshot else None

    def copy_for_end(self) -> None:
        """Copies the start snapshot for the end walk to update in place (``end_entries``), while
        the session runs: ~7 ms at 100k entries that the end does not spend then."""
        self.copy = self.snapshot, dict(self.snapshot)

    def end_entries(self) -> Snapshot | None:
        """The copy of the start snapshot made during the session, for the end walk to update in
        place: once (None after, or when the snapshot it copies is not this one any more)."""
        copy, self.copy = self.copy, None
        return copy[1] if copy is not None and copy[0] is self.snapshot else None

    def _complete(self) -> None:
        walked, self.walked = self.walked, None
        if walked is None:
            return
        try:
            self.snapshot = walked.complete()
            if self.start is not None:
                self.start.delta = compose(self.start.delta, self.snapshot, walked.changed)
        except BaseException as exc:  # raised by ``ready``, in the end audit: a finding, never silence
            self.failure = exc


def capture(mount: Mount, incremental: bool = True, defer: bool = False) -> MountState:
    """The start state of one mount: every entry, and the bytes of the files rules read. What the
    last audit of this mount left is trusted where its directories still list the same; with
    ``defer``, its entries are loaded by ``MountState.begin`` (during the session) when the bytes
    to keep can be found without them."""
    recalled = mount_state.recall(mount.kind, mount.root) if incremental else None
    watching = sorted({w.path for w in mount.watch})
    if recalled is not None and not _hashed_for(recalled, watching):
        recalled = None
    also = asked(mount.watch)

    def hash_path(path: str) -> bool:
        return watched(path, mount.kind) or also(path)

    try:
        walked = start_snapshot(mount.root, hash_path, recalled.known() if recalled else None, defer=defer)
    except (OSError, ValueError):
        if recalled is None:
            raise
        recalled, walked = None, start_snapshot(mount.root, hash_path)  # the state could not be loaded
    if recalled is None or not walked.used_known:
        start = State(mount_state.mount_identity(mount.kind, mount.root), Path(), ([], []), walked.digests,
                      {"watch": watching})
        kept = keep(mount.root, mount.kind, hashed_paths(walked.snapshot), lambda: walked.snapshot, start.extra, False)
        return MountState(mount, walked.snapshot, kept, start)
    start = State(recalled.identity, recalled.base, recalled.delta, walked.digests,
                  {**recalled.extra, "watch": watching})
    state = MountState(mount, walked.snapshot, {}, start, walked)
    try:
        state.kept = _keep_known(state, recalled, walked)
    except (OSError, ValueError, SnapshotError):  # the state could not be loaded, or did not add up
        return capture(mount, incremental=False)
    return state


def _hashed_for(recalled: State, watching: list[str]) -> bool:
    """Whether the walks behind a recalled state hashed every file of this watch list: a newly
    watched file in a directory it trusts was not, and its bytes would not be kept (then the start
    walks in full once)."""
    previous = recalled.extra.get("watch", [])
    return isinstance(previous, list) and set(watching) <= set(previous)


def _keep_known(state: MountState, recalled: State, walked: Walked) -> dict[str, bytes]:
    previous = recalled.extra.get("hashed")
    if isinstance(previous, list) and walked.known is not None:
        # The watched files: those known in the directories trusted, and those the walk hashed.
        listed = {directory for _, listings, *_ in walked.results for directory, _ in listings}
        hashed = [p for p in previous if p.rpartition("/")[0] not in listed]
        hashed += [row[0] for rows, *_ in walked.results for row in rows if row[10] is not None]
    else:
        hashed = hashed_paths(state.ready())
    git = recalled.digests.get(".git")
    assert state.start is not None
    return keep(state.mount.root, state.mount.kind, hashed, state.ready, state.start.extra,
                git is not None and git == walked.digests.get(".git"))
