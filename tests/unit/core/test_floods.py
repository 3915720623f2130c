"""The flood gate, pure: the first records of each second per key written whole, the rest counted into
one aggregate per key and second, nothing but counts past the bound on disk; the total always exact."""

from __future__ import annotations

import json
from collections.abc import Hashable, Sequence

from dejima.core.floods import MAX_KEYS, FloodGate, Record, count_of, total


def run(gate: FloodGate, events: Sequence[tuple[float, Hashable, Record]], end: float) -> list[Record]:
    written: list[Record] = []

    def keep(records: list[Record]) -> None:
        for record in records:
            written.append(record)
            gate.wrote(len(json.dumps(record)) + 1)

    for now, key, record in events:
        keep(gate.offer(key, record, now))
    keep(gate.due(end))
    keep(gate.close(end))
    return written


def test_below_the_rate_every_record_is_written_whole() -> None:
    gate = FloodGate(per_second=10, max_bytes=1 << 20)
    events = [(i * 0.2, ("decoy-used", "api"), {"n": i}) for i in range(50)]  # 5 a second
    written = run(gate, events, 100.0)
    assert [r["n"] for r in written] == list(range(50)) and all("count" not in r for r in written)


def test_a_flood_is_written_as_one_aggregate_per_key_and_second() -> None:
    gate = FloodGate(per_second=10, max_bytes=1 << 20, summed=("bytes_in",))
    events = [(i / 1000, ("foreign-credential", "api"), {"n": i, "bytes_in": 2}) for i in range(3000)]  # 3 s
    events += [(i / 1000, ("decoy-used", "api"), {"n": i, "bytes_in": 1}) for i in range(0, 3000, 3)]
    events.sort(key=lambda e: e[0])
    written = run(gate, events, 10.0)
    assert len(written) == 3 * 2 * 11  # per second and key: 10 whole, 1 aggregate
    assert total(written) == 4000 == gate.offered
    first = next(r for r in written if "count" in r and r["n"] >= 10)
    assert first["count"] == 990 and first["bytes_in"] == 2 * 990 and first["until"] == 1.0
    assert sum(int(r["bytes_in"]) for r in written) == 3000 * 2 + 1000  # sums exact too


def test_past_the_bound_on_disk_only_counts_are_kept_and_written_at_close() -> None:
    gate = FloodGate(per_second=10, max_bytes=2000)
    events = [(i * 0.5, ("malformed-request", ""), {"n": i, "detail": "x" * 50}) for i in range(1000)]
    written = run(gate, events, 600.0)
    size = sum(len(json.dumps(r)) + 1 for r in written)
    assert size < 2000 + 200  # the bound, and one closing record per key
    assert total(written) == 1000
    closing = written[-1]
    assert closing["capped"] is True and closing["count"] > 900


def test_keys_are_bounded_so_is_the_gate() -> None:
    gate = FloodGate(per_second=1, max_bytes=1 << 30)
    events = [(0.0, (f"route-{i}",), {"n": i}) for i in range(MAX_KEYS * 4)] * 3
    written = run(gate, events, 5.0)
    assert len(gate._windows) == 0 and total(written) == MAX_KEYS * 4 * 3
    assert len(written) <= MAX_KEYS * 4 + MAX_KEYS + 1  # whole ones, then one aggregate per kept key


def test_count_of_reads_what_a_record_stands_for() -> None:
    assert count_of({}) == 1 and count_of({"count": 7}) == 7 and count_of({"count": "x"}) == 1
