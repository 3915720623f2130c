"""The ruleset walk of `dejima doctor --session`: a filter's real listing refuses the gateway and the metadata
address, and each planted hole (a rule, a set element, a policy) is found and named."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from dejima.core.nft_reach import reach

# `nft -j list ruleset` in a session's filter (allowed: web.example.com:443; upstream 10.255.255.53).
LISTING: dict[str, Any] = json.loads((Path(__file__).parents[2] / "data" / "filter-ruleset.json").read_text())
GATEWAY, METADATA = "172.17.0.1", "169.254.169.254"
DADDR = {"payload": {"protocol": "ip", "field": "daddr"}}


def match(left: dict[str, Any], right: Any, op: str = "==") -> dict[str, Any]:
    return {"match": {"op": op, "left": left, "right": right}}


def planted(*exprs: dict[str, Any], chain: str = "output", at: int = 0) -> dict[str, Any]:
    """The listing with one more rule in ``chain``, ``at`` its index among that chain's rules."""
    listing: dict[str, Any] = copy.deepcopy(LISTING)
    items = listing["nftables"]
    indexes = [i for i, item in enumerate(items) if item.get("rule", {}).get("chain") == chain]
    where = indexes[at] if at < len(indexes) else (indexes[-1] + 1 if indexes else len(items))
    items.insert(where, {"rule": {"family": "inet", "table": "dejima", "chain": chain, "handle": 99,
                                  "expr": list(exprs)}})
    return listing


def with_rule(listing: dict[str, Any], chain: str, *exprs: dict[str, Any]) -> dict[str, Any]:
    """``listing`` with a rule appended to ``chain`` (a chain of its own when it has none)."""
    rule = {"rule": {"family": "inet", "table": "dejima", "chain": chain, "handle": 98, "expr": list(exprs)}}
    return {"nftables": [*listing["nftables"], rule]}


def with_element(set_name: str, value: Any) -> dict[str, Any]:
    listing: dict[str, Any] = copy.deepcopy(LISTING)
    for item in listing["nftables"]:
        if item.get("set", {}).get("name") == set_name:
            item["set"].setdefault("elem", []).append({"elem": {"val": value, "timeout": 300, "expires": 299}})
    return listing


@pytest.mark.parametrize("address", [GATEWAY, METADATA, "10.255.255.53", "127.0.0.11", "192.0.2.1"])
def test_the_filters_own_ruleset_refuses_every_new_connection_out(address: str) -> None:
    found = reach(LISTING, address)
    assert not found.accepted, found.detail
    assert found.detail == f"every path of table inet dejima's output hook refuses {address}"


def test_loopback_is_accepted_inside_the_namespace() -> None:
    """The control: the walk does find an accepting path where the ruleset has one (oif lo)."""
    found = reach(LISTING, "127.0.0.1")
    assert found.accepted and "chain output" in found.detail


@pytest.mark.parametrize(("hole", "address"), [
    (planted(match(DADDR, METADATA), {"accept": None}), METADATA),
    (planted(match(DADDR, {"prefix": {"addr": "169.254.0.0", "len": 16}}), {"accept": None}), METADATA),
    (planted(match(DADDR, {"range": ["172.17.0.0", "172.17.0.9"]}), {"accept": None}), GATEWAY),
    (planted(match(DADDR, {"set": ["1.1.1.1", GATEWAY]}), {"counter": None}, {"accept": None}), GATEWAY),
    (planted(match(DADDR, "10.0.0.1", "!="), {"accept": None}), METADATA),
    (planted(match({"meta": {"key": "oifname"}}, "lo", "!="), {"accept": None}), GATEWAY),
    (planted(match({"ct": {"key": "state"}}, ["new"], "in"), {"accept": None}), METADATA),
    (planted(match({"meta": {"key": "mark"}}, 0), {"accept": None}), METADATA),
    (with_rule(planted({"jump": {"target": "extra"}}), "extra", {"accept": None}), METADATA),
    (with_element("allow4", METADATA), METADATA),
    (with_element("allow4_port", {"concat": [GATEWAY, 443]}), GATEWAY),
])
def test_a_planted_hole_is_found(hole: dict[str, Any], address: str) -> None:
    found = reach(hole, address)
    assert found.accepted, found.detail
    assert "may accept a new connection" in found.detail


def test_a_hole_names_the_rule_that_opens_it() -> None:
    found = reach(planted(match(DADDR, METADATA), {"accept": None}), METADATA)
    assert found.detail == f"rule 99 of chain output may accept a new connection to {METADATA}"


@pytest.mark.parametrize("rule", [
    planted(match(DADDR, "192.0.2.7"), {"accept": None}),  # another address
    planted(match({"meta": {"key": "mark"}}, 25706), {"accept": None}),  # a mark the session cannot set
    planted(match({"ct": {"key": "state"}}, ["established", "related"], "in"), {"accept": None}),
    planted(match({"meta": {"key": "oif"}}, "lo"), {"accept": None}),
    planted(match(DADDR, METADATA), {"drop": None}),
    planted({"jump": {"target": "refuse"}}, at=99),  # the refuse chain's rate limit may not match; its reject does
])
def test_rules_that_cannot_accept_the_address_are_not_holes(rule: dict[str, Any]) -> None:
    """Each decided match: the address, the mark (0), the state (new), the interface; and a verdict that refuses."""
    assert not reach(rule, METADATA).accepted


def test_a_chain_whose_policy_accepts_is_a_hole_once_its_last_refusal_is_gone() -> None:
    listing: dict[str, Any] = copy.deepcopy(LISTING)
    items = listing["nftables"]
    last = max(i for i, item in enumerate(items) if item.get("rule", {}).get("chain") == "output")
    del items[last]  # the final `counter goto refuse`
    assert not reach(listing, METADATA).accepted  # policy drop still holds
    for item in items:
        if item.get("chain", {}).get("name") == "output":
            item["chain"]["policy"] = "accept"
    found = reach(listing, METADATA)
    assert found.accepted and found.detail.startswith("chain output's policy accept")


def test_no_table_means_nothing_filters() -> None:
    found = reach({"nftables": []}, METADATA)
    assert found.accepted and "has no output chain" in found.detail


def test_a_rule_that_rewrites_the_packet_is_not_trusted() -> None:
    listing = planted({"dnat": {"addr": "10.0.0.1"}})
    assert reach(listing, METADATA).accepted
