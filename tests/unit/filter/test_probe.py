"""The filter's readiness probe (dejima/filter/probe.py): ready only for the filter that is PID 1 now."""

from __future__ import annotations

from pathlib import Path

from dejima.filter.probe import NOT_READY, is_ready, main, ready_text, start_time


def test_a_marker_from_the_current_pid_1_is_ready(tmp_path: Path) -> None:
    marker = tmp_path / "ready"
    marker.write_text(f"started={start_time('1')}\n")
    assert is_ready(str(marker))
    assert main([str(marker)]) == 0


def test_a_marker_left_by_another_process_is_not(tmp_path: Path) -> None:
    """What an emptyDir keeps after the filter died: written by a process that is not PID 1 now."""
    marker = tmp_path / "ready"
    marker.write_text(ready_text())  # this process's start time; PID 1 started before it
    assert start_time() != start_time("1")
    assert not is_ready(str(marker))
    assert main([str(marker)]) == NOT_READY


def test_no_marker_or_no_argument_is_not_ready(tmp_path: Path) -> None:
    assert main([str(tmp_path / "absent")]) == NOT_READY
    assert main([]) == NOT_READY
    (tmp_path / "garbage").write_text("started=\n")
    assert main([str(tmp_path / "garbage")]) == NOT_READY
