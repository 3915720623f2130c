"""The prestart's bookkeeping without an engine (the engine's side: tests/integration/test_prestart.py)."""

from __future__ import annotations

import json
from pathlib import Path, PurePosixPath

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


def filter_body(session_id: str) -> dict[str, object]:
    """A request shaped as dejima's filter ones are (the shape test below checks the real one)."""
    run = host.state_dir() / "sessions" / session_id / "run"
    return {"Image": "dejima/filter:abc", "Labels": {"dejima.session": session_id},
            "HostConfig": {"Binds": [f"{run}:/run/dejima:rw"], "CapDrop": ["ALL"], "CapAdd": ["NET_ADMIN"],
                           "SecurityOpt": ["no-new-privileges:true"], "NetworkMode": "bridge"}}


def test_a_prestart_the_engine_refuses_is_not_adopted_and_raises_nothing(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    prestart.remember(tmp_path / "ws", "dejima-0badf00d-filter", filter_body("0badf00d"), "0badf00d", "boot:7:9")
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


def test_only_a_filter_shaped_request_is_prestarted(tmp_path: Path) -> None:
    """The request is created before the plan is compared with it: one that could do more than a
    filter (planted in the state directory) is never created. The control: dejima's own passes."""
    from dejima.adapters.runtime import create_body
    from dejima.core.plan import SessionRequest, build_session_plan
    from dejima.core.settings import Settings
    from tests.unit.core.test_plan import IDENTITY

    run = tmp_path / "sessions" / "0badf00d" / "run"
    request = SessionRequest("0badf00d", "t", PurePosixPath(tmp_path / "ws"), PurePosixPath("/h"), ("true",), "l",
                             run_dir=PurePosixPath(run))
    own = create_body(build_session_plan(request, Settings(), IDENTITY, "dejima/filter:abc", "dejima/session:x").filter)
    assert prestart.filter_shaped(own, run)
    planted = [
        {**own, "HostConfig": {**own["HostConfig"], "Privileged": True}},
        {**own, "HostConfig": {**own["HostConfig"], "Binds": [*own["HostConfig"]["Binds"], "/:/host:rw"]}},
        {**own, "HostConfig": {**own["HostConfig"], "CapAdd": ["SYS_ADMIN"]}},
        {**own, "HostConfig": {**own["HostConfig"], "NetworkMode": "host"}},
        {**own, "Image": "evil/image:1"},
        {**own, "Entrypoint": ["sh", "-c", "anything"]},
    ]
    for body in planted:
        assert not prestart.filter_shaped(body, run), body


def test_a_planted_request_starts_nothing(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    body = {**BODY, "HostConfig": {"Privileged": True}}
    prestart.remember(tmp_path / "ws", "dejima-0badf00d-filter", body, "0badf00d", "boot:7:9")
    assert prestart.begin(str(tmp_path / "ws")) is None
