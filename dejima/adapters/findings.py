"""The durable record of audit findings, their files' start and end states, and their reviews
(SQLite, in the state dir).

An acknowledgement binds to a workspace, a mount and a finding's fingerprint (rule, path, key,
content): the same content there stays reviewed; any change to it, or the same file in another
workspace or mount, is a new, unreviewed finding. A finding belongs to the session whose audit
recorded it first; another session that finds the same content adds no row and changes none. A
finding closes when its cause is gone (finding_causes.py says when; `restore` closes it too):
closing is no review, and the same content found again is open again. The lineage
(core/audit/reviewed.py) says what each flagged content was judged against. File contents are
stored once per hash (blobs), for `show` and `restore`.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

from dejima.adapters import host
from dejima.core.audit import CATALOGUE_VERSION, Finding
from dejima.core.audit.reviewed import Baseline, identity

SCHEMA_VERSION = 5
SCHEMA = """
create table if not exists findings (
    id integer primary key, session text not null, workspace text not null, rule text not null,
    severity text not null, path text not null, key text not null, evidence text not null,
    fingerprint text not null, created real not null
);
create table if not exists acks (
    workspace text not null, root text not null, fingerprint text not null, time real not null, note text not null,
    primary key (workspace, root, fingerprint)
);
create table if not exists blobs (sha256 text primary key, data blob not null);
create table if not exists lineage (
    workspace text not null, root text not null, path text not null, content text not null,
    base_kind text, base_mode integer, base_uid integer, base_gid integer, base_sha256 text, base_target text,
    base_blob text,
    primary key (workspace, root, path, content)
);
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
    # Schema 5: the rest of each side's identity (what closing compares with the file on disk), and the
    # closing itself (time; the note stays when it opens again, saying so).
    ("before_sha256", "text"), ("after_mode", "integer"), ("after_uid", "integer"), ("after_gid", "integer"),
    ("after_target", "text"), ("closed", "real"), ("closed_note", "text not null default ''"),
)
_SELECT = ("select f.id, f.session, f.workspace, f.rule, f.severity, f.path, f.key, f.evidence, f.fingerprint,"
           " f.remedy, f.notes, f.created, a.fingerprint is not null, a.note, a.time, f.mount, f.root, f.catalogue,"
           " f.before_kind, f.before_mode, f.before_blob, f.after_kind, f.after_blob, f.after_sha256, f.lines,"
           " f.before_uid, f.before_gid, f.closed, f.closed_note, f.before_sha256, f.after_mode, f.after_uid,"
           " f.after_gid, f.after_target"
           " from findings f left join acks a on a.workspace = f.workspace and a.root = f.root"
           " and a.fingerprint = f.fingerprint")


def _table(name: str) -> str:
    """The statement that makes one of SCHEMA's tables."""
    start = SCHEMA.index(f"create table if not exists {name} ")
    return SCHEMA[start:SCHEMA.index(");", start) + 2]


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
    before_sha256: str | None = None  # a regular file's at the start, even when its bytes were not kept
    after_mode: int | None = None  # the end's mode, owner and link target (None: absent, or an older dejima)
    after_uid: int | None = None
    after_gid: int | None = None
    after_target: str | None = None

    def baseline(self) -> Baseline:
        """The start side, as a lineage baseline."""
        target = os.fsdecode(self.before) if self.before_kind == "symlink" and self.before is not None else None
        sha = self.before_sha256 or (hashlib.sha256(self.before).hexdigest() if self.before_kind == "file" and
                                     self.before is not None else None)
        return Baseline(self.before_kind, self.before_mode, self.before_uid, self.before_gid, sha, target,
                        self.before if self.before_kind == "file" else None)


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
    closed: float | None = None  # when its cause was found gone (or it was restored)
    closed_note: str = ""  # why it closed; "reopened ..." when its cause came back


def database_path() -> Path:
    return host.state_dir() / "audit.sqlite3"


class FindingStore:
    def __init__(self, path: Path | None = None) -> None:
        self.path = path or database_path()
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.db = sqlite3.connect(self.path)
        self.db.executescript(SCHEMA)
        if self._version() < SCHEMA_VERSION:
            with self.db:
                # One transaction, taken before the version is read again: a launcher that dies mid-way leaves
                # the old schema whole, and two launchers upgrading at once upgrade it once.
                self.db.execute("begin immediate")
                if self._version() < SCHEMA_VERSION:
                    self._migrate()

    def _version(self) -> int:
        return int(self.db.execute("pragma user_version").fetchone()[0])

    def _migrate(self) -> None:
        """Brings an older database to this schema: new columns (rows keep their defaults); before schema 5 the
        table held one row per content for good (``unique``), which only an open finding is now."""
        self._add_columns()
        (table,) = self.db.execute("select sql from sqlite_master where type = 'table' and name = 'findings'"
                                   ).fetchone()
        if "unique" in str(table).lower():
            names = ", ".join(row[1] for row in self.db.execute("pragma table_info(findings)"))
            self.db.execute("alter table findings rename to findings_schema_4")
            self.db.execute(_table("findings"))
            self._add_columns()
            self.db.execute(f"insert into findings ({names}) select {names} from findings_schema_4")
            self.db.execute("drop table findings_schema_4")
        if "root" not in {row[1] for row in self.db.execute("pragma table_info(acks)")}:
            # A review bound to a workspace and content held for every mount: now for the mount of each finding
            # it covered (one with no finding left covers nothing: its content, found again, is unreviewed).
            self.db.execute("alter table acks rename to acks_schema_4")
            self.db.execute(_table("acks"))
            self.db.execute("insert or ignore into acks (workspace, root, fingerprint, time, note) "
                            "select a.workspace, f.root, a.fingerprint, a.time, a.note from acks_schema_4 a "
                            "join findings f on f.workspace = a.workspace and f.fingerprint = a.fingerprint")
            self.db.execute("drop table acks_schema_4")
        self.db.execute("create unique index if not exists open_findings on findings (workspace, root, fingerprint) "
                        "where closed is null")
        self._lineage_of_older_findings()
        self.db.execute(f"pragma user_version = {SCHEMA_VERSION}")

    def _lineage_of_older_findings(self) -> None:
        """The lineage of the findings an older dejima recorded, oldest first (as their audits would have
        written it): a file reviewed before this version, changed after it, is judged against its start too."""
        rows = self.db.execute("select workspace, root, path, before_kind, before_mode, before_blob, before_uid, "
                               "before_gid, after_kind, after_sha256, after_target from findings where path != '' "
                               "order by id").fetchall()
        for workspace, root, path, before_kind, mode, blob, uid, gid, after_kind, after_sha, after_target in rows:
            before = self.blob(blob)
            if before_kind == "file" and before is None:
                continue  # its start was not kept: no baseline to judge against
            state = FileState(before_kind, mode, before, after_kind, None, after_sha, uid, gid,
                              after_target=after_target)
            self._record_lineage(str(workspace), str(root), {str(path): state})

    def _add_columns(self) -> None:
        have = {row[1] for row in self.db.execute("pragma table_info(findings)")}
        for name, declaration in COLUMNS:
            if name not in have:
                self.db.execute(f"alter table findings add column {name} {declaration}")

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
        """Store new findings (one open row per workspace and fingerprint: a content another session recorded
        first stays that session's; one found again after its finding closed is a new row, this session's),
        and the lineage of each flagged path; returns how many were new."""
        with self.db:
            new = 0
            for f in findings:
                state = states.get(f.path, FileState())
                new += self.db.execute(
                    "insert or ignore into findings (session, workspace, rule, severity, path, key, evidence, "
                    "fingerprint, created, remedy, notes, mount, root, catalogue, before_kind, before_mode, "
                    "before_blob, after_kind, after_blob, after_sha256, lines, before_uid, before_gid, before_sha256, "
                    "after_mode, after_uid, after_gid, after_target) "
                    "values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (session, workspace, f.rule, f.severity, f.path, f.key, f.evidence, f.fingerprint, time.time(),
                     f.remedy, "\n".join(f.notes), mount, root, CATALOGUE_VERSION, state.before_kind,
                     state.before_mode, self._blob(state.before), state.after_kind, self._blob(state.after),
                     state.after_sha256, json.dumps(list(f.lines)), state.before_uid, state.before_gid,
                     state.before_sha256, state.after_mode, state.after_uid, state.after_gid, state.after_target)
                ).rowcount
            self._record_lineage(workspace, root, states)
            return new

    def _record_lineage(self, workspace: str, root: str, states: dict[str, FileState]) -> None:
        """For each flagged path's end content: the baseline its audit judged it against (the start's own
        lineage, else the start). Written once per content: a later session cannot rewrite it."""
        for path, state in states.items():
            start = state.baseline()
            start_id = identity(start.kind, start.sha256, start.target)
            end_id = identity(state.after_kind, state.after_sha256, state.after_target)
            if end_id is None or start_id == end_id:
                continue
            base = self.base_of(workspace, root, path, start_id) if start_id is not None else None
            base = base or start
            self.db.execute(
                "insert or ignore into lineage (workspace, root, path, content, base_kind, base_mode, base_uid, "
                "base_gid, base_sha256, base_target, base_blob) values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (workspace, root, path, end_id, base.kind, base.mode, base.uid, base.gid, base.sha256, base.target,
                 self._blob(base.data)))

    def base_of(self, workspace: str, root: str, path: str, content: str) -> Baseline | None:
        """The baseline a flagged content at ``path`` was judged against (None: no audit flagged it)."""
        row = self.db.execute(
            "select base_kind, base_mode, base_uid, base_gid, base_sha256, base_target, base_blob from lineage "
            "where workspace = ? and root = ? and path = ? and content = ?",
            (workspace, root, path, content)).fetchone()
        if row is None:
            return None
        kind, mode, uid, gid, sha, target, blob = row
        return Baseline(kind, mode, uid, gid, sha, target, self.blob(blob))

    def lineage_paths(self, workspace: str, root: str) -> set[str]:
        """The paths of a mount that have a lineage (the end audit asks ``base_of`` only for these)."""
        rows = self.db.execute("select distinct path from lineage where workspace = ? and root = ?", (workspace, root))
        return {str(path) for (path,) in rows}

    def _stored(self, row: tuple[object, ...], with_state: bool = False, light: bool = False) -> Stored:
        """A row as a finding; ``with_state``: with its file's states (``light``: without the files' bytes,
        but a link's target)."""
        (id_, session, workspace, rule, severity, path, key, evidence, fp, remedy, notes, created, acked, note,
         ack_time, mount, root, catalogue, before_kind, before_mode, before_blob, after_kind, after_blob,
         after_sha, lines, before_uid, before_gid, closed, closed_note, before_sha, after_mode, after_uid, after_gid,
         after_target) = row
        finding = Finding(str(rule), str(severity), str(path), str(key), str(evidence), str(fp), str(remedy),
                          tuple(str(notes).splitlines()), tuple(map(str, json.loads(str(lines)))))
        state = None
        if with_state:
            before = self.blob(before_blob) if not light or before_kind == "symlink" else None  # type: ignore
            if light and before_sha is None and before_kind == "file":
                before_sha = before_blob  # a blob is named by its bytes' hash: the file's, when kept whole
            state = FileState(before_kind, before_mode, before, after_kind,  # type: ignore[arg-type]
                              None if light else self.blob(after_blob), after_sha, before_uid,  # type: ignore
                              before_gid, before_sha, after_mode, after_uid, after_gid, after_target)  # type: ignore
        return Stored(int(id_), str(session), str(workspace), finding, float(created), bool(acked),  # type: ignore
                      str(note or ""), ack_time, str(mount), str(root), str(catalogue), state,  # type: ignore
                      closed, str(closed_note))  # type: ignore[arg-type]

    def findings(self, workspace: str | None = None, include_acked: bool = False) -> list[Stored]:
        """The open, unreviewed findings (``include_acked``: every one, reviewed and closed too)."""
        conditions, args = [], []
        if workspace is not None:
            conditions.append("f.workspace = ?")
            args.append(workspace)
        if not include_acked:
            conditions.append("a.fingerprint is null and f.closed is null")
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
            self.db.executemany("insert or replace into acks (workspace, root, fingerprint, time, note) "
                                "values (?, ?, ?, ?, ?)",
                                [(s.workspace, s.root, s.finding.fingerprint, time.time(), note) for s in targets])
        return targets

    def with_states(self, workspace: str) -> list[Stored]:
        """Every finding of ``workspace`` about one path, with its files' states less their bytes (what
        closing compares with the disk)."""
        rows = self.db.execute(f"{_SELECT} where f.workspace = ? and f.path != '' order by f.id", (workspace,))
        return [self._stored(row, with_state=True, light=True) for row in rows.fetchall()]

    def unack(self, stored: Stored) -> None:
        """Withdraw the review of a finding's content (its file was put back)."""
        with self.db:
            self.db.execute("delete from acks where workspace = ? and root = ? and fingerprint = ?",
                            (stored.workspace, stored.root, stored.finding.fingerprint))

    def workspaces(self) -> list[str]:
        return [str(w) for (w,) in self.db.execute("select distinct workspace from findings order by workspace")]

    def close_findings(self, ids: list[int], note: str) -> None:
        """Close findings (their cause is gone): no review, their content found again opens them."""
        with self.db:
            self.db.executemany("update findings set closed = ?, closed_note = ? where id = ?",
                                [(time.time(), note, i) for i in ids])

    def reopen_findings(self, ids: list[int], note: str) -> None:
        with self.db:
            # An open finding of the same content (another session's, recorded since) keeps its place.
            self.db.executemany("update or ignore findings set closed = null, closed_note = ? where id = ?",
                                [(note, i) for i in ids])
