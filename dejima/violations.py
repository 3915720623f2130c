"""The durable record of what a session was refused: names, answers, connections.

The filter prints one JSON line per refusal; the launcher appends them to
``$XDG_STATE_HOME/dejima/sessions/<session>/violations.jsonl`` as they arrive, so the record
outlives the session (and survives a crash of the launcher up to the last line written).
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from pathlib import Path
from typing import Any

from dejima import host
from dejima.filter import VIOLATION as PREFIX


def sessions_dir() -> Path:
    return host.state_dir() / "sessions"


RUN_DIR = "run"  # a session's sockets (control, proxy): mounted into its filter alone
RECORDS = "violations.jsonl"  # the filter's and the credential proxy's refusals, one JSON line each
LEDGER = "ledger.jsonl"  # the requests the credential proxy carried


def run_dir(session_id: str) -> Path:
    return sessions_dir() / session_id / RUN_DIR


def ledger_path(session_id: str) -> Path:
    return sessions_dir() / session_id / LEDGER


class ViolationStore:
    def __init__(self, session_id: str) -> None:
        self.path = sessions_dir() / session_id / RECORDS
        self.lock = threading.Lock()
        self.counts: Counter[str] = Counter()

    def append_output(self, output: str) -> None:
        """Record every violation line of a filter's output."""
        for line in output.splitlines():
            self.append_line(line)

    def append_line(self, line: str) -> bool:
        """Record a filter log line if it is a violation; returns whether it was one."""
        if not line.startswith(PREFIX):
            return False
        try:
            record = json.loads(line[len(PREFIX):])
        except ValueError:
            return False
        with self.lock:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            with self.path.open("a") as stream:
                stream.write(json.dumps(record, sort_keys=True) + "\n")
            self.counts[str(record.get("kind", "?"))] += 1
        return True

    def summary(self) -> str | None:
        """One line of totals: what was refused, and the live grants that changed the policy."""
        if not self.counts:
            return None
        labels = (("dns", "name(s) refused"), ("dns-answer", "answer address(es) dropped"),
                  ("connection", "connection(s) blocked"), ("grant", "grant(s)"), ("revoke", "revoke(s)"),
                  ("grant-expired", "grant(s) expired"))
        parts = [f"{self.counts[kind]} {label}" for kind, label in labels if self.counts[kind]]
        other = sum(self.counts.values()) - sum(self.counts[kind] for kind, _ in labels)
        parts += [f"{other} other"] if other else []
        return ", ".join(parts)


def read(session_id: str) -> list[dict[str, Any]]:
    path = sessions_dir() / session_id / RECORDS
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def known_sessions() -> list[str]:
    root = sessions_dir()
    return sorted(p.name for p in root.iterdir() if (p / RECORDS).exists()) if root.exists() else []
