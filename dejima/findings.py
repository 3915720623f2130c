"""The durable record of audit findings and their acknowledgements (SQLite, in the state dir).

An acknowledgement binds to a workspace and a finding's fingerprint (rule, path, key, content):
the same content there stays reviewed; any change to it, or the same file in another workspace, is
a new, unreviewed finding.
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

from dejima import host
from dejima.core.audit import Finding

SCHEMA = """
create table if not exists findings (
    id integer primary key, session text not null, workspace text not null, rule text not null,
    severity text not null, path text not null, key text not null, evidence text not null,
    fingerprint text not null, created real not null,
    unique (workspace, fingerprint)
);
create table if not exists acks (
    workspace text not null, fingerprint text not null, time real not null, note text not null,
    primary key (workspace, fingerprint)
);
"""


@dataclass(frozen=True, slots=True)
class Stored:
    id: int
    session: str
    workspace: str
    finding: Finding
    created: float
    acked: bool


def database_path() -> Path:
    return host.state_dir() / "audit.sqlite3"


class FindingStore:
    def __init__(self, path: Path | None = None) -> None:
        self.path = path or database_path()
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.db = sqlite3.connect(self.path)
        self.db.executescript(SCHEMA)

    def close(self) -> None:
        self.db.close()

    def record(self, session: str, workspace: str, findings: list[Finding]) -> int:
        """Store new findings (one row per workspace and fingerprint); returns how many were new."""
        with self.db:
            before = self.db.total_changes
            self.db.executemany(
                "insert or ignore into findings (session, workspace, rule, severity, path, key, evidence, "
                "fingerprint, created) values (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [(session, workspace, f.rule, f.severity, f.path, f.key, f.evidence, f.fingerprint, time.time())
                 for f in findings],
            )
            return self.db.total_changes - before

    def findings(self, workspace: str | None = None, include_acked: bool = False) -> list[Stored]:
        query = ("select f.id, f.session, f.workspace, f.rule, f.severity, f.path, f.key, f.evidence, f.fingerprint,"
                 " f.created, a.fingerprint is not null from findings f"
                 " left join acks a on a.workspace = f.workspace and a.fingerprint = f.fingerprint")
        conditions, args = [], []
        if workspace is not None:
            conditions.append("f.workspace = ?")
            args.append(workspace)
        if not include_acked:
            conditions.append("a.fingerprint is null")
        if conditions:
            query += " where " + " and ".join(conditions)
        rows = self.db.execute(query + " order by f.id", args).fetchall()
        return [Stored(r[0], r[1], r[2], Finding(r[3], r[4], r[5], r[6], r[7], r[8]), r[9], bool(r[10]))
                for r in rows]

    def ack(self, ids: list[int] | None, note: str) -> int:
        """Acknowledge findings by id (None: every unreviewed one); returns how many."""
        targets = [s for s in self.findings(include_acked=False) if ids is None or s.id in ids]
        with self.db:
            self.db.executemany("insert or replace into acks (workspace, fingerprint, time, note) values (?, ?, ?, ?)",
                                [(s.workspace, s.finding.fingerprint, time.time(), note) for s in targets])
        return len(targets)
