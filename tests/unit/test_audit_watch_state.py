"""The paths a session's manifests ask the audit to watch travel with the audit's start state: a
crashed launcher's session is audited by the next run with them, a state written before they were
kept is read as having none, and their start bytes are kept (for `dejima-audit restore`) even
where the last audit's state is trusted."""

from __future__ import annotations

import io
import json
from dataclasses import replace
from pathlib import Path, PurePosixPath

import pytest

from dejima.adapters.findings import FindingStore
from dejima.adapters.session_dirs import sessions_dir
from dejima.core.audit.manifest_watch import Watch, watch_entry
from dejima.core.manifest import Manifest
from dejima.core.plan import Identity, SessionRequest, build_session_plan
from dejima.core.resolve import Choice, Resolved
from dejima.core.settings import Settings
from dejima.orchestration import exit_audit
from dejima.orchestration.executor import audited_mounts
from dejima.ui.console import UI, plain_console
from tests.unit.racy import short_racy_window, tick  # noqa: F401 - the fixture applies by being imported

SOURCE = "/home/me/.config/dejima/workflows/mine.toml"
WATCH = (watch_entry("Makefile.local", SOURCE), watch_entry("tools/", SOURCE))


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / "tools").mkdir(parents=True)
    (root / "Makefile.local").write_text("all:\n\ttrue\n")
    (root / "tools" / "gen.sh").write_text("echo gen\n")
    return root


def finish(session_id: str) -> list[tuple[str, str]]:
    """The audit of a session whose launcher is gone: from its saved start state."""
    found = exit_audit.finish(session_id, UI(plain_console(io.StringIO())))
    return [(f.rule, f.path) for f in found]


def test_a_crashed_launchers_session_is_audited_with_its_watch_list(workspace: Path) -> None:
    exit_audit.start("w1", [exit_audit.Mount("workspace", workspace, WATCH)])
    saved = json.loads((sessions_dir() / "w1" / "audit" / "state.json").read_text())
    assert saved["mounts"][0]["watch"] == [["Makefile.local", SOURCE], ["tools/", SOURCE]]
    (workspace / "Makefile.local").write_text("all:\n\tcurl-free, but changed\n")
    (workspace / "tools" / "new.py").write_text("import os\n")
    assert finish("w1") == [("X07", "Makefile.local"), ("X07", "tools/new.py")]
    store = FindingStore()
    try:
        flagged = store.get([s.id for s in store.findings(str(workspace))])
    finally:
        store.close()
    assert flagged[0].finding.evidence == f"modified; watched by {SOURCE}'s [audit] watch"
    assert flagged[0].state is not None and flagged[0].state.before == b"all:\n\ttrue\n"  # restore puts it back


def test_a_state_saved_without_a_watch_list_is_read_as_having_none(workspace: Path) -> None:
    exit_audit.start("w2", [exit_audit.Mount("workspace", workspace, WATCH)])
    path = sessions_dir() / "w2" / "audit" / "state.json"
    saved = json.loads(path.read_text())
    for mount in saved["mounts"]:
        del mount["watch"]  # as a dejima before the watch list wrote it
    path.write_text(json.dumps(saved))
    (workspace / "Makefile.local").write_text("changed\n")
    assert finish("w2") == []  # audited (no X00), without the watch


def session(workspace: Path, session_id: str, watch: tuple[Watch, ...]) -> exit_audit.MountState:
    """A session that changes nothing: its start state, kept for the next start by its end."""
    states = exit_audit.start(session_id, [exit_audit.Mount("workspace", workspace, watch)])
    tick()
    exit_audit.finish(session_id, UI(plain_console(io.StringIO())), states=states)
    return states[0]


def test_a_newly_watched_files_start_bytes_are_kept_where_the_last_audit_is_trusted(workspace: Path) -> None:
    tick()
    assert "Makefile.local" not in session(workspace, "w3", ()).kept
    incremental = exit_audit.capture(exit_audit.Mount("workspace", workspace, WATCH))
    full = exit_audit.capture(exit_audit.Mount("workspace", workspace, WATCH), incremental=False)
    assert incremental.kept == full.kept
    assert (incremental.kept["Makefile.local"], incremental.kept["tools/gen.sh"]) == (b"all:\n\ttrue\n", b"echo gen\n")
    session(workspace, "w4", WATCH)
    again = exit_audit.capture(exit_audit.Mount("workspace", workspace, WATCH))
    assert again.start is not None and again.start.base != Path()  # the same list: the last state trusted
    assert again.kept == full.kept


def test_the_session_gives_its_manifests_watch_lists_to_the_workspace_mount_only() -> None:
    request = SessionRequest(session_id="abcd1234", scope="test", workspace=PurePosixPath("/home/alice/p"),
                             home_dir=PurePosixPath("/home/alice/.local/share/dejima/homes/p-1"), command=("true",),
                             launcher="boot:1:2")
    plan = build_session_plan(request, Settings(), Identity(1000, 1000, "alice"), "dejima/filter:x", "dejima/session:y")
    python = Manifest("workflows", "python", "/shipped/workflows/python.toml", "", audit_watch=("conftest.py",))
    mine = Manifest("harnesses", "mine", SOURCE, "", audit_watch=("./tools/",))
    plan = replace(plan, resolved=Resolved((Choice(mine, "--harness"), Choice(python, "detected: pyproject.toml"))))
    assert {(m.kind, m.watch) for m in audited_mounts(plan)} == {
        ("workspace", (Watch("tools/", SOURCE), Watch("conftest.py", "/shipped/workflows/python.toml"))),
        ("home", ())}
    assert {(m.kind, m.watch) for m in audited_mounts(replace(plan, resolved=None))} == {("workspace", ()),
                                                                                       ("home", ())}
