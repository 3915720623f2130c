"""The start gate with the host's /bin/sh and a real FIFO: the command runs only once the launcher
writes the word; end of file or another word, and it never runs (core/plan.py GATE_SCRIPT)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from dejima.adapters.fifo import Gate, make_gate
from dejima.core.plan import GATE_ENTRYPOINT, GATE_NOT_RELEASED


def gated(fifo: Path, *command: str) -> subprocess.Popen[str]:
    """The session's entrypoint, with the gate's path pointed at ``fifo`` instead of its mount."""
    *script, _mounted = GATE_ENTRYPOINT
    return subprocess.Popen([*script, str(fifo), *command], stderr=subprocess.PIPE, text=True)


def ended(process: subprocess.Popen[str]) -> tuple[int, str]:
    _, errors = process.communicate(timeout=10)
    return process.returncode, errors


def test_the_command_runs_once_released_and_its_status_is_the_sessions(tmp_path: Path) -> None:
    fifo = make_gate(tmp_path / "gate")
    gate = Gate(str(fifo))
    marker = tmp_path / "ran"
    process = gated(fifo, "sh", "-c", f"touch {marker}; exit 7")
    gate.release()
    assert ended(process)[0] == 7
    assert marker.exists()
    gate.close()
    assert not (tmp_path / "gate").exists()


def test_a_launcher_that_goes_away_before_releasing_runs_nothing(tmp_path: Path) -> None:
    fifo = make_gate(tmp_path / "gate")
    gate = Gate(str(fifo))
    marker = tmp_path / "ran"
    process = gated(fifo, "touch", str(marker))
    gate.close()  # as the kernel does when the launcher dies: the reader sees end of file
    status, errors = ended(process)
    assert status == GATE_NOT_RELEASED and "[session-not-released]" in errors
    assert not marker.exists()


def test_another_word_runs_nothing(tmp_path: Path) -> None:
    fifo = make_gate(tmp_path / "gate")
    marker = tmp_path / "ran"
    writer = os.open(fifo, os.O_RDWR)
    try:
        process = gated(fifo, "touch", str(marker))
        os.write(writer, b"gone\n")
        assert ended(process)[0] == GATE_NOT_RELEASED
    finally:
        os.close(writer)
    assert not marker.exists()


def test_a_missing_command_is_named(tmp_path: Path) -> None:
    fifo = make_gate(tmp_path / "gate")
    gate = Gate(str(fifo))
    process = gated(fifo, "no-such-command-here")
    gate.release()
    status, errors = ended(process)
    assert status == 127 and "[command-not-found]: the command no-such-command-here was not found" in errors
    gate.close()


def test_the_fifo_is_readable_by_the_session_and_writable_only_by_the_launcher(tmp_path: Path) -> None:
    old = os.umask(0o077)
    try:
        fifo = make_gate(tmp_path / "gate")
    finally:
        os.umask(old)
    assert oct(fifo.stat().st_mode & 0o777) == oct(0o644)
    assert oct(fifo.parent.stat().st_mode & 0o777) == oct(0o755)
