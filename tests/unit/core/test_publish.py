"""Published ports (core/publish.py): what `--publish` and `[session] publish` accept, what they refuse and
how, and what a publishing plan asks of the engine, the ruleset, the prestart, the card and the render."""

from __future__ import annotations

from pathlib import Path, PurePosixPath

import pytest

from dejima.core.kinds import PUBLISH
from dejima.core.plan import Identity, SessionPlan, SessionRequest, build_session_plan
from dejima.core.publish import Published, parse_published, published_ports
from dejima.core.schema import check_flag
from dejima.core.settings import SessionSettings, Settings, parse_settings
from dejima.errors import SettingsError, UsageError

IDENTITY = Identity(1000, 1000, "u")


def plan_with(publish: tuple[str, ...] = (), settings: Settings | None = None, **request: object) -> SessionPlan:
    base = SessionRequest("abcd1234", "t", PurePosixPath("/w/p"), PurePosixPath("/h"), ("true",), "b:1:2",
                          publish=publish, **request)  # type: ignore[arg-type]
    return build_session_plan(base, settings or Settings(), IDENTITY, "dejima/filter:abc", "dejima/session:x",
                              settings_source="settings.toml")


@pytest.mark.parametrize(("written", "expected"), [
    (3000, ("127.0.0.1", 3000, 3000)),
    ("3000", ("127.0.0.1", 3000, 3000)),
    ("8080:3000", ("127.0.0.1", 8080, 3000)),
    ("80:8080", ("127.0.0.1", 80, 8080)),  # a host port below 1024 is the engine's to bind
    ("0.0.0.0:3000:3000", ("0.0.0.0", 3000, 3000)),
    ("127.0.0.2:9000:3000", ("127.0.0.2", 9000, 3000)),
])
def test_the_forms_a_published_port_takes(written: int | str, expected: tuple[str, int, int]) -> None:
    port = parse_published(written)
    assert (port.host_address, port.host_port, port.session_port) == expected
    assert port.local_only == expected[0].startswith("127.")


@pytest.mark.parametrize(("written", "problem"), [
    ("0", "session port out of range (0)"),
    ("65536", "session port out of range (65536)"),
    ("0:3000", "host port out of range (0)"),
    ("70000:3000", "host port out of range (70000)"),
    ("http", "session port that is not a number ('http')"),
    ("3000:x", "session port that is not a number ('x')"),
    ("-1", "not a number"),
    ("localhost:3000:3000", "host address that is not an IP address ('localhost')"),
    ("::1:3000:3000", "is not a published port"),
    ("1:2:3:4", "is not a published port"),
    ("", "is not a published port"),
    ("80", "the session cannot listen below 1024"),
])
def test_a_bad_flag_value_names_the_flag_and_the_fix(written: str, problem: str) -> None:
    with pytest.raises(UsageError) as raised:
        check_flag(PUBLISH, written, "--publish")
    assert raised.value.message.startswith("--publish ") and problem in raised.value.message, raised.value.message
    assert raised.value.hint  # every refusal says how to write it


@pytest.mark.parametrize(("written", "problem"), [
    ("[0]", "out of range (0)"),
    ("[65536]", "out of range (65536)"),
    ("[\"abc\"]", "not a number"),
    ("[\"myhost:3000:3000\"]", "not an IP address"),
    ("[true]", "must be a port number or a string"),
    ("3000", "must be a list of published ports"),
])
def test_a_bad_settings_value_names_the_file_and_the_key(written: str, problem: str) -> None:
    with pytest.raises(SettingsError) as raised:
        parse_settings(f"[session]\npublish = {written}\n", "settings.toml")
    assert raised.value.message.startswith("settings.toml: 'session.publish") and problem in raised.value.message, \
        raised.value.message
    assert raised.value.hint


def test_the_settings_key_takes_numbers_and_strings() -> None:
    settings = parse_settings("[session]\npublish = [3000, \"8080:3001\"]\n", "settings.toml")
    assert settings.session.publish == (3000, "8080:3001")


def test_a_host_port_published_twice_is_refused_naming_both() -> None:
    with pytest.raises(UsageError, match=r"host port 3000 is published twice: 127\.0\.0\.1:3000:3000 \(settings\.toml "
                       r"session\.publish\) and 127\.0\.0\.1:3000:4000 \(--publish\)") as raised:
        published_ports((3000,), "settings.toml", ("3000:4000",))
    assert raised.value.reference == "port-published-twice"
    with pytest.raises(UsageError, match="published twice"):  # whatever address each names: they would clash
        published_ports((), "s", ("3000", "0.0.0.0:3000:3001"))
    with pytest.raises(UsageError) as raised:  # the same port twice: the hint says which one to leave out
        published_ports((3000,), "settings.toml", ("3000",))
    assert raised.value.hint == "leave one out: settings.toml session.publish publishes it already"
    # one session port on two host ports is fine
    assert [p.host_port for p in published_ports((), "s", ("8080:3000", "8081:3000"))] == [8080, 8081]


def test_the_flag_adds_to_the_settings() -> None:
    plan = plan_with(("8080:3001",), Settings(session=SessionSettings(publish=(3000,))))
    assert plan.filter.ports == (Published("127.0.0.1", 3000, 3000, "settings.toml session.publish"),
                                 Published("127.0.0.1", 8080, 3001, "--publish"))
    assert plan.session.ports == ()  # the session joins the filter's namespace: the binding is the filter's


def test_the_engine_binds_loopback_only_unless_an_address_is_said() -> None:
    from dejima.adapters.runtime import create_body

    body = create_body(plan_with(("3000", "8080:3001", "0.0.0.0:9000:3001")).filter)
    assert body["ExposedPorts"] == {"3000/tcp": {}, "3001/tcp": {}}
    assert body["HostConfig"]["PortBindings"] == {
        "3000/tcp": [{"HostIp": "127.0.0.1", "HostPort": "3000"}],
        "3001/tcp": [{"HostIp": "127.0.0.1", "HostPort": "8080"}, {"HostIp": "0.0.0.0", "HostPort": "9000"}]}
    unpublished = create_body(plan_with().filter)
    assert "ExposedPorts" not in unpublished and "PortBindings" not in unpublished["HostConfig"]


def test_a_publishing_filter_is_never_prestarted(tmp_path: Path) -> None:
    """The prestart creates a remembered filter before the plan exists; a publishing one would bind host
    ports the new start may not ask for, so it is not prestarted, and a prestarted filter (no binding)
    is never the one of a start that publishes: its create request differs (prestart.adopt compares them
    whole). Control: the same plan without the port is prestartable."""
    from dataclasses import replace

    from dejima.adapters.runtime import create_body
    from dejima.orchestration import prestart

    run = tmp_path / "run"
    plain = plan_with(run_dir=PurePosixPath(run))
    published = plan_with(("3000",), run_dir=PurePosixPath(run))
    assert prestart.filter_shaped(create_body(plain.filter), run)
    assert not prestart.filter_shaped(create_body(published.filter), run)
    assert prestart._request_text(plain.filter.name, create_body(plain.filter)) != prestart._request_text(
        published.filter.name, create_body(published.filter))
    assert create_body(replace(published.filter, ports=())) == create_body(plain.filter)


def test_the_ruleset_lets_in_new_tcp_to_the_published_session_ports_only() -> None:
    ruleset = plan_with(("8080:3000", "3001")).ruleset
    chain = ruleset[ruleset.index("\tchain input {"):ruleset.index("\tchain forward {")]
    rules = [line.strip() for line in chain.splitlines()[1:] if line.strip() and not line.strip().startswith("#")]
    assert rules == ["type filter hook input priority filter; policy drop;", 'iif "lo" accept',
                     "ct state established,related accept", "tcp dport { 3000, 3001 } ct state new accept", "}"]
    assert "8080" not in ruleset  # the host's port is the engine's business
    assert plan_with(("3000",)).ruleset.count("tcp dport 3000 ct state new accept") == 1
    # the output chain (egress) is the same with or without published ports
    def output(text: str) -> str:
        return text[text.index("\tchain output {"):text.index("\tchain input {")]
    assert output(ruleset) == output(plan_with().ruleset)
    assert "dport" not in plan_with().ruleset[plan_with().ruleset.index("\tchain input {"):]


def test_the_card_the_render_and_the_summary_line_name_each_published_port() -> None:
    from dejima.orchestration.start import boundary_line
    from dejima.ui.views import boundary_card, format_plan

    plan = plan_with(("8080:3000",))
    card = boundary_card(plan)
    assert ("inbound     host 127.0.0.1:8080 -> session port 3000 (this machine only; from --publish)") in card
    assert ("            no other port of the session is reachable from outside; a server there listens on 0.0.0.0 "
            "(its 127.0.0.1 is the session's own)") in card
    assert not any("WARNING" in line for line in card)
    assert "  publishes host 127.0.0.1:8080 -> session port 3000 (this machine only; from --publish)" in \
        format_plan(plan).splitlines()
    assert "| inbound: host 127.0.0.1:8080 -> session port 3000 |" in boundary_line(plan)
    wide = boundary_card(plan_with(("0.0.0.0:3000:3000",)))
    assert "inbound     host 0.0.0.0:3000 -> session port 3000 (WARNING: other machines too; from --publish)" in wide
    assert "(WARNING: other machines too)" in boundary_line(plan_with(("0.0.0.0:3000:3000",)))
    assert not any(line.startswith("inbound") for line in boundary_card(plan_with()))
    assert "publishes" not in format_plan(plan_with()) and "inbound" not in boundary_line(plan_with())


def test_the_engines_bindings_must_be_the_plans() -> None:
    """What the engine's inspect says it bound (NetworkSettings.Ports), against the plan: the start goes on
    only when they are the same (orchestration/session.py), since the card says where each port is reachable."""
    from dejima.core.publish import binding_problem

    planned = plan_with(("8080:3000", "3001")).filter.ports
    exact = {"3000/tcp": [{"HostIp": "127.0.0.1", "HostPort": "8080"}],
             "3001/tcp": [{"HostIp": "127.0.0.1", "HostPort": "3001"}], "9/tcp": None}
    assert binding_problem(planned, exact) is None
    wide = {**exact, "3000/tcp": [{"HostIp": "0.0.0.0", "HostPort": "8080"}]}
    assert binding_problem(planned, wide) == ("the engine bound 3000/tcp on 0.0.0.0:8080; 3001/tcp on 127.0.0.1:3001, "
                                              "where the plan publishes 3000/tcp on 127.0.0.1:8080; 3001/tcp on "
                                              "127.0.0.1:3001")
    also_v6 = {**exact, "3001/tcp": [{"HostIp": "127.0.0.1", "HostPort": "3001"}, {"HostIp": "::", "HostPort": "3001"}]}
    assert binding_problem(planned, also_v6) is not None
    assert binding_problem(planned, {**exact, "22/tcp": [{"HostIp": "127.0.0.1", "HostPort": "2222"}]}) is not None
    assert binding_problem(planned, None) is not None  # bound nothing
    assert binding_problem((), None) is None and binding_problem((), {"3000/tcp": None}) is None
