"""Which upstream proxy a session leaves through (core/upstream_proxy.py): the setting beats the host's
variables, which are read in a fixed order; a malformed one is an error naming where it came from, never
a silent direct route; and the plan, the card and the render say which proxy and from where."""

from __future__ import annotations

import ipaddress
import json
from dataclasses import replace

import pytest

from dejima.core.plan import RELAY_PORT, NetworkFacts, build_session_plan
from dejima.core.ruleset import RELAY_MARK
from dejima.core.settings import Settings, parse_settings
from dejima.core.upstream_proxy import UpstreamProxy, chosen_proxy
from dejima.errors import SettingsError
from dejima.ui.views import boundary_card, format_plan
from tests.unit.core.test_plan import IDENTITY, request


def test_the_setting_beats_the_hosts_variables() -> None:
    env = {"HTTPS_PROXY": "http://env.corp:8080"}
    assert chosen_proxy("http://proxy.corp:3128", env, "settings.toml") == UpstreamProxy(
        "proxy.corp", 3128, "settings.toml network.upstream_proxy")
    assert chosen_proxy("", env, "s") == UpstreamProxy("env.corp", 8080, "the host's $HTTPS_PROXY")
    assert chosen_proxy("", {}, "s") is None


def test_direct_ignores_the_hosts_variables_whatever_they_hold() -> None:
    """A host whose HTTPS_PROXY the filter cannot use (a local proxy on loopback, an https:// one) can still
    start sessions: the setting "direct" says connections go direct, and the settings file takes it."""
    for env in ({"HTTPS_PROXY": "http://127.0.0.1:3128"}, {"https_proxy": "https://proxy.corp"}, {}):
        assert chosen_proxy("direct", env, "s") is None
    assert parse_settings('[network]\nupstream_proxy = "direct"\n', "s.toml").network.upstream_proxy == "direct"


def test_the_hosts_variables_are_read_in_order() -> None:
    env = {"http_proxy": "http://d:4", "HTTP_PROXY": "http://c:3", "https_proxy": "http://b:2/"}
    found = chosen_proxy("", env, "s")
    assert found is not None and (found.host, found.port, found.origin) == ("b", 2, "the host's $https_proxy")
    found = chosen_proxy("", {"HTTP_PROXY": "http://c"}, "s")
    assert found is not None and found.port == 80


@pytest.mark.parametrize(("text", "problem"), [
    ("https://proxy.corp:3128", "must be an http:// URL"),
    ("http://user:secret@proxy.corp:3128", "must not carry a user name or password"),
    ("http://proxy.corp:3128/path", "without a path"),
    ("http://:3128", "names no host"),
    ("http://proxy.corp:99999", "is not a URL"),
])
def test_a_malformed_proxy_is_an_error_naming_where_it_came_from(text: str, problem: str) -> None:
    with pytest.raises(ValueError, match=f"the host's \\$HTTPS_PROXY: the upstream proxy .*{problem}"):
        chosen_proxy("", {"HTTPS_PROXY": text}, "s")
    with pytest.raises(SettingsError, match="network.upstream_proxy"):
        parse_settings(f'[network]\nupstream_proxy = "{text}"\n', "settings.toml")


def test_extra_ca_must_be_an_absolute_path() -> None:
    assert parse_settings('[network]\nextra_ca = "/etc/corp.pem"\n', "s").network.extra_ca == "/etc/corp.pem"
    with pytest.raises(SettingsError, match="network.extra_ca"):
        parse_settings('[network]\nextra_ca = "corp.pem"\n', "s")


def test_the_plan_the_filter_and_the_card_say_which_proxy_and_from_where() -> None:
    proxy = UpstreamProxy("proxy.corp", 3128, "the host's $HTTPS_PROXY", ipaddress.IPv4Address("10.20.0.5"))
    settings = replace(Settings(), network=replace(Settings().network, allow=("pypi.org",)))
    plan = build_session_plan(request(), settings, IDENTITY, "f", "s", NetworkFacts(upstream_proxy=proxy))
    config = json.loads(plan.filter_config)
    assert config["relay"] == {"port": RELAY_PORT, "proxy": "10.20.0.5", "proxy_port": 3128, "mark": RELAY_MARK}
    assert [c["name"] for c in config["expect"]["chains"]] == ["output", "input", "forward", "relay"]
    assert "redirect to :701" in plan.ruleset
    card = "\n".join(boundary_card(plan))
    assert "via proxy   http://proxy.corp:3128 (10.20.0.5, from the host's $HTTPS_PROXY)" in card
    assert "upstream proxy: http://proxy.corp:3128 (10.20.0.5, from the host's $HTTPS_PROXY)" in format_plan(plan)
    direct = build_session_plan(request(), settings, IDENTITY, "f", "s", NetworkFacts())
    assert "relay" not in json.loads(direct.filter_config) and "via proxy" not in "\n".join(boundary_card(direct))
    assert plan.plan_hash != direct.plan_hash
