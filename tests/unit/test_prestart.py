"""The prestart's bookkeeping without an engine (the engine's side: tests/integration/test_prestart.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dejima.adapters import host
from dejima.orchestration import prestart


@pytest.fixture(autouse=True)
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")  # nothing answers there
    return tmp_path


BODY = {"Image": "dejima/filter:abc", "Labels": {"dejima.session": "0badf00d", "dejima.launcher": "boot:7:9"},
        "HostConfig": {"Binds": ["/state/sessions/0badf00d/run:/run/dejima:rw"]}}


def test_the_remembered_request_marks_what_is_per_session(tmp_path: Path) -> None:
    prestart.remember(tmp_path / "ws", "dejima-0badf00d-filter", BODY, "0badf00d", "boot:7:9")
    [path] = (host.state_dir() / prestart.REMEMBERED).iterdir()
    text = path.read_text()
    assert "0badf00d" not in text and "boot:7:9" not in text
    entry = json.loads(text)
    assert entry["name"] == "dejima-{dejima-session}-filter"
    assert entry["body"]["HostConfig"]["Binds"] == ["/state/sessions/{dejima-session}/run:/run/dejima:rw"]
    assert oct(path.stat().st_mode & 0o777) == oct(0o600)


def test_no_remembered_request_or_an_unreadable_one_is_no_prestart(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    assert prestart.begin(str(tmp_path / "ws")) is None
    prestart.remember(tmp_path / "ws", "n", BODY, "0badf00d", "boot:7:9")
    [path] = (host.state_dir() / prestart.REMEMBERED).iterdir()
    path.write_text("{not json")
    assert prestart.begin(str(tmp_path / "ws")) is None


def test_a_prestart_the_engine_refuses_is_not_adopted_and_raises_nothing(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    prestart.remember(tmp_path / "ws", "dejima-0badf00d-filter", BODY, "0badf00d", "boot:7:9")
    prestarted = prestart.begin(str(tmp_path / "ws"))
    assert prestarted is not None and prestarted.session_id != "0badf00d"
    # its own session directory, with the run directory and the configuration FIFO the filter reads
    assert (host.state_dir() / "sessions" / prestarted.session_id / "run" / "config").is_fifo()
    assert prestarted.adopt(prestarted.name, {}) is None  # no engine: not created, so the usual path goes on
    prestarted.discard()


def test_management_command_names_are_the_management_commands() -> None:
    from dejima.cli.launch import MANAGEMENT_COMMANDS
    from dejima.cli.manage import COMMANDS

    assert set(COMMANDS) == MANAGEMENT_COMMANDS
