import sqlite3
from pathlib import Path

import pytest

from dejima.adapters.findings import FileState, FindingStore
from dejima.core.audit import Finding


def finding(value: str) -> Finding:
    return Finding("G05", "high", ".git/config", "core.pager", f"core.pager = {value}", f"fp-{value}")


def record(store: FindingStore, session: str, workspace: str, *found: Finding) -> int:
    return store.record(session, workspace, "workspace", workspace, list(found), {})


def test_findings_survive_a_reopen_and_acks_bind_to_content(tmp_path: Path) -> None:
    db = tmp_path / "audit.sqlite3"
    store = FindingStore(db)
    assert record(store, "s1", "/w", finding("less")) == 1
    assert record(store, "s1", "/w", finding("less")) == 0  # the same content is one finding
    store.close()
    store = FindingStore(db)
    (stored,) = store.findings("/w")
    assert [s.id for s in store.ack([stored.id], "reviewed: my pager")] == [stored.id]
    assert store.findings("/w") == []
    record(store, "s2", "/w", finding("less"))
    assert store.findings("/w") == []  # same content: still reviewed
    record(store, "s3", "/w", finding("more"))
    assert [s.finding.evidence for s in store.findings("/w")] == ["core.pager = more"]  # changed: open again
    acked = [s for s in store.findings("/w", include_acked=True) if s.acked]
    assert [(s.ack_note, s.finding.evidence) for s in acked] == [("reviewed: my pager", "core.pager = less")]


def test_an_ack_covers_its_own_workspace_only(tmp_path: Path) -> None:
    store = FindingStore(tmp_path / "audit.sqlite3")
    record(store, "s1", "/a", finding("less"))
    record(store, "s2", "/b", finding("less"))
    store.ack([store.findings("/a")[0].id], "fine here")
    assert store.findings("/a") == [] and len(store.findings("/b")) == 1


def test_file_states_are_kept_once_per_content(tmp_path: Path) -> None:
    store = FindingStore(tmp_path / "audit.sqlite3")
    state = FileState("file", 0o644, b"[core]\n", "file", b"[core]\n\tpager = less\n", "abc")
    store.record("s1", "/w", "workspace", "/w", [finding("less")], {".git/config": state})
    (stored,) = store.get([store.findings("/w")[0].id])
    assert stored.state == state and stored.root == "/w" and stored.mount == "workspace"
    assert store.get([999]) == []


# The findings table of schema 1 (later ones added columns, each with a default), with its place for them.
SCHEMA_1 = """
    create table findings (id integer primary key, session text not null, workspace text not null,
        rule text not null, severity text not null, path text not null, key text not null,
        evidence text not null, fingerprint text not null, created real not null, {}
        unique (workspace, fingerprint));
"""


def old_database(db: Path, script: str) -> None:
    old = sqlite3.connect(db)
    old.executescript(script)
    old.commit()
    old.close()


def test_a_database_from_the_first_schema_gains_the_new_columns(tmp_path: Path) -> None:
    db = tmp_path / "audit.sqlite3"
    old_database(db, SCHEMA_1.format("") + """
        insert into findings values (1, 's0', '/w', 'G-hook', 'critical', '.git/hooks/x', '', 'hook', 'fp', 0);""")
    store = FindingStore(db)
    (stored,) = store.findings("/w")
    assert (stored.finding.rule, stored.finding.remedy, stored.mount) == ("G-hook", "review", "workspace")
    record(store, "s1", "/w", finding("less"))
    assert len(store.findings("/w")) == 2


def test_a_schema_4_database_gains_closing_and_lineage_and_keeps_its_reviews(tmp_path: Path) -> None:
    db = tmp_path / "audit.sqlite3"
    old_database(db, SCHEMA_1.format("""
        remedy text not null default 'review', notes text not null default '',
        mount text not null default 'workspace', root text not null default '',
        catalogue text not null default '', before_kind text, before_mode integer, before_blob text,
        after_kind text, after_blob text, after_sha256 text, lines text not null default '[]',
        before_uid integer, before_gid integer,""") + """
        create table acks (workspace text not null, fingerprint text not null, time real not null,
            note text not null, primary key (workspace, fingerprint));
        create table blobs (sha256 text primary key, data blob not null);
        insert into findings (id, session, workspace, rule, severity, path, key, evidence, fingerprint, created,
            root, before_kind, after_kind, after_sha256)
            values (1, 's0', '/w', 'G01', 'critical', '.git/hooks/x', '', 'hook', 'fp-old', 0, '/w', null, 'file',
                    'abc'),
            (2, 's0', '/w', 'G05', 'high', '.git/config', 'core.pager', 'pager', 'fp-acked', 0, '/w', 'file',
             'file', 'def');
        insert into acks values ('/w', 'fp-acked', 0, 'mine');
        pragma user_version = 4;
    """)
    store = FindingStore(db)
    assert store.db.execute("pragma user_version").fetchone()[0] == 5
    assert [(s.id, s.closed, s.closed_note) for s in store.findings("/w")] == [(1, None, "")]
    assert [s.id for s in store.findings("/w", include_acked=True) if s.acked] == [2]
    store.close_findings([1], "closed: removed")
    assert store.findings("/w") == []
    state = FileState("file", 0o644, b"a\n", "file", b"b\n", "sha-b", 1000, 1000, None, 0o644, 1000, 1000)
    store.record("s1", "/w", "workspace", "/w", [finding("less")], {".git/config": state})
    assert store.base_of("/w", "/w", ".git/config", "file:sha-b") is not None
    store.close()
    reopened = FindingStore(db)  # opened again: nothing to migrate, nothing lost
    assert [(s.id, s.closed_note) for s in reopened.findings("/w", include_acked=True)][:1] == [(1, "closed: removed")]


def test_an_upgrade_that_fails_half_way_leaves_the_old_database_whole(tmp_path: Path) -> None:
    """A table in the way of the rebuild (left by something else) stops the upgrade after it added columns:
    all of it is undone, and the findings read as before once the obstacle is gone."""
    db = tmp_path / "audit.sqlite3"
    old_database(db, SCHEMA_1.format("") + """
        insert into findings values (1, 's0', '/w', 'G01', 'critical', '.git/hooks/x', '', 'hook', 'fp', 0);
        create table findings_schema_4 (x);""")
    with pytest.raises(sqlite3.OperationalError):
        FindingStore(db)
    check = sqlite3.connect(db)
    columns = {row[1] for row in check.execute("pragma table_info(findings)")}
    assert "closed" not in columns and check.execute("pragma user_version").fetchone()[0] == 0
    check.execute("drop table findings_schema_4")
    check.commit()
    check.close()
    assert [s.id for s in FindingStore(db).findings("/w")] == [1]
