"""A session's state directory belongs to the launcher whose token it holds: recovery audits it
only once that launcher is gone, never because the session has no containers (yet)."""

from __future__ import annotations

import io
import os
import subprocess
from pathlib import Path

import pytest

from dejima.adapters import host
from dejima.adapters.findings import FindingStore
from dejima.adapters.session_dirs import sessions_dir
from dejima.orchestration import exit_audit
from dejima.ui.console import UI, plain_console


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    return root


def dead_token() -> str:
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    token = host.launcher_token(pid)
    os.waitpid(pid, 0)
    return token


def recover() -> str:
    buffer = io.StringIO()
    exit_audit.recover(UI(plain_console(buffer, width=200)))
    return buffer.getvalue()


def findings(workspace: Path) -> list[str]:
    store = FindingStore()
    try:
        return [s.finding.rule for s in store.findings(str(workspace))]
    finally:
        store.close()


def half_made(session_id: str, workspace: Path, token: str) -> Path:
    """A state directory as a launcher leaves it while its start snapshot is still being taken:
    no containers, no state.json yet."""
    directory = sessions_dir() / session_id
    with host.locked(sessions_dir()):
        host.claim(directory, token)
    (directory / "audit").mkdir()
    (directory / "audit" / "workspace").write_text(str(workspace))
    return directory


def test_a_live_launchers_half_made_state_is_left_alone(workspace: Path) -> None:
    directory = half_made("alive", workspace, host.launcher_token())
    assert recover() == ""
    assert (directory / "audit" / "workspace").read_text() == str(workspace)
    assert findings(workspace) == []


def test_a_dead_launchers_state_is_audited_once(workspace: Path) -> None:
    directory = half_made("dead", workspace, dead_token())
    assert "auditing session dead, whose launcher ended before it could" in recover()
    assert not (directory / "audit").exists()
    assert findings(workspace) == ["X00"]  # its start state was never finished: check by hand
    assert (directory / host.OWNER_FILE).read_text() == host.launcher_token()  # taken over first
    assert recover() == ""


def test_a_state_without_an_owner_is_an_orphan(workspace: Path) -> None:
    exit_audit.start("ownerless", [exit_audit.Mount("workspace", workspace)])
    assert "auditing session ownerless" in recover()
    assert findings(workspace) == []  # a complete start state, nothing changed: no finding


def test_two_recovering_launchers_never_take_the_same_orphan(workspace: Path) -> None:
    half_made("dead", workspace, dead_token())
    read, write = os.pipe()
    release_read, release_write = os.pipe()
    child = os.fork()
    if child == 0:  # a second launcher: takes what it can, then stays alive until released
        os.close(read)
        os.write(write, ",".join(exit_audit._take_orphans()).encode() + b"\n")
        os.read(release_read, 1)
        os._exit(0)
    try:
        os.close(write)
        assert os.read(read, 100) == b"dead\n"
        assert exit_audit._take_orphans() == []  # its new owner is alive
    finally:
        os.write(release_write, b"x")
        os.waitpid(child, 0)
    assert exit_audit._take_orphans() == ["dead"]  # and once that one is gone too, it is ours


def test_new_session_ids_are_owned_from_the_start() -> None:
    from dejima.adapters.session_dirs import new_session_id

    first, second = new_session_id(), new_session_id()
    assert first != second
    for session_id in (first, second):
        assert host.owner_alive(sessions_dir() / session_id)


def test_a_dead_sessions_empty_directory_is_removed_and_a_live_ones_kept() -> None:
    with host.locked(sessions_dir()):
        host.claim(sessions_dir() / "finished", dead_token())
        host.claim(sessions_dir() / "starting")
    (sessions_dir() / "recorded").mkdir()
    (sessions_dir() / "recorded" / "violations.jsonl").write_text("{}\n")
    assert recover() == ""
    assert sorted(p.name for p in sessions_dir().iterdir() if p.is_dir()) == ["recorded", "starting"]
