"""A first run's image builds: one progress line per image, every line of the engine's and apt's
output in a log file the message names, and a failure showing the log's last lines and its path."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from dejima.adapters.image_builds import LOGS_KEPT, logged_step
from dejima.errors import ImageError
from dejima.ui.console import UI, plain_console


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    return tmp_path / "dejima" / "logs"


def test_a_build_of_hundreds_of_lines_is_one_line_and_a_log(state: Path) -> None:
    out = io.StringIO()
    with logged_step(UI(plain_console(out)), "Building the session image s:1", "build-session") as line:
        for index in range(900):
            line(f"Get:{index} http://deb.debian.org/debian bookworm/main nodejs")
    shown = out.getvalue().splitlines()
    (log,) = state.glob("build-session-*.log")
    assert shown[0] == f"dejima: Building the session image s:1 (log: {log}) ..."
    assert len(shown) == 2 and shown[1].startswith("dejima: Building the session image s:1: done in ")
    assert len(log.read_text().splitlines()) == 900


def test_a_failed_build_shows_the_last_lines_and_names_the_log(state: Path) -> None:
    with pytest.raises(ImageError) as caught, \
            logged_step(UI(plain_console(io.StringIO())), "Building the filter image f:1", "build-filter") as line:
        for index in range(40):
            line(f"line {index}")
        raise ImageError("building the filter image failed: E: Unable to locate package nftabels", hint="retry")
    (log,) = state.glob("build-filter-*.log")
    assert caught.value.context is not None
    assert caught.value.context.splitlines() == [f"line {i}" for i in range(25, 40)]
    assert caught.value.hint == f"retry; the whole log: {log}"
    assert log.read_text().splitlines()[-1] == "line 39"


def test_old_logs_are_pruned(state: Path) -> None:
    for _ in range(LOGS_KEPT + 5):
        with logged_step(UI(quiet=True), "Building", "build-session") as line:
            line("x")
    assert len(list(state.glob("*.log"))) == LOGS_KEPT
