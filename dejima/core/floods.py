"""Records under a flood: every event counted, not every event written.

A session can send refused requests as fast as its loop turns; one record each would write the
disk full at its pace. So a record stream passes through a ``FloodGate``:

- per key (a violation's kind and route; a ledger entry's route, method and status), the first
  ``per_second`` records of each second are written whole;
- the rest of that second are counted into one **aggregate** record, written when the second is
  over: the first of them as the example, with ``count`` (how many it stands for), ``until`` (the
  second's end) and the sum of every field named in ``summed`` (bytes, durations);
- once ``max_bytes`` have been written for the session, nothing more is written: every record is
  counted per key, and the counts are written at close, one record per key with ``capped: true``.

The total stays exact: the records' counts (1 for a record without ``count``) add up to every
event offered. Keys are bounded (``MAX_KEYS``; past them one catch-all key counts the rest), so
the gate's own memory is bounded too. No I/O and no clock here: the caller says when it is.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any

MAX_KEYS = 256
OVERFLOW: tuple[str, ...] = ("*",)
Record = dict[str, Any]


def count_of(record: Record) -> int:
    """How many events a record stands for (aggregates carry ``count``)."""
    try:
        return max(1, int(record.get("count", 1)))
    except (TypeError, ValueError):
        return 1


def total(records: Iterable[Record], where: Callable[[Record], bool] = lambda _: True) -> int:
    return sum(count_of(r) for r in records if where(r))


@dataclass
class _Tally:
    """Events of one key that were counted instead of written."""

    example: Record
    count: int = 0
    sums: dict[str, float] = field(default_factory=dict)

    def add(self, record: Record, summed: tuple[str, ...]) -> None:
        self.count += 1
        for name in summed:
            value = record.get(name)
            if isinstance(value, int | float) and not isinstance(value, bool):
                self.sums[name] = self.sums.get(name, 0) + value

    def record(self, **extra: Any) -> Record:
        merged = {**self.example, **{k: round(v, 3) if isinstance(v, float) else v for k, v in self.sums.items()}}
        return {**merged, "count": self.count, **extra}


@dataclass
class _Window:
    start: float
    written: int = 0
    tally: _Tally | None = None


@dataclass
class FloodGate:
    per_second: int
    max_bytes: int
    summed: tuple[str, ...] = ()
    written_bytes: int = 0
    offered: int = 0
    _windows: dict[Hashable, _Window] = field(default_factory=dict)
    _capped: dict[Hashable, _Tally] = field(default_factory=dict)
    _next_due: float = float("inf")  # the earliest end of a second: before it, ``due`` has nothing to do

    @property
    def capped(self) -> bool:
        return self.written_bytes >= self.max_bytes

    @property
    def pending(self) -> bool:
        """Whether aggregates wait for their second to end (the caller flushes them with ``due``)."""
        return any(w.tally is not None for w in self._windows.values())

    def wrote(self, size: int) -> None:
        """The caller wrote ``size`` bytes of what the gate let through."""
        self.written_bytes += size

    def offer(self, key: Hashable, record: Record, now: float) -> list[Record]:
        """The records to write now for one event (itself, or nothing while its key is flooding, plus
        any aggregate whose second is over)."""
        self.offered += 1
        out = self.due(now) if now >= self._next_due else []
        if self.capped:
            self._tally(self._capped, key, record)
            return out
        window = self._windows.get(key)
        if window is None and len(self._windows) >= MAX_KEYS:
            key, window = OVERFLOW, self._windows.get(OVERFLOW)
        if window is None or now - window.start >= 1.0:
            window = self._windows[key] = _Window(now)
            self._next_due = min(self._next_due, now + 1.0)
        if window.written < self.per_second:
            window.written += 1
            out.append(record)
        else:
            if window.tally is None:
                window.tally = _Tally(record)
            window.tally.add(record, self.summed)
        return out

    def _tally(self, tallies: dict[Hashable, _Tally], key: Hashable, record: Record) -> None:
        if key not in tallies and len(tallies) >= MAX_KEYS:
            key = OVERFLOW
        tally = tallies.setdefault(key, _Tally(record))
        tally.add(record, self.summed)

    def due(self, now: float) -> list[Record]:
        """Aggregates whose second is over; their keys start afresh."""
        out = []
        for key, window in list(self._windows.items()):
            if now - window.start >= 1.0:
                if window.tally is not None:
                    out.append(window.tally.record(until=round(window.start + 1.0, 3)))
                del self._windows[key]
        self._next_due = min((w.start + 1.0 for w in self._windows.values()), default=float("inf"))
        return out

    def close(self, now: float) -> list[Record]:
        """Everything still counted: open aggregates, then the totals kept past the disk bound."""
        out = [w.tally.record(until=round(now, 3)) for w in self._windows.values() if w.tally is not None]
        self._windows.clear()
        out += [t.record(until=round(now, 3), capped=True) for t in self._capped.values()]
        self._capped.clear()
        return out
