"""Allowed literals that reach special places need an override that names them exactly."""

import ipaddress
from dataclasses import replace

import pytest

from dejima.core.egress import Entry, parse_entry
from dejima.core.special_entries import SpecialEntryError, check_special, special_places, why_special

HOST = (ipaddress.ip_network("127.0.0.1/32"), ipaddress.ip_network("192.0.2.2/32"),
        ipaddress.ip_network("172.17.0.1/32"))
GATEWAY = ipaddress.ip_network("10.213.5.1/32")
PLACES = special_places(HOST, GATEWAY)


def entry(text: str, origin: str = "--allow") -> Entry:
    return replace(parse_entry(text, origin), origin=origin)


@pytest.mark.parametrize(("text", "why"), [
    ("0.0.0.0/0", "covers 4,294,967,296 addresses"),
    ("0.0.0.0/1", "more than 1/256 of the internet"),
    ("128.0.0.0/7", "networks shorter than /8 are refused"),
    ("169.254.169.254", "is in 169.254.0.0/16, link-local"),
    ("169.254.169.254:80", "is in 169.254.0.0/16, link-local"),
    ("0xa9.0xfe.0xa9.0xfe", "is in 169.254.0.0/16"),  # another spelling of the same address
    ("169.0.0.0/8", "reaches 169.254.0.0/16"),
    ("100.100.100.200", "reaches 100.100.100.200, a cloud metadata service"),
    ("100.64.0.0/10", "reaches 100.100.100.200, a cloud metadata service"),
    ("168.63.129.16:80", "a cloud metadata service"),
    ("10.213.5.1", "reaches 10.213.5.1, the container engine's gateway"),
    ("10.213.5.0/24:8080", "reaches 10.213.5.1, the container engine's gateway"),
    ("10.0.0.0/8", "the container engine's gateway"),
    ("192.0.2.0/24", "reaches 192.0.2.2, an address of this host"),
    ("172.16.0.0/12", "reaches 172.17.0.1, an address of this host"),
])
def test_special_literals_say_why(text: str, why: str) -> None:
    reason = why_special(entry(text), PLACES)
    assert reason is not None and why in reason


@pytest.mark.parametrize("text", [
    "example.com", "*.example.com", "203.0.113.7", "203.0.113.0/24:443", "1.0.0.0/8", "10.213.6.0/24",
    "127.0.0.1:8080",  # the namespace's own loopback, not the host's
    "192.0.2.3",
])
def test_ordinary_entries_need_no_override(text: str) -> None:
    assert why_special(entry(text), PLACES) is None


def test_without_an_engine_the_gateway_is_unknown_but_the_rest_is_checked() -> None:
    places = special_places(HOST, None)
    assert why_special(entry("10.213.5.1"), places) is None
    assert why_special(entry("169.254.169.254"), places) is not None
    assert why_special(entry("192.0.2.2"), places) is not None


def test_a_special_entry_is_refused_naming_where_it_came_from_and_the_fix() -> None:
    with pytest.raises(SpecialEntryError) as caught:
        check_special([entry("169.254.169.254", "/home/a/settings.toml network.allow")], [], PLACES,
                      "/home/a/settings.toml")
    error = caught.value
    assert error.exit_code == 2 and error.reference == "special-egress-entry"
    assert error.message.startswith("/home/a/settings.toml network.allow: egress entry '169.254.169.254' is in")
    assert error.hint is not None and "--allow-special 169.254.169.254 " in error.hint
    assert 'allow_special = ["169.254.169.254"] under [network] in /home/a/settings.toml' in error.hint


@pytest.mark.parametrize(("allowed", "override"), [
    ("169.254.169.254:80", "169.254.169.254"),  # the port is part of the entry
    ("169.254.169.254", "169.254.169.254:80"),
    ("10.213.5.0/24", "10.213.5.0/25"),
    ("10.213.5.0/24", "10.213.0.0/16"),
])
def test_an_override_must_name_the_entry_exactly(allowed: str, override: str) -> None:
    with pytest.raises(SpecialEntryError):
        check_special([entry(allowed)], [entry(override, "--allow-special")], PLACES, "settings.toml")


def test_an_exact_override_unlocks_and_is_reported_once() -> None:
    allowed = [entry("10.213.5.0/24"), entry("10.213.5.0/24", "settings.toml network.allow"), entry("example.com")]
    unlocked = check_special(allowed, [entry("10.213.5.0/24", "settings.toml network.allow_special")], PLACES,
                             "settings.toml")
    assert [(u.entry.canonical, u.override_origin) for u in unlocked] == [
        ("10.213.5.0/24", "settings.toml network.allow_special")]
    assert "gateway" in unlocked[0].reason
    # another spelling of the same entry is the same entry
    assert check_special([entry("0xa9.254.169.254")], [entry("169.254.169.254", "--allow-special")], PLACES, "s")


def test_an_override_that_unlocks_nothing_is_an_error() -> None:
    with pytest.raises(SpecialEntryError, match="--allow-special: '1.2.3.4' overrides nothing"):
        check_special([entry("example.com")], [entry("1.2.3.4", "--allow-special")], PLACES, "settings.toml")
