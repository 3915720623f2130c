"""`dejima-allow` choosing its session: two sessions run in one workspace; on a terminal it asks,
without one it refuses to guess. Real state directories, real unix sockets answering as a filter
would, the real CLI (in a pseudo-terminal for the asking case)."""

from __future__ import annotations

import json
import os
import pty
import select
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from dejima.adapters import host
from dejima.adapters.session_dirs import sessions_dir


def fake_filter(path: Path, seen: list[str], name: str) -> socket.socket:
    """A control socket that answers `list` the way a filter does, noting who was asked."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(4)

    def serve() -> None:
        while True:
            try:
                client, _ = server.accept()
            except OSError:
                return
            with client:
                client.recv(65536)
                seen.append(name)
                client.sendall(json.dumps({"ok": True, "grants": [], "denials": []}).encode() + b"\n")

    threading.Thread(target=serve, daemon=True).start()
    return server


@pytest.fixture
def two_sessions(tmp_path: Path) -> tuple[Path, list[str], dict[str, str]]:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    seen: list[str] = []
    servers = []
    for session_id in ("aaaa1111", "bbbb2222"):
        directory = sessions_dir() / session_id
        (directory / "run").mkdir(parents=True)
        host.claim(directory, host.launcher_token())  # this test process: a live launcher
        host.record(directory, "workspace", str(workspace))
        servers.append(fake_filter(directory / "run" / "control.sock", seen, session_id))
    env = {k: v for k, v in os.environ.items()}
    return workspace, seen, env


def test_without_a_terminal_it_refuses_to_guess(two_sessions: tuple[Path, list[str], dict[str, str]]) -> None:
    workspace, seen, env = two_sessions
    result = subprocess.run([sys.executable, "-c", "from dejima.cli.allow import main; raise SystemExit(main())",
                             "--list"], cwd=workspace, env=env, capture_output=True, text=True, timeout=30,
                            stdin=subprocess.DEVNULL)
    assert result.returncode == 2
    assert "several sessions run here" in result.stderr and "aaaa1111" in result.stderr and "bbbb2222" in result.stderr
    assert seen == []


def test_on_a_terminal_it_asks_and_uses_the_answer(two_sessions: tuple[Path, list[str], dict[str, str]]) -> None:
    workspace, seen, env = two_sessions
    pid, fd = pty.fork()
    if pid == 0:  # the child: the real CLI on a terminal
        os.chdir(workspace)
        os.execve(sys.executable, [sys.executable, "-c",
                                   "from dejima.cli.allow import main; raise SystemExit(main())", "--list"], env)
    output = b""
    deadline = time.monotonic() + 30
    answered = False
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            break
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            break
        if not chunk:
            break
        output += chunk
        if not answered and b"which one (number)?" in output:
            os.write(fd, b"2\n")
            answered = True
    _, status = os.waitpid(pid, 0)
    assert answered, output.decode(errors="replace")
    assert os.waitstatus_to_exitcode(status) == 0, output.decode(errors="replace")
    assert seen == ["bbbb2222"]


def run_allow(workspace: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", "from dejima.cli.allow import main; raise SystemExit(main())", *args],
                          cwd=workspace, capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)


def one_session(tmp_path: Path, session_id: str) -> tuple[Path, Path]:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    directory = sessions_dir() / session_id
    (directory / "run").mkdir(parents=True)
    host.claim(directory, host.launcher_token())  # this test process: a live launcher
    host.record(directory, "workspace", str(workspace))
    return workspace, directory / "run" / "control.sock"


def test_a_session_whose_filter_is_gone_has_ended_exit_4(tmp_path: Path) -> None:
    workspace, control = one_session(tmp_path, "cccc3333")
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(control))  # its file stays; nothing listens on it any more, as after the filter died
    stale.close()
    result = run_allow(workspace, "crates.io")
    assert result.returncode == 4, result.stderr
    assert "session cccc3333 has ended (its filter is gone): nothing was changed in it" in result.stderr
    assert "[session-ended]" in result.stderr


def test_a_filter_that_goes_away_mid_exchange_means_the_session_ended(tmp_path: Path) -> None:
    workspace, control = one_session(tmp_path, "dddd4444")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(control))
    server.listen(1)

    def hang_up() -> None:
        client, _ = server.accept()
        client.recv(65536)
        client.close()  # as the filter does when its container is removed mid-answer

    thread = threading.Thread(target=hang_up, daemon=True)
    thread.start()
    result = run_allow(workspace, "crates.io")
    thread.join(10)
    server.close()
    assert result.returncode == 4 and "has ended" in result.stderr, result.stderr


def test_help_lists_every_exit_status() -> None:
    from dejima.cli.allow import DESCRIPTION
    from dejima.errors import ExitStatus, SessionEnded

    assert SessionEnded("x").exit_code == ExitStatus.SESSION_ENDED
    for status in (ExitStatus.SUCCESS, ExitStatus.FAILURE, ExitStatus.USAGE, ExitStatus.SESSION_ENDED,
                   ExitStatus.DEJIMA_FAILED):
        assert f"\n  {status} " in DESCRIPTION
