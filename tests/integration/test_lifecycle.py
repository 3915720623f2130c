"""A session pair starts, runs, propagates status and signals, and leaves nothing behind."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from dejima.adapters.runtime import Runtime
from dejima.core import labels
from tests.world import User, containers_of, run_dejima, spawn_dejima, wait_for_line


def assert_no_leftovers(runtime: Runtime, scope: str) -> None:
    assert containers_of(runtime, scope, role=labels.ROLE_FILTER) == []
    assert containers_of(runtime, scope, role=labels.ROLE_SESSION) == []
    assert runtime.networks({labels.SCOPE: scope}) == []
    assert runtime.volumes({labels.SCOPE: scope}) == []


@pytest.mark.parametrize(("command", "status"), [
    (["true"], 0),
    (["sh", "-c", "exit 7"], 7),
    (["sh", "-c", "kill -TERM $$"], 128 + signal.SIGTERM),
    (["sh", "-c", "kill -KILL $$"], 128 + signal.SIGKILL),
])
def test_exit_status_is_the_commands(runtime: Runtime, images: object, user: User, scope: str,
                                     workspace: Path, command: list[str], status: int) -> None:
    result = run_dejima(user, scope, "-q", str(workspace), "--", *command)
    assert result.returncode == status, result.stderr
    assert_no_leftovers(runtime, scope)


def test_output_streams_stay_apart(runtime: Runtime, images: object, user: User, scope: str, workspace: Path) -> None:
    result = run_dejima(user, scope, "-q", str(workspace), "--", "sh", "-c", "echo to-out; echo to-err >&2")
    assert result.returncode == 0
    assert result.stdout == "to-out\n"
    assert "to-err\n" in result.stderr and "to-out" not in result.stderr


def test_missing_command_exits_127_with_a_message(runtime: Runtime, images: object, user: User, scope: str,
                                                  workspace: Path) -> None:
    result = run_dejima(user, scope, "-q", str(workspace), "--", "no-such-program-xyz")
    assert result.returncode == 127
    assert "command-not-found" in result.stderr and "no-such-program-xyz" in result.stderr
    assert_no_leftovers(runtime, scope)


def test_boundary_line_is_shown_before_the_command(runtime: Runtime, images: object, user: User, scope: str,
                                                   workspace: Path) -> None:
    result = run_dejima(user, scope, str(workspace), "--", "true")
    assert "network: no egress (nftables default-deny, verified; DNS only through dejima; no IPv6)" in result.stderr


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_signal_to_launcher_tears_down(runtime: Runtime, images: object, user: User, scope: str,
                                       workspace: Path, signum: int) -> None:
    with spawn_dejima(user, scope, "-q", str(workspace), "--", "sh", "-c", "echo started; exec sleep 300") as proc:
        wait_for_line(proc.stdout, "started")
        assert len(containers_of(runtime, scope)) == 2
        proc.send_signal(signum)
        assert proc.wait(timeout=60) == 128 + signum
    assert_no_leftovers(runtime, scope)


def test_command_that_traps_the_signal_gets_to_finish(runtime: Runtime, images: object, user: User,
                                                      scope: str, workspace: Path) -> None:
    script = "trap 'echo cleaned-up; exit 0' TERM; echo started; while :; do sleep 0.1; done"
    with spawn_dejima(user, scope, "-q", str(workspace), "--", "bash", "-c", script) as proc:
        wait_for_line(proc.stdout, "started")
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    assert "cleaned-up" in out
    assert proc.returncode == 128 + signal.SIGTERM
    assert_no_leftovers(runtime, scope)


def test_sigkilled_launcher_leaves_a_stale_session_that_clean_removes(
        runtime: Runtime, images: object, user: User, scope: str, workspace: Path) -> None:
    with spawn_dejima(user, scope, "-q", str(workspace), "--", "sh", "-c", "echo started; exec sleep 300") as proc:
        wait_for_line(proc.stdout, "started")
        proc.kill()
        proc.wait(timeout=30)
    assert len(containers_of(runtime, scope)) == 2  # the crash left the pair behind
    listed = run_dejima(user, scope, "sessions", "--json")
    assert '"status": "stale"' in listed.stdout, listed.stdout + listed.stderr
    cleaned = run_dejima(user, scope, "clean")
    assert cleaned.returncode == 0, cleaned.stderr
    assert "removed leftover session" in cleaned.stdout  # what clean did: its answer
    assert_no_leftovers(runtime, scope)


def test_next_run_removes_what_a_crashed_launcher_left(runtime: Runtime, images: object, user: User,
                                                       scope: str, workspace: Path) -> None:
    with spawn_dejima(user, scope, "-q", str(workspace), "--", "sh", "-c", "echo started; exec sleep 300") as proc:
        wait_for_line(proc.stdout, "started")
        proc.kill()
        proc.wait(timeout=30)
    result = run_dejima(user, scope, str(workspace), "--", "true")
    assert result.returncode == 0
    assert "removed leftover session" in result.stderr
    assert_no_leftovers(runtime, scope)


def test_session_dies_with_its_filter_even_without_a_launcher(
        runtime: Runtime, images: object, user: User, scope: str, workspace: Path) -> None:
    with spawn_dejima(user, scope, "-q", str(workspace), "--", "sh", "-c", "echo started; exec sleep 300") as proc:
        wait_for_line(proc.stdout, "started")
        proc.kill()  # no launcher left to clean up: only the kernel can end the session now
        proc.wait(timeout=30)
    (filter_id,) = containers_of(runtime, scope, role=labels.ROLE_FILTER)
    (session_id,) = containers_of(runtime, scope, role=labels.ROLE_SESSION)
    runtime.kill(filter_id)
    assert runtime.wait(session_id, timeout=30) == 128 + signal.SIGKILL
    run_dejima(user, scope, "clean")
    assert_no_leftovers(runtime, scope)


def test_stop_command_ends_a_running_session(runtime: Runtime, images: object, user: User, scope: str,
                                             workspace: Path) -> None:
    with spawn_dejima(user, scope, "-q", str(workspace), "--", "sh", "-c", "echo started; exec sleep 300") as proc:
        wait_for_line(proc.stdout, "started")
        listed = run_dejima(user, scope, "sessions", "--json")
        assert '"status": "running"' in listed.stdout
        session_id = [c.labels[labels.SESSION] for c in runtime.containers({labels.SCOPE: scope})][0]
        stopped = run_dejima(user, scope, "stop", session_id)
        assert stopped.returncode == 0, stopped.stderr
        assert proc.wait(timeout=60) != 0
    assert_no_leftovers(runtime, scope)
