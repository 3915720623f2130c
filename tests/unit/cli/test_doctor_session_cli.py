"""`dejima doctor --session` at the command line, without a session: its flags checked before anything runs (exit
2), an engine it cannot reach is dejima failing (125, not a failed check), and what a session's probe said is shown
as escaped text in the summary table."""

from __future__ import annotations

import io

import pytest

from dejima.cli.doctor_session import summary
from dejima.cli.launch import main
from dejima.errors import ExitStatus
from dejima.orchestration.session_doctor import SessionCheck
from dejima.ui.console import UI, plain_console

HOSTILE = "[bold]x[/] \x1b[2J\u202eowned\nforged row"


@pytest.fixture
def err(monkeypatch: pytest.MonkeyPatch) -> io.StringIO:
    buffer = io.StringIO()
    monkeypatch.setattr("dejima.cli._run.UI", lambda: UI(plain_console(buffer, width=1000)))
    return buffer


@pytest.mark.parametrize(("flags", "said"), [
    (["--refused-address", "example.com"], "--refused-address 'example.com' is not an IPv4 address"),
    (["--refused-address", "192.0.2.1:99999"], "the port is not a number from 1 to 65535"),
    (["--refused-address", "192.0.2.1:²"], "the port is not a number from 1 to 65535"),
    (["--foreign-resolver", "::1"], "--foreign-resolver '::1' is not an IPv4 address"),
    (["--resolve", "a..b"], "a name to resolve:"),
])
def test_bad_targets_are_usage_errors(err: io.StringIO, flags: list[str], said: str) -> None:
    assert main(["doctor", "--session", "abcd", *flags]) == ExitStatus.USAGE
    assert said in err.getvalue()


def test_an_engine_it_cannot_reach_is_dejima_failing(err: io.StringIO, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    assert main(["doctor", "--session", "abcd"]) == ExitStatus.DEJIMA_FAILED
    assert "cannot reach the Docker engine" in err.getvalue()


def test_the_summary_shows_session_text_as_data() -> None:
    buffer = io.StringIO()
    checks = [SessionCheck("refused name", "FAILED", HOSTILE), SessionCheck("IPv6 disabled", "holds", "ok")]
    plain_console(buffer, width=400).print(summary("ab12cd34", checks))
    shown = buffer.getvalue()
    assert "[bold]x[/] \\u001b[2J\\u202eowned\\u000aforged row" in shown
    assert "\x1b" not in shown and "\u202e" not in shown and "\nforged" not in shown
    assert "session ab12cd34" in shown and "FAILED" in shown
