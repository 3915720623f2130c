"""The launcher as people use it from a shell: stdin through a pipe (as `docker run -i`), no terminal, a stop."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from dejima.adapters.image_builds import find_base
from dejima.adapters.runtime import Runtime
from dejima.core import labels
from dejima.core.settings import Settings
from dejima.errors import ExitStatus
from tests.integration.test_audit import PLANT_HOOK, git_repo, hooks_writable
from tests.integration.test_interactive import on_a_terminal, read_until
from tests.world import REPO, User, containers_of, run_dejima, spawn_dejima, wait_for_line


def run_with_input(user: User, scope: str, data: bytes, *args: str,
                   timeout: float = 180) -> subprocess.CompletedProcess[bytes]:
    """The real launcher with ``data`` on a pipe as its stdin, its output kept as bytes."""
    return subprocess.run(user.command(*args), input=data, capture_output=True, env=user.env(scope), cwd=str(REPO),
                          timeout=timeout, **user.popen_kwargs())


def state_entries(user: User) -> set[str]:
    """What the launcher keeps about sessions in the user's state directory."""
    sessions = user.home / ".local/state/dejima/sessions"
    return {p.name for p in sessions.iterdir()} if sessions.is_dir() else set()


def test_piped_stdin_reaches_the_command_with_its_end(runtime: Runtime, images: object, user: User, scope: str,
                                                      workspace: Path) -> None:
    result = run_with_input(user, scope, b"hello\n", "-q", str(workspace), "--", "cat")
    assert result.returncode == 0, result.stderr
    assert result.stdout == b"hello\n"  # and cat ended: it read end of file
    assert containers_of(runtime, scope) == []


def test_piped_stdin_is_binary_safe_and_large_input_does_not_deadlock(
        runtime: Runtime, images: object, user: User, scope: str, workspace: Path) -> None:
    # 16 MiB in while 16 MiB come out (more than any pipe or socket buffer holds): a launcher that wrote all
    # of its input before reading the output would wait for ever. Every byte value, NULs and CRLFs included.
    data = bytes(range(256)) * 4 + b"\r\n\x00\xff" + os.urandom(16 * 1024 * 1024)
    result = run_with_input(user, scope, data, "-q", str(workspace), "--", "cat")
    assert result.returncode == 0, result.stderr[-2000:]
    assert len(result.stdout) == len(data) and result.stdout == data
    counted = run_with_input(user, scope, data, "-q", str(workspace), "--", "wc", "-c")
    assert counted.stdout.split() == [str(len(data)).encode()]


def test_a_command_with_a_terminal_reads_end_of_file(runtime: Runtime, images: object, user: User, scope: str,
                                                     workspace: Path) -> None:
    # As `docker run` without -i: the terminal's keys stay with the shell; the command is not left waiting.
    with on_a_terminal(user, scope, "-q", str(workspace), "--", "sh", "-c", "cat; echo CAT-ENDED") as (process, master):
        read_until(master, b"CAT-ENDED")
        assert process.wait(timeout=60) == 0
    assert containers_of(runtime, scope) == []


def test_no_terminal_and_no_command_is_refused_before_anything_starts(
        runtime: Runtime, images: object, user: User, scope: str, workspace: Path) -> None:
    before = state_entries(user)
    result = subprocess.run(user.command(str(workspace)), stdin=subprocess.DEVNULL, capture_output=True, text=True,
                            env=user.env(scope), cwd=str(REPO), timeout=60, **user.popen_kwargs())
    assert result.returncode == 2, result.stderr
    assert "no terminal: give a command after --" in result.stderr
    assert "dejima: session " not in result.stderr  # no session line, no card: nothing was started
    assert containers_of(runtime, scope) == []
    assert state_entries(user) == before


def test_dejima_stop_ends_the_session_as_sigterm_and_its_launcher_says_so(
        runtime: Runtime, images: object, user: User, scope: str, workspace: Path) -> None:
    script = "trap 'echo got-sigterm; exit 0' TERM; echo started; while :; do sleep 0.1; done"
    with spawn_dejima(user, scope, "-q", str(workspace), "--", "bash", "-c", script) as proc:
        wait_for_line(proc.stdout, "started")
        (session_id,) = {c.labels[labels.SESSION] for c in runtime.containers({labels.SCOPE: scope})}
        stopped = run_dejima(user, scope, "stop", session_id)
        assert stopped.returncode == 0, stopped.stderr
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "got-sigterm" in out  # the command was asked, as by SIGTERM, and had its time
    assert f"session {session_id} stopped (dejima stop)" in err
    assert "error" not in err, err
    assert containers_of(runtime, scope) == []


def test_a_refused_start_says_so_before_any_session_line_and_leaves_nothing(
        runtime: Runtime, images: object, user: User, scope: str, workspace: Path, world_dir: Path) -> None:
    git_repo(workspace, user)
    planted = run_dejima(user, scope, "-q", str(workspace), "--", "sh", "-c", PLANT_HOOK,
                         DEJIMA_SETTINGS=hooks_writable(world_dir))
    assert planted.returncode == 0, planted.stderr
    before = state_entries(user)
    refused = run_dejima(user, scope, str(workspace), "--", "true")  # its filter prestarted: the last one's
    assert "error [unreviewed-findings]" in refused.stderr
    assert "dejima: session " not in refused.stderr  # no line says a session started
    assert containers_of(runtime, scope) == []
    assert state_entries(user) == before  # no state directory left for `dejima clean` to ignore
    assert refused.returncode == 122 == ExitStatus.UNREVIEWED_FINDINGS, refused.stderr
    accepted = run_dejima(user, scope, "-q", "--accept-findings", str(workspace), "--", "true")
    assert accepted.returncode == 0, accepted.stderr


def test_two_sessions_on_one_workspace_are_told_and_report_their_own_findings(
        runtime: Runtime, images: object, user: User, scope: str, workspace: Path, world_dir: Path) -> None:
    git_repo(workspace, user)
    first = subprocess.Popen(user.command(str(workspace), "--", "sh", "-c", "echo started; read line"),
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=user.env(scope), cwd=str(REPO), **user.popen_kwargs())
    try:
        wait_for_line(first.stdout, "started")
        (first_id,) = {c.labels[labels.SESSION] for c in runtime.containers({labels.SCOPE: scope})}
        second = run_dejima(user, scope, str(workspace), "--", "sh", "-c", PLANT_HOOK,
                            DEJIMA_SETTINGS=hooks_writable(world_dir))
        assert second.returncode == 0, second.stderr
        assert f"warning: session {first_id} is running on {workspace} too" in second.stderr
        assert ".git/hooks/pre-commit" in second.stderr  # the change is the second session's: its summary lists it
        assert f"session(s) {first_id} still run on {workspace}: a change listed here may be theirs" in second.stderr
        second_id = second.stderr.split("dejima: session ", 1)[1].split(":", 1)[0]
        _, first_err = first.communicate("go\n", timeout=120)  # its command reads a line, then ends
    finally:
        if first.poll() is None:
            first.kill()
        first.wait(timeout=60)
    assert first.returncode == 0, first_err
    assert ".git/hooks/pre-commit" not in first_err and "left 1 change" not in first_err
    assert f"reported by session(s) {second_id} on the same workspace" in first_err
    assert containers_of(runtime, scope) == []


def test_a_start_on_images_made_earlier_does_not_repeat_how_their_base_was_made(
        runtime: Runtime, images: object, user: User, scope: str, workspace: Path) -> None:
    base = find_base(runtime, Settings())
    if base is None or not base.bootstrapped:
        pytest.skip("this engine's base was pulled, not made with debootstrap: there is no such line to repeat")
    for _ in range(2):  # the images exist (built on that base): nothing is built, so nothing is said of it
        result = run_dejima(user, scope, str(workspace), "--", "true")
        assert result.returncode == 0, result.stderr
        assert "made with debootstrap" not in result.stderr


def test_a_base_that_cannot_be_pulled_is_said_once_and_never_done(
        runtime: Runtime, images: object, user: User, scope: str, workspace: Path, world_dir: Path) -> None:
    settings = world_dir / "unpullable-base.toml"
    # A registry on the engine's loopback where nothing listens: refused at once, no traffic leaves the host.
    settings.write_text('[images]\nbase = "127.0.0.1:9/dejima-test/no-such-base:1"\nbase_fallback = "none"\n')
    settings.chmod(0o644)
    result = run_dejima(user, scope, str(workspace), "--", "true", DEJIMA_SETTINGS=str(settings))
    assert result.returncode == ExitStatus.DEJIMA_FAILED, result.stderr
    assert "done in" not in result.stderr, result.stderr
    assert result.stderr.count("cannot be pulled") == 1, result.stderr
    assert containers_of(runtime, scope) == []


def test_dejima_stop_ends_an_interactive_session_too(runtime: Runtime, images: object, user: User, scope: str,
                                                    workspace: Path) -> None:
    with on_a_terminal(user, scope, str(workspace)) as (process, master):
        os.write(master, b"echo MARK-$((6*7))\r")
        read_until(master, b"MARK-42")
        (session_id,) = {c.labels[labels.SESSION] for c in runtime.containers({labels.SCOPE: scope})}
        assert run_dejima(user, scope, "stop", session_id).returncode == 0
        assert f"session {session_id} stopped (dejima stop)".encode() in read_until(master, b"(dejima stop)")
        assert process.wait(timeout=60) == 128 + signal.SIGTERM
    assert containers_of(runtime, scope) == []
