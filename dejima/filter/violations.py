"""The filter's violation records: JSON lines on stdout, where the launcher collects them."""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any

from dejima.filter import VIOLATION


class ViolationLog:
    """Violation records as JSON lines on stdout, where the launcher collects them."""

    PREFIX = VIOLATION

    def __init__(self, stream: Any = None) -> None:
        self.stream = stream or sys.stdout
        self.lock = threading.Lock()

    def __call__(self, record: dict[str, Any]) -> None:
        record = {"time": round(time.time(), 3), **record}
        with self.lock:
            self.stream.write(self.PREFIX + json.dumps(record, sort_keys=True) + "\n")
            self.stream.flush()
