"""Text a session chose (DNS names, paths, labels, reasons) reaches the terminal as escaped plain
text through every command that prints it: never rich markup, never terminal control, never a
line of its own, and never so long that it pushes the rest off the screen."""

from __future__ import annotations

import io
import json
from collections.abc import Mapping
from pathlib import Path

import pytest

from dejima.adapters.runtime import ContainerInfo
from dejima.adapters.session_dirs import ViolationStore, sessions_dir
from dejima.cli.launch import main
from dejima.core import labels
from dejima.errors import ExitStatus, SessionError
from dejima.filter import VIOLATION
from dejima.ui.console import UI, plain_console
from dejima.ui.text import LIMIT, escaped

# What a hostile agent would put in a name it queries: markup that crashes or hides, ANSI escapes
# that clear the screen or recolour, a bidi override that reorders, line breaks that forge a row.
HOSTILE = "payload[link=x].exfil[/].\x1b[2J\x1b[31mred\u202etxt.exe\nreviewed: yes\r\u200bz"
SHOWN = "payload[link=x].exfil[/].\\u001b[2J\\u001b[31mred\\u202etxt.exe\\u000areviewed: yes\\u000d\\u200bz"
RAW = ("\x1b", "\u202e", "\u200b", "\r", "\nreviewed")


@pytest.fixture
def err(monkeypatch: pytest.MonkeyPatch) -> io.StringIO:
    buffer = io.StringIO()
    monkeypatch.setattr("dejima.cli._run.UI", lambda: UI(plain_console(buffer, width=1000)))
    return buffer


def assert_clean(text: str) -> None:
    for raw in RAW:
        assert raw not in text, (raw, text)


def write_violations(session: str, *records: Mapping[str, object]) -> None:
    store = ViolationStore(session)
    for record in records:
        assert store.append_line(VIOLATION + json.dumps(record))


def test_the_helper_escapes_and_caps() -> None:
    assert escaped(HOSTILE) == SHOWN
    assert escaped("caf\u00e9 \u6f22 \U0001f600") == "caf\u00e9 \u6f22 \U0001f600"  # ordinary text stays
    assert escaped("\udcff\U000e0041") == "\\xff\\U000e0041"  # undecodable byte; a tag character
    assert escaped("a" * 1000) == "a" * LIMIT + f"…[{1000 - LIMIT} more]"
    assert escaped("\x1b" * 10, limit=13) == "\\u001b\\u001b…[8 more]"  # never cut inside an escape


def test_violations_table_shows_what_was_sent(err: io.StringIO, capsys: pytest.CaptureFixture[str]) -> None:
    write_violations("s1", {"time": 0, "kind": "dns", "domain": HOSTILE, "qtype": "A", "reason": HOSTILE},
                     {"time": "x", "kind": "connection", "address": "10.0.0.9", "port": 443, "domain": "[/]",
                      "reason": "not allowed"})
    assert main(["violations", "s1"]) == ExitStatus.SUCCESS
    output = capsys.readouterr().out  # a table is the command's answer: stdout
    assert_clean(output)
    assert err.getvalue() == ""
    rows = [line for line in output.splitlines() if line.startswith("│")]
    assert len(rows) == 2  # no record made a line of its own
    first = [cell.strip() for cell in rows[0].split("│")[1:-1]]
    assert first[1:] == ["dns", SHOWN, SHOWN]
    second = [cell.strip() for cell in rows[1].split("│")[1:-1]]
    assert second == ["?", "connection", "[/] -> 10.0.0.9:443", "not allowed"]


def test_violations_json_is_one_object_per_line(err: io.StringIO, capsys: pytest.CaptureFixture[str]) -> None:
    records = [{"kind": "dns", "domain": HOSTILE}, {"kind": "dns", "domain": "[link=x]"}]
    write_violations("s2", *records)
    assert main(["violations", "s2", "--json"]) == ExitStatus.SUCCESS
    lines = capsys.readouterr().out.splitlines()
    assert [json.loads(line) for line in lines] == records
    assert_clean("".join(lines))
    assert main(["violations", "--json"]) == ExitStatus.SUCCESS
    assert capsys.readouterr().out.splitlines() == ['{"session": "s2"}']


def test_session_list_escapes_a_stray_directory_name(err: io.StringIO, capsys: pytest.CaptureFixture[str]) -> None:
    write_violations(HOSTILE.replace("/", "_"), {"kind": "dns", "domain": "x"})
    assert main(["violations"]) == ExitStatus.SUCCESS
    assert capsys.readouterr().out == SHOWN.replace("/", "_") + "\n"


class Labelled:
    """A container engine that holds one session pair whose labels the session's owner chose."""

    def __init__(self, scope: str) -> None:
        self.labels = {labels.SCOPE: scope, labels.SESSION: HOSTILE, labels.WORKSPACE: HOSTILE,
                       labels.LAUNCHER: "gone:1:1"}

    def containers(self, label_filter: dict[str, str]) -> list[ContainerInfo]:
        return [ContainerInfo(f"{role}0123456789abcdef", role, "running", {**self.labels, labels.ROLE: role}, "")
                for role in (labels.ROLE_FILTER, labels.ROLE_SESSION)]


def test_sessions_table_and_json(err: io.StringIO, capsys: pytest.CaptureFixture[str],
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from dejima.adapters import host

    monkeypatch.setattr("dejima.adapters.runtime.connect", lambda: Labelled(host.scope()))
    assert main(["sessions"]) == ExitStatus.SUCCESS
    output = capsys.readouterr().out
    assert_clean(output)
    assert err.getvalue() == ""
    (row,) = [line for line in output.splitlines() if "│" in line and "stale" in line]
    assert [cell.strip() for cell in row.split("│")[1:-1]] == [
        SHOWN, "stale", SHOWN, "1", "filter012345, session01234"]
    assert main(["sessions", "--json"]) == ExitStatus.SUCCESS
    (line,) = capsys.readouterr().out.splitlines()
    assert json.loads(line)["workspace"] == HOSTILE


def test_launcher_messages_cards_and_errors_are_escaped() -> None:
    buffer = io.StringIO()
    ui = UI(plain_console(buffer, width=1000))
    ui.info(f"removed leftover session {HOSTILE}")
    ui.warn(f"session {HOSTILE}: 1 name(s) refused")
    ui.card(f"card {HOSTILE}", [f"workspace {HOSTILE}"])
    ui.error(SessionError(f"no {HOSTILE}", context=f"tab\there {HOSTILE}", hint=HOSTILE))
    output = buffer.getvalue()
    assert_clean(output)
    lines = output.splitlines()
    assert lines[0] == f"dejima: removed leftover session {SHOWN}"
    assert lines[1] == f"dejima: warning: session {SHOWN}: 1 name(s) refused"
    assert SHOWN in lines[2] and lines[3] == f"│ workspace {SHOWN} │"
    # Context is several lines on purpose; each stays inside the error's frame.
    assert lines[5:] == [f"dejima: error [session-failed]: no {SHOWN}",
                         "  │ tab here payload[link=x].exfil[/].\\u001b[2J\\u001b[31mred\\u202etxt.exe",
                         "  │ reviewed: yes", "  │ \\u200bz", f"  hint: {SHOWN}"]


def test_the_audit_recovery_message_escapes_a_session_name(err: io.StringIO) -> None:
    from dejima.orchestration import exit_audit

    name = HOSTILE.replace("/", "_")
    (sessions_dir() / name / "audit").mkdir(parents=True)
    buffer = io.StringIO()
    exit_audit.recover(UI(plain_console(buffer, width=1000)))
    assert_clean(buffer.getvalue())
    assert SHOWN.replace("/", "_") in buffer.getvalue()


def test_an_unexpected_exception_is_a_short_bug_report(err: io.StringIO, capsys: pytest.CaptureFixture[str],
                                                       monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def broken(session_id: str) -> list[dict[str, object]]:
        raise KeyError(HOSTILE)

    monkeypatch.setattr("dejima.adapters.session_dirs.read", broken)
    monkeypatch.delenv("DEJIMA_DEBUG", raising=False)
    assert main(["violations", "s3"]) == ExitStatus.DEJIMA_FAILED
    output = err.getvalue() + capsys.readouterr().err
    assert output.startswith("dejima: error [internal-error]: this is a bug in dejima, please report it: KeyError: ")
    assert "Traceback" not in output
    assert "DEJIMA_DEBUG=1" in output
    assert_clean(output)
    monkeypatch.setenv("DEJIMA_DEBUG", "1")
    assert main(["violations", "s3"]) == ExitStatus.DEJIMA_FAILED
    assert "Traceback (most recent call last)" in capsys.readouterr().err
