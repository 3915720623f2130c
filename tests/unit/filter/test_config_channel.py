"""The filter's configuration through its FIFO: the launcher's side (orchestration/session.py) and
the filter's (filter/__main__.py) on a real FIFO."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from dejima.adapters.fifo import make_run_dir
from dejima.filter import FAILED
from dejima.filter.__main__ import CONFIG_ENV, CONFIG_FIFO_ENV, _config_line, _read_config
from dejima.orchestration.executor import _send_configuration


@pytest.fixture
def fifo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = make_run_dir(tmp_path / "run")
    monkeypatch.delenv(CONFIG_ENV, raising=False)
    monkeypatch.setenv(CONFIG_FIFO_ENV, str(path))
    return path


def test_a_configuration_past_the_pipes_size_arrives_whole(fifo: Path) -> None:
    configuration = json.dumps({"ruleset": "x" * 200_000, "note": "line\nbreaks are escaped"})
    channel = _send_configuration(str(fifo), configuration)
    try:
        assert _read_config() == configuration + "\n"
    finally:
        channel.close()


def test_a_launcher_gone_before_sending_starts_nothing(fifo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    launcher = os.open(fifo, os.O_RDWR)
    with open(fifo, "rb") as filter_end:
        os.write(launcher, b'{"half": ')
        os.close(launcher)  # the launcher died: its end closed with half a line sent
        with pytest.raises(SystemExit) as exited:
            _config_line(filter_end)
    assert exited.value.code == 3
    assert capsys.readouterr().out.startswith(f"{FAILED} the launcher went away before sending the configuration")
