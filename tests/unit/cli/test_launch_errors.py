"""Bad input stops dejima before anything starts, with a message naming what to fix."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

from dejima.cli.launch import main
from dejima.errors import ExitStatus
from dejima.ui.console import UI, plain_console


@pytest.fixture
def captured(monkeypatch: pytest.MonkeyPatch) -> io.StringIO:
    """Route the launcher's console into a buffer; no Docker engine is touched by these tests."""
    buffer = io.StringIO()
    monkeypatch.setattr("dejima.cli._run.UI", lambda: UI(plain_console(buffer, width=200)))

    def no_engine(*_args: object, **_kw: object) -> None:
        raise AssertionError("the engine must not be contacted for bad input")

    monkeypatch.setattr("dejima.adapters.runtime.connect", no_engine)
    return buffer


def write_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, text: str) -> Path:
    path = tmp_path / "settings.toml"
    path.write_text(text)
    monkeypatch.setenv("DEJIMA_SETTINGS", str(path))
    return path


@pytest.mark.parametrize(("text", "expected"), [
    ("", ": the settings file is empty"),
    ("[images]\nbase = 1\n", ": 'images.base' must be a string, not int 1"),
    ("[session]\nnetwrok = \"x\"\n", ": 'session.netwrok' is not a known key"),
    ("not toml at all\n", ":1:5: not valid TOML"),
])
def test_bad_settings_refuse_to_start(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, captured: io.StringIO,
                                      text: str, expected: str) -> None:
    path = write_settings(monkeypatch, tmp_path, text)
    assert main([str(tmp_path), "--", "true"]) == ExitStatus.USAGE  # bad input, from a file as from a flag
    output = captured.getvalue()
    assert f"{path}{expected}" in output
    assert "hint:" in output


def test_unreadable_settings_file_is_an_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                              captured: io.StringIO) -> None:
    path = tmp_path / "settings.toml"
    path.mkdir()  # a directory cannot be read as a file, whoever runs the test
    monkeypatch.setenv("DEJIMA_SETTINGS", str(path))
    assert main([str(tmp_path), "--", "true"]) == ExitStatus.USAGE
    assert f"{path}: cannot read the settings file" in captured.getvalue()


def test_missing_settings_file_named_by_env_is_an_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                        captured: io.StringIO) -> None:
    monkeypatch.setenv("DEJIMA_SETTINGS", str(tmp_path / "nope.toml"))
    assert main([str(tmp_path), "--", "true"]) == ExitStatus.USAGE
    assert "does not exist" in captured.getvalue()


@pytest.mark.parametrize(("args", "expected"), [
    (["/definitely/not/here", "--", "true"], "workspace '/definitely/not/here' does not exist"),
    (["/", "--", "true"], "refusing to use / as a workspace"),
    (["WS", "--"], "nothing after '--'"),
    (["WS", "--harness", "no-such-agent", "--", "true"], "--harness no-such-agent: no such harness"),
    (["WS", "--workflow", "cobol", "--", "true"], "--workflow cobol: no such workflow"),
])
def test_bad_arguments_are_usage_errors(tmp_path: Path, captured: io.StringIO, args: list[str], expected: str) -> None:
    args = [str(tmp_path) if a == "WS" else a for a in args]
    assert main(args) == ExitStatus.USAGE
    assert expected in captured.getvalue()


def test_home_directory_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, captured: io.StringIO) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    assert main([str(tmp_path), "--", "true"]) == ExitStatus.USAGE
    assert "holds your whole home directory" in captured.getvalue()


@pytest.mark.parametrize("variable", ["XDG_CONFIG_HOME", "XDG_STATE_HOME", "XDG_DATA_HOME"])
def test_a_workspace_holding_dejimas_own_files_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                           captured: io.StringIO, variable: str) -> None:
    """A session writes its workspace: one holding the settings, the state (prestarted filters,
    image tags, acknowledged findings) or the data (homes) could change the next session."""
    workspace = tmp_path / "project"
    (workspace / "dejima").mkdir(parents=True)
    monkeypatch.setenv(variable, str(workspace))
    assert main([str(workspace), "--", "true"]) == ExitStatus.USAGE
    assert "overlaps dejima's own files" in captured.getvalue()
    monkeypatch.setenv(variable, str(tmp_path / "elsewhere"))  # the control: the same workspace, state elsewhere
    assert main([str(workspace), "--render", "--as-root", "--", "true"]) == ExitStatus.SUCCESS


def test_a_settings_file_inside_the_workspace_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                         captured: io.StringIO) -> None:
    write_settings(monkeypatch, tmp_path, "[session]\n")
    assert main([str(tmp_path), "--", "true"]) == ExitStatus.USAGE
    assert "overlaps dejima's own files" in captured.getvalue()


def test_help_explains_the_boundary_and_the_commands(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--help"])
    assert exited.value.code == 0
    text = capsys.readouterr().out
    for phrase in ("dejima PATH -- CMD ARGS...", "NO network egress", "dejima doctor", "dejima clean",
                   "128+N", "settings.toml"):
        assert phrase in text


def test_allow_and_audit_explain_themselves(capsys: pytest.CaptureFixture[str]) -> None:
    from dejima.cli import allow, audit

    with pytest.raises(SystemExit):
        allow.main(["--help"])
    text = capsys.readouterr().out
    assert "dejima-allow crates.io --revoke" in text and "--persist" in text and "deny list" in text
    with pytest.raises(SystemExit):
        audit.main(["--help"])
    text = capsys.readouterr().out
    assert "An acknowledgement covers that exact" in text and "dejima-audit ack ID" in text


def test_audit_output_escapes_control_and_bidi_characters() -> None:
    from dejima.ui.audit_views import safe

    assert safe("evil\u202ename\x1b[31m") == "evil\\u202ename\\u001b[31m"


def owned_by_a_user(path: Path) -> Path:
    """Run as root, dejima refuses a root-owned workspace without --as-root: give it to a user."""
    if os.getuid() == 0:
        os.chown(path, 4242, 4242)
    return path


def test_render_prints_the_plan_without_docker(tmp_path: Path, captured: io.StringIO,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(owned_by_a_user(tmp_path)), "--render", "--dns-upstream", "192.0.2.53", "--allow", "pypi.org",
                 "--allow", "*.pythonhosted.org:443"]) == ExitStatus.SUCCESS
    out = capsys.readouterr().out
    assert "allow  pypi.org" in out and "(from --allow)" in out
    assert "strict subdomains of, TCP port 443" in out
    assert "upstream resolvers (the filter's own marked sockets only): 192.0.2.53" in out
    assert "table inet dejima {" in out and "policy drop;" in out


def test_bad_allow_entry_is_a_usage_error(tmp_path: Path, captured: io.StringIO) -> None:
    assert main([str(tmp_path), "--allow", "*.com", "--render"]) == ExitStatus.USAGE
    assert "--allow is not a valid egress entry ('*.com'): a wildcard needs" in captured.getvalue()


@pytest.mark.parametrize(("flag", "value", "section", "key", "problem"), [
    ("--allow", "[2001:db8::1]:443", "network", "allow", "is an IPv6 entry ('[2001:db8::1]:443'), but sessions"),
    ("--allow-special", "*.com", "network", "allow_special", "is not a valid egress entry ('*.com')"),
    ("--dns-upstream", "127.0.0.53", "network", "upstream_dns", "is a loopback address (127.0.0.53)"),
    ("--dns-upstream", "dns.example", "network", "upstream_dns", "is not an IP address ('dns.example')"),
    ("--dns-upstream", "2001:db8::53", "network", "upstream_dns", "is an IPv6 resolver (2001:db8::53)"),
])
def test_a_flag_and_its_setting_are_refused_alike(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                  captured: io.StringIO, flag: str, value: str, section: str,
                                                  key: str, problem: str) -> None:
    """One front door: the flag and the settings key take the same kind, so the same value is
    refused with the same words (and exit 2), each naming where it was written."""
    workspace = owned_by_a_user(tmp_path)
    assert main([str(workspace), "--render", flag, value]) == ExitStatus.USAGE
    assert f"{flag} {problem}" in captured.getvalue()
    captured.truncate(0)
    path = write_settings(monkeypatch, tmp_path, f'[{section}]\n{key} = ["{value}"]\n')
    assert main([str(workspace), "--render"]) == ExitStatus.USAGE
    assert f"{path}: '{section}.{key}[0]' {problem}" in captured.getvalue()


def test_flags_are_checked_before_the_settings_are_read(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                         captured: io.StringIO) -> None:
    write_settings(monkeypatch, tmp_path, "not toml\n")
    assert main([str(tmp_path), "--render", "--allow", "*"]) == ExitStatus.USAGE
    assert "--allow is not a valid egress entry ('*')" in captured.getvalue()
    assert "not valid TOML" not in captured.getvalue()


def test_dejima_allow_checks_its_duration_and_entries_before_looking_for_a_session(
        monkeypatch: pytest.MonkeyPatch, captured: io.StringIO) -> None:
    from dejima.cli import allow

    def no_session(*_args: object) -> None:
        raise AssertionError("bad input must be refused before a session is looked for")

    monkeypatch.setattr(allow, "_pick_session", no_session)
    assert allow.main(["crates.io", "--for", "5x"]) == ExitStatus.USAGE
    assert "--for is not a duration ('5x')" in captured.getvalue()
    assert allow.main(["crates.io", "--for", "31d"]) == ExitStatus.USAGE
    assert "--for is out of range ('31d')" in captured.getvalue() and "from 1s to 30d" in captured.getvalue()
    assert allow.main(["10.0.0.0/8"]) == ExitStatus.USAGE
    assert "the entry is not grantable live ('10.0.0.0/8')" in captured.getvalue()
    assert allow.main(["*.com", "--revoke"]) == ExitStatus.USAGE
    assert "the entry is not a valid egress entry ('*.com')" in captured.getvalue()


AS_OWNER = ["--as-root"] if os.getuid() == 0 else []  # a root-owned tmp_path needs it when run as root


@pytest.mark.parametrize("entry", ["[2001:db8::1]", "[2001:db8::1]:443", "0.0.0.0/0", "*"])
def test_a_bad_allow_entry_exits_2_wherever_it_is_caught(tmp_path: Path, captured: io.StringIO, entry: str) -> None:
    """The bracketed IPv6 entry used to pass the flag check and fail later with 125."""
    assert main([str(tmp_path), "--render", *AS_OWNER, "--allow", entry]) == ExitStatus.USAGE
    assert entry in captured.getvalue() and "hint:" in captured.getvalue()


def test_a_bad_allow_entry_in_the_settings_exits_2_too(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                        captured: io.StringIO) -> None:
    path = write_settings(monkeypatch, tmp_path, '[network]\nallow = ["[2001:db8::1]"]\n')
    assert main([str(tmp_path), "--render", *AS_OWNER]) == ExitStatus.USAGE
    assert f"{path}: 'network.allow[0]' is an IPv6 entry" in captured.getvalue()  # said where it is read


BROKEN = 'schema = 1\ndescription = "x"\n[harness]\ncommand = ["x"]\napis = []\nextra = 1\n'


def broken_harness(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    path = tmp_path / "config" / "dejima" / "harnesses" / "mine.toml"
    path.parent.mkdir(parents=True)
    path.write_text(BROKEN)
    return path


def test_a_broken_manifest_the_session_does_not_use_is_one_warning(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                                  captured: io.StringIO) -> None:
    path = broken_harness(monkeypatch, tmp_path)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    owned_by_a_user(workspace)
    assert main([str(workspace), "--render", "--dns-upstream", "192.0.2.53"]) == ExitStatus.SUCCESS
    assert f"warning: {path} is broken and not used here" in captured.getvalue()
    captured.truncate(0)
    assert main([str(workspace), "--render", "--dns-upstream", "192.0.2.53", "--harness", "mine"]) == ExitStatus.USAGE
    output = captured.getvalue()
    assert f"{path}: 'harness.extra' is not a known key" in output
    assert "this session needs harnesses/mine (--harness mine)" in output


def test_manifests_list_and_check_show_the_broken_one(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                      captured: io.StringIO,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    import json

    path = broken_harness(monkeypatch, tmp_path)
    assert main(["manifests", "list", "--json"]) == ExitStatus.SUCCESS
    rows = {row["name"]: row for row in map(json.loads, capsys.readouterr().out.splitlines())}
    assert rows["mine"]["broken"].startswith(f"{path}: 'harness.extra' is not a known key")
    assert rows["shell"]["broken"] is None
    assert main(["manifests", "list"]) == ExitStatus.SUCCESS
    assert "BROKEN: " in capsys.readouterr().out and "1 broken manifest(s)" in captured.getvalue()
    assert main(["manifests", "check"]) == ExitStatus.USAGE
    checked = capsys.readouterr().out  # what check found is its answer: stdout
    assert "did you mean" in checked or "known keys in [harness]" in checked
    assert main(["manifests", "show", "harnesses/mine"]) == ExitStatus.USAGE  # its error, not the shipped one
    path.unlink()
    assert main(["manifests", "check"]) == ExitStatus.SUCCESS
    assert main(["manifests", "show", "harness/shell"]) == ExitStatus.USAGE
    assert "no kind 'harness'" in captured.getvalue()


def test_render_shows_what_the_harness_is_given_to_reach_its_backend(tmp_path: Path, captured: io.StringIO,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(owned_by_a_user(tmp_path)), "--render", "--dns-upstream", "192.0.2.53", "--harness",
                 "codex"]) == ExitStatus.SUCCESS
    out = capsys.readouterr().out
    assert "env  CODEX_API_KEY = {placeholder}" in out
    steps = out[out.index("## Start actions"):].splitlines()  # what a start applies, both parts, with their needs
    assert "preparation" in steps and "the container pair" in steps
    # the harness's settings merged into the home once it exists and the routes' files are written
    assert any(line.split()[:1] == ["harness-settings"] for line in steps)
    gate = steps.index(next(line for line in steps if line.split()[:1] == ["open-gate"]))
    assert steps[gate + 1].split()[0] == "after" and "filter-ready," in steps[gate + 1]
    assert ("file ~/.codex/config.toml: merged before the session: analytics.enabled, check_for_update_on_startup, "
            "feedback.enabled, openai_base_url, sandbox_mode") in out
