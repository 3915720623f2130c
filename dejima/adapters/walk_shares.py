"""How a walk is shared out: the top of the tree walked here until there are directories to deal
out, each taken in turn (the largest first, by the start's entry counts) by whichever forked
process (this one included) asks first; each sends back its result. The same queue shares out
other work of the audit (``shared_out``: its rule stages; npm_cache: the tarballs)."""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import partial
from typing import Any, Generic, Protocol, TypeVar

from dejima.adapters.fork_workers import SnapshotError, collect, fork, stop, workers
from dejima.core.snapshot import Children, Listing

_UNITS_PER_WORKER = 8  # directories to deal per process at least, so one big directory does not idle the rest
_SPLITS = 32  # directories the end walks ahead of the fork at most, each too big for one share

Unit = tuple[str, bool]  # a directory to walk, and whether its listing is needed to find removals
Row = tuple[Any, ...]  # a SnapshotEntry's fields as a plain tuple: what marshal carries
Digested = list[tuple[str, "bytes | None"]]  # directories listed in full, each with its new digest
# A share's rows, listings, entries seen, digests; and the bytes of the files an end walk hashed.
Result = tuple[list[Row], list[Listing], int, Digested, dict[str, bytes]]


class Share(Protocol):
    """One process's share of a walk (tree_walk._Walk)."""

    checking: bool

    def directory(self, relative: str, listed: bool) -> list[Unit]: ...

    def new_directories(self) -> dict[str, int]: ...

    def fresh(self) -> Share: ...

    def subtrees(self, units: Iterable[Unit]) -> Result: ...


def frontier(front: Share, count: int, children: Children | None = None,
             sizes: dict[str, int] | None = None) -> list[Unit]:
    """Walks the top of the tree here until there are enough directories to deal out; given the
    start's ``children`` and their ``sizes``, also each one too big for a fair share."""
    units = front.directory("", front.checking)  # the root is no entry: its listing is always taken
    while count > 1 and units and len(units) < count * _UNITS_PER_WORKER:
        units.extend(front.directory(*units.pop(0)))
    if count > 1 and children and sizes:
        _split_heavy(front, units, count, children, sizes)
    if count > 1 and front.checking:
        _split_new(front, units, count)
    return units


def _split_new(front: Share, units: list[Unit], count: int) -> None:
    """Walks here the new directory with the most subdirectories, its subdirectories dealt out
    instead, until there are enough new ones for a fair share (at most _SPLITS walked here). Every
    file of a new directory is read and hashed, the end walk's costly part, and the start has no
    size for it: an environment installed in the session (``.venv/lib/python3.X/site-packages``
    under three directories of a few entries) dealt as one unit was walked by one process alone."""
    for _ in range(_SPLITS):
        new = front.new_directories()  # each with its link count: 2 + its subdirectories
        dealt = [unit for unit in units if unit[0] in new]
        widest = max(dealt, key=lambda unit: new[unit[0]], default=None)
        if widest is None or len(dealt) >= count * _UNITS_PER_WORKER or new[widest[0]] <= 2:
            return  # none left, enough of them, or the widest has no subdirectory to deal out
        units.remove(widest)
        units.extend(front.directory(*widest))


def _split_heavy(front: Share, units: list[Unit], count: int, children: Children,
                 sizes: dict[str, int]) -> None:
    """Walks here each unit that holds more than a fair share of the entries, and whose own
    listing is small, its subdirectories dealt out instead (at most _SPLITS of them)."""
    def weight(unit: Unit) -> int:
        return sizes.get(unit[0], 0)

    for _ in range(_SPLITS):
        heaviest = max(units, key=weight, default=None)
        total = sum(map(weight, units))
        # A directory mostly of files cannot be split: walked here, it would be walked alone.
        if heaviest is None or weight(heaviest) * count <= total or \
                len(children.get(heaviest[0], ())) * count * 4 > total:
            return
        units.remove(heaviest)
        units.extend(front.directory(*heaviest))


def by_size(units: list[Unit], sizes: dict[str, int] | None) -> list[Unit]:
    """``units``, the largest first by the ``sizes`` of the start's directories: the last ones
    taken are small, so the processes end at about the same time."""
    return sorted(units, key=lambda unit: sizes.get(unit[0], 0), reverse=True) if sizes else units


T = TypeVar("T")


class Queue(Generic[T]):
    """Units (of a walk, or any work a forked process can take: npm_cache's tarballs) dealt one
    at a time through a pipe, each to whichever process asks first: one the
    scheduler starves (another program busy on the machine) takes fewer, and none waits on it.
    Every record is written, and the write end closed, before any process reads; a read of one
    record is atomic (the pipe's lock), so each unit is taken exactly once."""

    RECORDS = 1024  # 4 kB of records: they fit in any pipe, written at once

    def __init__(self, units: list[T]) -> None:
        self.units = units
        self.step = -(-len(units) // self.RECORDS) or 1  # units per record
        self.read_end, write_end = os.pipe()
        try:
            records = b"".join(i.to_bytes(4, "big") for i in range(0, len(units), self.step))
            if os.write(write_end, records) != len(records):
                raise OSError("the pipe of units took only part of them")
        except OSError:
            os.close(self.read_end)
            raise
        finally:
            os.close(write_end)

    def taken(self) -> Iterator[T]:
        """The units this process takes, until none is left."""
        while record := os.read(self.read_end, 4):
            if len(record) != 4:
                raise SnapshotError("the walk's queue of directories was read in part; the snapshot would be partial",
                                    hint="run the audit again; if it fails again, report it")
            start = int.from_bytes(record, "big")
            yield from self.units[start:start + self.step]

    def close(self) -> None:
        os.close(self.read_end)


def walk_shares(front: Share, units: list[Unit], count: int,
                meanwhile: Callable[[], Any] | None = None,
                sizes: dict[str, int] | None = None) -> tuple[list[Result], Any]:
    """``units`` (largest first by ``sizes``) taken one at a time by ``count`` processes, this
    one included; or, given ``meanwhile``, by ``count`` children, and by this process once it
    has run it. Returns the results, and what ``meanwhile`` returned."""
    queue = Queue(by_size(units, sizes))
    children, results = [], []
    try:
        for _ in range((count if meanwhile is not None else count - 1) if units else 0):
            try:
                children.append(fork(partial(_take, front.fresh(), queue)))
            except OSError:
                break  # no fork: this process takes what the others would have
        loaded = meanwhile() if meanwhile is not None else None
        results.append(_take(front.fresh(), queue))
        while children:
            results.append(collect(children.pop(0)))
        return results, loaded
    finally:
        queue.close()
        stop(children)  # left only by an error


def _take(share: Share, queue: Queue[Unit]) -> Result:
    return share.subtrees(queue.taken())


def shared_out(tasks: Sequence[Callable[[], T]], count: int | None = None) -> list[T]:
    """Each task's result, in order: the tasks taken one at a time, in order, by ``count``
    processes (default: one per CPU), forked children and this one, each child's results carried
    back pickled. A task whose child failed before it sent them back is run here again: every
    result is had, and each is what its task returns in one process."""
    count = min(count or workers(), len(tasks))
    if count <= 1:
        return [task() for task in tasks]
    queue: Queue[int] = Queue(list(range(len(tasks))))
    children, results = [], {}
    try:
        for _ in range(count - 1):
            try:
                children.append(fork(lambda: (pickle.dumps({i: tasks[i]() for i in queue.taken()}, 5),)))
            except OSError:
                break  # no fork: this process takes what the others would have
        results = {i: tasks[i]() for i in queue.taken()}
        while children:
            try:
                results.update(pickle.loads(collect(children.pop(0))[0]))  # noqa: S301 - our own child's
            except SnapshotError:
                continue  # its tasks are run here, below
    finally:
        queue.close()
        stop(children)  # left only by an error
    return [results[i] if i in results else tasks[i]() for i in range(len(tasks))]
