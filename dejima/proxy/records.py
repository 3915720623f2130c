"""The proxy's ledger and violation files: JSON lines, appended, mode 0600.

Entries are built by dejima.core.ledger, which removes query values and any secret before a
record exists; this module only writes them.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import IO

from dejima.core.ledger import LedgerEntry, Violation


def _open(path: Path) -> IO[str]:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    return os.fdopen(fd, "a", encoding="utf-8", buffering=1)


class Records:
    def __init__(self, ledger_path: Path, violations_path: Path) -> None:
        self._ledger = _open(ledger_path)
        self._violations = _open(violations_path)

    def entry(self, entry: LedgerEntry) -> None:
        self._ledger.write(json.dumps(entry.record(), ensure_ascii=True) + "\n")

    def violation(self, violation: Violation) -> None:
        self._violations.write(json.dumps(violation.record(), ensure_ascii=True) + "\n")

    def close(self) -> None:
        self._ledger.close()
        self._violations.close()


def read_records(path: Path) -> list[dict[str, object]]:
    """The records of one file (``dejima ledger`` and tests)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
