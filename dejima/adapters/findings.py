"""The durable record of audit findings, their files' start and end states, and their reviews
(SQLite, in the state dir).

An acknowledgement binds to a workspace and a finding's fingerprint (rule, path, key, content):
the same content there stays reviewed; any change to it, or the same file in another workspace, is
a new, unreviewed finding. File contents are stored once per hash (blobs), for `show` and
`restore`.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

from dejima.adapters import host
from dejima.core.audit import CATALOGUE_VERSION, Finding

SCHEMA_VERSION = 4
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
create table if not exists blobs (sha256 text primary key, data blob not null);
"""
# Columns added since schema 1 (an older database gains them, its rows keep their defaults).
COLUMNS = (
    ("remedy", "text not null default 'review'"), ("notes", "text not null default ''"),
    ("mount", "text not null default 'workspace'"), ("root", "text not null default ''"),
    ("catalogue", "text not null default ''"), ("before_kind", "text"), ("before_mode", "integer"),
    ("before_blob", "text"), ("after_kind", "text"), ("after_blob", "text"), ("after_sha256", "text"),
    # Schema 3: the other changes of the same file, merged into one finding (a JSON list).
    ("lines", "text not null default '[]'"),
    # Schema 4: the path's owner at the start, which restore puts back with its content and mode.
    ("before_uid", "integer"), ("before_gid", "integer"),
)
_SELECT = ("select f.id, f.session, f.workspace, f.rule, f.severity, f.path, f.key, f.evidence, f.fingerprint,"
           " f.remedy, f.notes, f.created, a.fingerprint is not null, a.note, a.time, f.mount, f.root, f.catalogue,"
           " f.before_kind, f.before_mode, f.before_blob, f.after_kind, f.after_blob, f.after_sha256, f.lines,"
           " f.before_uid, f.before_gid"
           " from findings f left join acks a on a.workspace = f.workspace and a.fingerprint = f.fingerprint")


@dataclass(frozen=True, slots=True)
class FileState:
    """A flagged path at the start and at the end of the session (None: absent, or not kept)."""

    before_kind: str | None = None
    before_mode: int | None = None
    before: bytes | None = None
    after_kind: str | None = None
    after: bytes | None = None
    after_sha256: str | None = None
    before_uid: int | None = None  # the owner at the start (None: not kept, a finding from an older dejima)
    before_gid: int | None = None


@dataclass(frozen=True, slots=True)
class Stored:
    id: int
    session: str
    workspace: str
    finding: Finding
    created: float
    acked: bool
    ack_note: str = ""
    ack_time: float | None = None
    mount: str = "workspace"
    root: str = ""
    catalogue: str = ""
    state: FileState | None = None  # only loaded by `get`


def database_path() -> Path:
    return host.state_dir() / "audit.sqlite3"


class FindingStore:
    def __init__(self, path: Path | None = None) -> None:
        self.path = path or database_path()
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.db = sqlite3.connect(self.path)
        with self.db:
            self.db.executescript(SCHEMA)
            if self.db.execute("pragma user_version").fetchone()[0] < SCHEMA_VERSION:
                have = {row[1] for row in self.db.execute("pragma table_info(findings)")}
                for name, declaration in COLUMNS:
                    if name not in have:
                        self.db.execute(f"alter table findings add column {name} {declaration}")
                self.db.execute(f"pragma user_version = {SCHEMA_VERSION}")

    def close(self) -> None:
        self.db.close()

    def _blob(self, data: bytes | None) -> str | None:
        if data is None:
            return None
        digest = hashlib.sha256(data).hexdigest()
        self.db.execute("insert or ignore into blobs (sha256, data) values (?, ?)", (digest, data))
        return digest

    def blob(self, digest: str | None) -> bytes | None:
        if digest is None:
            return None
        row = self.db.execute("select data from blobs where sha256 = ?", (digest,)).fetchone()
        return bytes(row[0]) if row else None

    def record(self, session: str, workspace: str, mount: str, root: str, findings: list[Finding],
               states: dict[str, FileState]) -> int:
        """Store new findings (one row per workspace and fingerprint); returns how many were new."""
        with self.db:
            before = self.db.total_changes
            for f in findings:
                state = states.get(f.path, FileState())
                self.db.execute(
                    "insert or ignore into findings (session, workspace, rule, severity, path, key, evidence, "
                    "fingerprint, created, remedy, notes, mount, root, catalogue, before_kind, before_mode, "
                    "before_blob, after_kind, after_blob, after_sha256, lines, before_uid, before_gid) "
                    "values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (session, workspace, f.rule, f.severity, f.path, f.key, f.evidence, f.fingerprint, time.time(),
                     f.remedy, "\n".join(f.notes), mount, root, CATALOGUE_VERSION, state.before_kind,
                     state.before_mode, self._blob(state.before), state.after_kind, self._blob(state.after),
                     state.after_sha256, json.dumps(list(f.lines)), state.before_uid, state.before_gid))
            return self.db.total_changes - before

    def _stored(self, row: tuple[object, ...], with_state: bool = False) -> Stored:
        (id_, session, workspace, rule, severity, path, key, evidence, fp, remedy, notes, created, acked, note,
         ack_time, mount, root, catalogue, before_kind, before_mode, before_blob, after_kind, after_blob,
         after_sha, lines, before_uid, before_gid) = row
        finding = Finding(str(rule), str(severity), str(path), str(key), str(evidence), str(fp), str(remedy),
                          tuple(str(notes).splitlines()), tuple(map(str, json.loads(str(lines)))))
        state = FileState(before_kind, before_mode, self.blob(before_blob), after_kind,  # type: ignore[arg-type]
                          self.blob(after_blob), after_sha, before_uid, before_gid  # type: ignore[arg-type]
                          ) if with_state else None
        return Stored(int(id_), str(session), str(workspace), finding, float(created), bool(acked),  # type: ignore
                      str(note or ""), ack_time, str(mount), str(root), str(catalogue), state)  # type: ignore

    def findings(self, workspace: str | None = None, include_acked: bool = False) -> list[Stored]:
        conditions, args = [], []
        if workspace is not None:
            conditions.append("f.workspace = ?")
            args.append(workspace)
        if not include_acked:
            conditions.append("a.fingerprint is null")
        query = _SELECT + (" where " + " and ".join(conditions) if conditions else "")
        return [self._stored(row) for row in self.db.execute(query + " order by f.id", args).fetchall()]

    def get(self, ids: list[int]) -> list[Stored]:
        """Findings by id, with their files' start and end states; unknown ids are left out."""
        marks = ",".join("?" * len(ids))
        rows = self.db.execute(f"{_SELECT} where f.id in ({marks}) order by f.id", ids).fetchall() if ids else []
        return [self._stored(row, with_state=True) for row in rows]

    def ack(self, ids: list[int] | None, note: str, workspace: str | None = None) -> list[Stored]:
        """Acknowledge unreviewed findings by id (None: every one, of ``workspace`` if given)."""
        targets = [s for s in self.findings(workspace, include_acked=False) if ids is None or s.id in ids]
        with self.db:
            self.db.executemany("insert or replace into acks (workspace, fingerprint, time, note) values (?, ?, ?, ?)",
                                [(s.workspace, s.finding.fingerprint, time.time(), note) for s in targets])
        return targets
