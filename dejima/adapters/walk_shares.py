"""How a walk is shared out: the top of the tree walked here until there are directories to deal
out, dealt round-robin or by the start's entry counts, each share walked in a forked process (this
one included) that sends back its result."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import partial
from typing import Any, Protocol

from dejima.adapters.forked import collect, fork, stop
from dejima.core.snapshot import Children, Listing

_UNITS_PER_WORKER = 8  # directories dealt to each process, so one big directory does not idle the rest
_SPLITS = 32  # directories the end walks ahead of the fork at most, each too big for one share

Unit = tuple[str, bool]  # a directory to walk, and whether its listing is needed to find removals
Row = tuple[Any, ...]  # an Entry's fields as a plain tuple: what marshal carries
Digested = list[tuple[str, "bytes | None"]]  # directories listed in full, each with its new digest
Result = tuple[list[Row], list[Listing], int, Digested]  # a share's rows, listings, entries seen, digests


class Share(Protocol):
    """One process's share of a walk (tree_walk._Walk)."""

    checking: bool

    def directory(self, relative: str, listed: bool) -> list[Unit]: ...

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
    return units


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


def deal(units: list[Unit], count: int, sizes: dict[str, int] | None) -> list[list[Unit]]:
    """``count`` shares of ``units``: round-robin, or by the ``sizes`` of the start's directories
    (largest first, each to the lightest share)."""
    if not sizes:
        return [units[i::count] for i in range(count)]
    shares: list[list[Unit]] = [[] for _ in range(count)]
    loads = [0] * count
    for unit in sorted(units, key=lambda unit: sizes.get(unit[0], 0), reverse=True):
        lightest = loads.index(min(loads))
        shares[lightest].append(unit)
        loads[lightest] += sizes.get(unit[0], 0) + 1
    return shares


def walk_shares(front: Share, units: list[Unit], count: int,
                meanwhile: Callable[[], Any] | None = None,
                sizes: dict[str, int] | None = None) -> tuple[list[Result], Any]:
    """Deals ``units`` (``deal``) to ``count`` processes, this one included; or, given
    ``meanwhile``, to ``count`` children while this process runs it. Returns the results, and
    what ``meanwhile`` returned."""
    shares = deal(units, count, sizes) if units else []
    local = [] if meanwhile is not None or not shares else shares.pop(0)
    children, results, here = [], [], front.fresh()
    try:
        for share in shares:
            try:
                children.append(fork(partial(front.fresh().subtrees, share)))
            except OSError:
                local += share  # no fork: the same walk, here
        loaded = meanwhile() if meanwhile is not None else None
        results.append(here.subtrees(local))
        while children:
            results.append(collect(children.pop(0)))
        return results, loaded
    finally:
        stop(children)  # left only by an error
