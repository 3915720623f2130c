"""The proxy's ledger and violation files: JSON lines, appended, mode 0600, bounded under floods.

Entries are built by dejima.core.ledger, which removes query values and any secret before a
record exists; each file's records pass through a dejima.core.floods gate (the first records of
each second per key written whole, the rest of that second as one aggregate with a ``count``, and
nothing but counts past the session's bound on disk, written at close). This module only writes.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import IO, Any

from dejima.core.floods import FloodGate, Record
from dejima.core.ledger import LedgerEntry, Violation

RECORDS_PER_SECOND = 10  # per key: a violation's kind and route, a ledger entry's route, method and status
MAX_LEDGER_BYTES = 64 * 1024**2  # per session: some 250,000 requests written one by one
MAX_VIOLATION_BYTES = 8 * 1024**2


def _open(path: Path) -> IO[str]:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    return os.fdopen(fd, "a", encoding="utf-8", buffering=1)


class _Stream:
    def __init__(self, path: Path, gate: FloodGate) -> None:
        self.file = _open(path)
        self.gate = gate

    def offer(self, key: tuple[Any, ...], record: Record, now: float) -> None:
        self.write(self.gate.offer(key, record, now))

    def write(self, records: list[Record]) -> None:
        for record in records:
            line = json.dumps(record, ensure_ascii=True) + "\n"
            self.file.write(line)
            self.gate.wrote(len(line))

    def close(self, now: float) -> None:
        self.write(self.gate.close(now))
        self.file.close()


class Records:
    def __init__(self, ledger_path: Path, violations_path: Path) -> None:
        self._ledger = _Stream(ledger_path, FloodGate(RECORDS_PER_SECOND, MAX_LEDGER_BYTES,
                                                      ("bytes_in", "bytes_out", "duration_ms")))
        self._violations = _Stream(violations_path, FloodGate(RECORDS_PER_SECOND, MAX_VIOLATION_BYTES))

    def entry(self, entry: LedgerEntry) -> None:
        self._ledger.offer((entry.route, entry.method, entry.status), entry.record(), time.time())

    def violation(self, violation: Violation) -> None:
        self._violations.offer((violation.kind, violation.route), violation.record(), time.time())

    @property
    def pending(self) -> bool:
        """Aggregates wait for their second to end: call ``flush`` after it."""
        return self._ledger.gate.pending or self._violations.gate.pending

    def flush(self) -> None:
        now = time.time()
        for stream in (self._ledger, self._violations):
            stream.write(stream.gate.due(now))

    def close(self) -> None:
        now = time.time()
        self._ledger.close(now)
        self._violations.close(now)


def read_records(path: Path) -> list[dict[str, object]]:
    """The records of one file (``dejima ledger`` and tests)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
