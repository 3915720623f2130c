"""The escape checks of `dejima doctor --session` judged without a session: what each needs to hold, its control,
what the live policy offers as targets, and that a result missing or unreadable never passes."""

from __future__ import annotations

import ipaddress
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from dejima.core.boundary_checks import (
    CHECKS,
    DEFAULT_TARGETS,
    FAILED,
    HOLDS,
    NOT_ALLOWED_NAME,
    SKIPPED,
    UNPROVEN,
    Evidence,
    Targets,
    judge,
    probe_actions,
    targets_for,
)
from dejima.core.egress import parse_policy

LISTING = json.loads((Path(__file__).parents[2] / "data" / "filter-ruleset.json").read_text())
GATEWAY = "172.17.0.1"
POLICY = parse_policy(["web.example.com:443", "all.example.com", "203.0.113.7"],
                      [("bad.example.com", "exfiltrates")], denied_addresses=(ipaddress.ip_network(GATEWAY),))
TARGETS = Targets(allowed=("web.example.com", 443, 8443), refused_name=("bad.example.com", "denied"),
                  credential_env=("NPM_TOKEN",), gateway=GATEWAY)
BLOCKED = {"result": "blocked", "error": "Connection refused", "seconds": 0.001}
CONNECTED = {"result": "connected", "seconds": 0.001}
ANSWERED = {"result": "answered", "rcode": 5, "kind": "not-allowed", "reason": "x"}
HELD: dict[str, dict[str, Any]] = {
    "refused": BLOCKED, "loopback": CONNECTED, "allowed_port": CONNECTED, "other_port": BLOCKED,
    "udp53": {"result": "blocked", "error": "Operation not permitted"}, "tcp53": BLOCKED, "tcp853": BLOCKED,
    "own_udp": ANSWERED, "own_tcp": ANSWERED,
    "refused_name": {"result": "answered", "rcode": 5, "kind": "denied", "reason": "exfiltrates"},
    "ipv6": {"result": "blocked", "error": "Cannot assign requested address", "switch": "1", "addresses": 0},
    "control": {"result": "listed", "sockets": [["/run/dejima/control.sock", "No such file or directory"]],
                "run_dir": False},
    "credential": {"result": "answered", "rcode": 5, "kind": "credential", "reason": "the name carries a credential"},
    "answer:metadata.google.internal": {**ANSWERED, "addresses": []},
    "answer:host.docker.internal": {"result": "answered", "rcode": 5, "kind": "answer-denied", "addresses": []},
}


def outcomes(probe: dict[str, dict[str, Any]], targets: Targets = TARGETS, listing: Any = LISTING,
             reached: bool = True) -> dict[str, tuple[str, str]]:
    evidence = Evidence(probe, listing, POLICY, reached)
    return {check.name: (outcome.status, outcome.detail) for check, outcome in judge(targets, evidence)}


def statuses(probe: dict[str, dict[str, Any]], **kw: Any) -> dict[str, str]:
    return {name: status for name, (status, _) in outcomes(probe, **kw).items()}


def test_every_check_holds_on_a_sound_session() -> None:
    found = outcomes(HELD)
    assert {name: status for name, (status, _) in found.items()} == {c.name: HOLDS for c in CHECKS}
    assert found["refused name"][1] == "bad.example.com: rcode 5, EDE dejima: denied: exfiltrates"
    assert "no packet sent" in found["metadata address"][1]


# One hole at a time: exactly its check goes red.
@pytest.mark.parametrize(("key", "result", "check"), [
    ("refused", CONNECTED, "refused address"),
    ("refused", {"result": "timeout"}, "refused address"),  # silence: the packet may have left
    ("other_port", CONNECTED, "refused port of an allowed name"),
    ("udp53", {"result": "answered", "rcode": 0}, "DNS to another resolver"),
    ("udp53", {"result": "timeout"}, "DNS to another resolver"),
    ("tcp853", CONNECTED, "DNS to another resolver"),
    ("refused_name", {"result": "answered", "rcode": 0, "kind": None}, "refused name"),
    ("refused_name", {"result": "answered", "rcode": 5, "kind": "not-allowed"}, "refused name"),  # not its reason
    ("ipv6", {"result": "blocked", "switch": "0", "addresses": 0}, "IPv6 disabled"),
    ("ipv6", {"result": "connected", "switch": "1", "addresses": 1}, "IPv6 disabled"),
    ("control", {"result": "listed", "sockets": [["@dejima-control", "answered"]], "run_dir": False},
     "control socket out of reach"),
    ("control", {"result": "listed", "sockets": [], "run_dir": True}, "control socket out of reach"),
    ("credential", {"result": "answered", "rcode": 5, "kind": "not-allowed"}, "placeholder to a foreign host"),
])
def test_a_hole_fails_its_own_check_only(key: str, result: dict[str, Any], check: str) -> None:
    found = statuses({**HELD, key: result})
    assert found[check] == FAILED
    assert {name for name, status in found.items() if status != HOLDS} == {check}


def test_the_gateway_and_metadata_checks_read_the_ruleset_and_the_resolvers_verdict() -> None:
    hole = {"rule": {"family": "inet", "table": "dejima", "chain": "output", "handle": 77,
                     "expr": [{"match": {"op": "==", "left": {"payload": {"protocol": "ip", "field": "daddr"}},
                                         "right": GATEWAY}}, {"accept": None}]}}
    opened = {"nftables": [*LISTING["nftables"][:-4], hole, *LISTING["nftables"][-4:]]}
    found = outcomes(HELD, listing=opened)
    assert found["engine gateway"] == (FAILED, f"rule 77 of chain output may accept a new connection to {GATEWAY}")
    assert found["metadata address"][0] == HOLDS
    # The resolver's half: a policy whose answers may point at the metadata address.
    lax = replace(POLICY, answer_networks=(ipaddress.ip_network("169.254.0.0/16"),))
    judged = dict((c.name, o) for c, o in judge(TARGETS, Evidence(HELD, LISTING, lax, True)))
    assert judged["metadata address"].status == FAILED
    assert "an allowed name's answer pointing here would be let through" in judged["metadata address"].detail


def test_an_answer_of_dejimas_resolver_pointing_there_fails_the_check() -> None:
    passed = {"result": "answered", "rcode": 0, "kind": None, "addresses": ["169.254.169.254"]}
    found = outcomes({**HELD, "answer:metadata.google.internal": passed})
    assert found["metadata address"] == (FAILED, "dejima's resolver answered metadata.google.internal with "
                                                 "169.254.169.254")
    assert found["engine gateway"][0] == HOLDS
    assert "host.docker.internal: rcode 5 answer-denied" in found["engine gateway"][1]
    silent = statuses({**HELD, "answer:host.docker.internal": {"result": "timeout"}})
    assert silent["engine gateway"] == silent["metadata address"] == UNPROVEN


def test_a_probe_aimed_at_an_address_the_policy_allows_proves_nothing() -> None:
    """A user who allows 192.0.2.1 (or the resolver address) is told to aim elsewhere, not that the boundary broke."""
    aimed = replace(TARGETS, refused_address="203.0.113.7", foreign_resolver="203.0.113.7")
    answered = {"result": "answered", "rcode": 0}
    found = statuses({**HELD, "refused": CONNECTED, "udp53": answered}, targets=aimed)
    assert found["refused address"] == found["DNS to another resolver"] == UNPROVEN
    assert statuses({**HELD, "refused": CONNECTED})["refused address"] == FAILED  # 192.0.2.1 is not allowed


def test_without_the_ruleset_or_policy_nothing_is_proven() -> None:
    found = statuses(HELD, listing=None)
    assert found["engine gateway"] == found["metadata address"] == UNPROVEN
    assert statuses(HELD, targets=replace(TARGETS, gateway=None))["engine gateway"] == UNPROVEN


@pytest.mark.parametrize(("key", "result", "check"), [
    ("loopback", BLOCKED, "refused address"),
    ("allowed_port", BLOCKED, "refused port of an allowed name"),
    ("own_tcp", {"result": "timeout"}, "DNS to another resolver"),
    ("refused_name", {"result": "timeout"}, "refused name"),
])
def test_a_failed_control_leaves_the_check_unproven(key: str, result: dict[str, Any], check: str) -> None:
    assert statuses({**HELD, key: result})[check] == UNPROVEN


def test_the_control_channel_check_needs_the_host_to_reach_the_socket() -> None:
    assert statuses(HELD, reached=False)["control socket out of reach"] == UNPROVEN


def test_sockets_left_untried_leave_the_control_channel_check_unproven() -> None:
    """An agent may open thousands of unix sockets: the probe tries a bounded number, and says how many it left."""
    crowded = {**HELD, "control": {**HELD["control"], "untried": 4000}}
    assert statuses(crowded)["control socket out of reach"] == UNPROVEN


def test_a_missing_result_is_never_a_pass() -> None:
    found = statuses({})
    assert set(found.values()) <= {UNPROVEN, FAILED, HOLDS}
    assert all(found[c.name] == UNPROVEN for c in CHECKS if c.name not in ("engine gateway", "metadata address"))


def test_checks_that_do_not_apply_are_skipped_with_their_reason() -> None:
    bare = Targets(gateway=GATEWAY)
    found = outcomes({k: v for k, v in HELD.items() if k not in ("allowed_port", "other_port", "credential")},
                     targets=bare)
    assert found["refused port of an allowed name"] == (SKIPPED, "the session allows no name on some ports only")
    assert found["placeholder to a foreign host"] == (SKIPPED, "the session has no credential routes")
    assert "allowed_port" not in probe_actions(bare) and "credential" not in probe_actions(bare)


def test_targets_come_from_the_live_policy_and_the_environment() -> None:
    targets = targets_for(POLICY, {"NPM_TOKEN": "npm_x", "HF_TOKEN": ""}, GATEWAY, ("NPM_TOKEN", "HF_TOKEN"))
    assert targets.allowed == ("web.example.com", 443, 8443)  # all.example.com: every port, no refused one
    assert targets.refused_name == ("bad.example.com", "denied")
    assert targets.credential_env == ("NPM_TOKEN",)
    wildcard = parse_policy(["a.example.com:8443", "a.example.com:22"], [("*.evil.example", "")])
    other = targets_for(wildcard, {}, None, ())
    assert other.allowed == ("a.example.com", 8443, 8080)
    assert other.refused_name == ("dejima-doctor.evil.example", "denied")
    assert targets_for(None, {}, None, ()).refused_name == (NOT_ALLOWED_NAME, "not-allowed")


def test_the_default_targets_are_documentation_addresses() -> None:
    for address in (DEFAULT_TARGETS.refused_address, DEFAULT_TARGETS.foreign_resolver):
        assert any(ipaddress.ip_address(address) in ipaddress.ip_network(n)
                   for n in ("192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24"))
    actions = probe_actions(TARGETS)
    assert not any(a.get("host") == DEFAULT_TARGETS.metadata or a.get("server") == GATEWAY for a in actions.values())
