import io

from dejima.errors import SettingsError
from dejima.ui.console import plain_console, render_error


def test_error_rendering_is_exact() -> None:
    buffer = io.StringIO()
    error = SettingsError("/x/settings.toml: unknown key 'images.bsae'", context="line one\nline two",
                          hint="did you mean 'base'?")
    plain_console(buffer, width=120).print(render_error(error))
    assert buffer.getvalue() == (
        "dejima: error [invalid-settings]: /x/settings.toml: unknown key 'images.bsae'\n"
        "  │ line one\n"
        "  │ line two\n"
        "  hint: did you mean 'base'?\n"
    )


def test_references_must_be_kebab_case() -> None:
    import pytest

    with pytest.raises(ValueError):
        SettingsError("m", reference="Not_Kebab")


def test_boundary_card_says_what_is_enforced() -> None:
    from pathlib import PurePosixPath

    from dejima.core.plan import Identity, SessionRequest, build_session_plan
    from dejima.core.settings import NetworkSettings, Settings
    from dejima.ui.views import boundary_card

    request = SessionRequest("abcd1234", "t", PurePosixPath("/w/p"), PurePosixPath("/h"), None, "b:1:2")
    plan = build_session_plan(request, Settings(network=NetworkSettings(allow=("pypi.org",))),
                              Identity(1000, 1000, "u"), "f", "s")
    text = "\n".join(boundary_card(plan))
    for phrase in ("default-deny, verified in the kernel; allowed: pypi.org", "only dejima's resolver",
                   "ipv6        off", "uid:gid 1000:1000, no capabilities", "/w/p (rw)",
                   "no secret enters the session"):
        assert phrase in text


def test_boundary_card_shows_overrides_limits_and_root() -> None:
    import ipaddress
    from pathlib import PurePosixPath

    from dejima.core.plan import Identity, NetworkFacts, SessionRequest, build_session_plan
    from dejima.core.settings import Settings
    from dejima.ui.views import boundary_card

    request = SessionRequest("abcd1234", "t", PurePosixPath("/w/p"), PurePosixPath("/h"), None, "b:1:2",
                             allow=("10.213.5.0/24",), allow_special=("10.213.5.0/24",))
    facts = NetworkFacts(gateway=ipaddress.ip_network("10.213.5.1/32"))
    plan = build_session_plan(request, Settings(), Identity(0, 0, "root"), "f", "s", facts, engine_memory=2**33)
    card = boundary_card(plan)
    assert ("OVERRIDE    10.213.5.0/24 allowed by --allow-special: reaches 10.213.5.1, the container engine's "
            "gateway (the host, seen from containers)") in card
    text = "\n".join(card)
    assert "identity    ROOT (uid 0, asked for with --as-root), no capabilities" in text
    assert ("limits      session: 4096 processes, 6 GiB memory (no swap), CPU weight 512, /tmp 1 GiB; "
            "filter: 512 processes, 256 MiB memory (no swap), CPU weight 1024") in text


def test_a_refusal_notice_goes_to_the_title_and_carries_no_terminal_control() -> None:
    import io

    from rich.console import Console

    from dejima.ui.console import UI

    stream = io.StringIO()
    ui = UI(Console(file=stream, force_terminal=True))
    ui.notice("dejima: evil\x07\x1b]2;owned\x1b\\[/].example was refused")
    written = stream.getvalue()
    assert written.startswith("\x1b]2;") and written.endswith("\x07")
    inner = written[4:-1]
    assert "\x07" not in inner and "\x1b" not in inner  # the name cannot close or start a sequence
    assert "\\u001b]2;owned" in inner and "[/].example" in inner  # shown, escaped, not interpreted
    quiet = io.StringIO()
    UI(Console(file=quiet, force_terminal=False)).notice("dejima: x was refused")
    assert quiet.getvalue() == ""  # not a terminal: nothing is written


def test_every_kind_of_message_prints_in_a_fresh_interpreter() -> None:
    """rich is imported by the first message: each kind of message, first in its process, works."""
    import subprocess
    import sys

    calls = ['ui.info("i")', 'ui.warn("w")', 'ui.card("title", ["a", "b"])',
             'ui.error(SettingsError("bad", hint="fix"))', 'print(render_error(SettingsError("x")))']
    for call in calls:
        script = ("import sys; from dejima.errors import SettingsError; "
                  "from dejima.ui.console import UI, render_error; "
                  f"ui = UI(); {call}; assert 'rich' in sys.modules")
        result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=30)
        assert result.returncode == 0, f"{call}: {result.stderr[-500:]}"


def test_boundary_card_and_render_show_the_proxys_budget() -> None:
    from dataclasses import replace
    from pathlib import PurePosixPath

    from dejima.adapters.session_dirs import new_draws
    from dejima.core.manifest import CredentialRoute
    from dejima.core.plan import Identity, SessionRequest, build_session_plan, proxy_limits
    from dejima.core.route_plan import plan_routes
    from dejima.core.settings import CredentialSettings, Settings
    from dejima.ui.views import boundary_card, format_plan

    request = SessionRequest("abcd1234", "t", PurePosixPath("/w/p"), PurePosixPath("/h"), None, "b:1:2")
    settings = Settings(credentials=CredentialSettings(proxy_memory="32m", proxy_connections=64))
    route = CredentialRoute("anthropic-api-key", "https://api.anthropic.com", "x-api-key", "raw",
                            ("env", ("ANTHROPIC_API_KEY",)), "ANTHROPIC_API_KEY", base_url_env="ANTHROPIC_BASE_URL")
    routes = replace(plan_routes([(route, "backends/anthropic.toml")], new_draws()),
                     limits=proxy_limits(settings))
    plan = build_session_plan(request, settings, Identity(1000, 1000, "u"), "f", "s", routes=routes)
    budget = "proxy budget: holds at most 32 MiB of request data at once, 64 connections"
    assert any(line.strip() == budget for line in boundary_card(plan))
    assert budget in format_plan(plan).splitlines()
