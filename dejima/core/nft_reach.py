"""Whether an applied nft ruleset may let the session open a connection to an address.

``dejima doctor --session`` reads the filter's table back (``nft -j list table inet dejima``) and asks,
of the engine's gateway and the cloud metadata address, whether any path through the output hook
could accept a new packet to it from the session: no packet is sent there. The walk is
conservative: a match this module cannot decide (a port, a protocol, a rate limit, anything
unknown) may hold, so a rule that could accept is reported, and one that could refuse does not end
the walk. What it decides: the destination address (literals, prefixes, ranges, named and
anonymous sets, concatenations led by the address), the output interface (the session's packets to
a non-loopback address leave by another), the packet mark (the session cannot set one: 0) and the
connection state (the first packet is new).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

MAX_DEPTH = 16  # nft refuses deeper jumps; a listing that claims more is not walked further


class Match(Enum):
    NO = 0
    MAYBE = 1
    YES = 2


@dataclass(frozen=True, slots=True)
class Reach:
    accepted: bool  # some path may accept a new packet to the address
    detail: str  # which rule (or policy) may accept it, or how it is refused


@dataclass(frozen=True, slots=True)
class _Table:
    chains: dict[str, dict[str, Any]]
    rules: dict[str, list[dict[str, Any]]]
    sets: dict[str, list[Any]]


def _table(listing: Mapping[str, Any], family: str, name: str) -> _Table:
    chains: dict[str, dict[str, Any]] = {}
    rules: dict[str, list[dict[str, Any]]] = {}
    sets: dict[str, list[Any]] = {}
    for item in listing.get("nftables", []):
        for kind, body in item.items():
            if not isinstance(body, dict) or body.get("family") != family or body.get("table") != name:
                continue
            if kind == "chain":
                chains[body["name"]] = body
            elif kind == "rule":
                rules.setdefault(body["chain"], []).append(body)
            elif kind in ("set", "map"):
                sets[body["name"]] = [e["elem"]["val"] if isinstance(e, dict) and "elem" in e else e
                                      for e in body.get("elem", [])]
    return _Table(chains, rules, sets)


def _covers(element: Any, address: ipaddress.IPv4Address) -> bool:
    """Whether one set element or match value (an address, prefix or range) holds ``address``."""
    try:
        if isinstance(element, str):
            return address in ipaddress.ip_network(element, strict=False)
        if isinstance(element, dict) and "prefix" in element:
            prefix = element["prefix"]
            return address in ipaddress.ip_network(f"{prefix['addr']}/{prefix['len']}", strict=False)
        if isinstance(element, dict) and "range" in element:
            low, high = (ipaddress.ip_address(str(v)) for v in element["range"])
            return low <= address <= high  # type: ignore[operator]
    except (ValueError, TypeError, KeyError):
        return False
    return False


def _values(right: Any, table: _Table) -> list[Any] | None:
    """The values a match compares with (a named set's elements); None when they cannot be read."""
    if isinstance(right, str) and right.startswith("@"):
        return table.sets.get(right[1:])
    if isinstance(right, dict) and "set" in right:
        return list(right["set"])
    return [right]


def _is_daddr(left: Any) -> bool:
    return isinstance(left, dict) and left.get("payload", {}).get("protocol") == "ip" and \
        left.get("payload", {}).get("field") == "daddr"


def _member(left: Any, right: Any, table: _Table, address: ipaddress.IPv4Address) -> Match:
    values = _values(right, table)
    if values is None:
        return Match.MAYBE
    if _is_daddr(left):
        return Match.YES if any(_covers(v, address) for v in values) else Match.NO
    if isinstance(left, dict) and "concat" in left and left["concat"] and _is_daddr(left["concat"][0]):
        # The address leads; the session picks the rest (a port): some element with the address may match.
        led = [v["concat"][0] for v in values if isinstance(v, dict) and "concat" in v and v["concat"]]
        if len(led) < len(values):
            return Match.MAYBE
        return Match.MAYBE if any(_covers(v, address) for v in led) else Match.NO
    meta = left.get("meta", {}).get("key") if isinstance(left, dict) else None
    if meta in ("oif", "oifname"):
        loopback = address.is_loopback
        return Match.YES if any(v == "lo" for v in values) == loopback else Match.NO
    if meta == "mark":
        return Match.YES if 0 in values else Match.NO
    if isinstance(left, dict) and left.get("ct", {}).get("key") == "state":
        states = [s for v in values for s in (v if isinstance(v, list) else [v])]
        return Match.YES if "new" in states else Match.NO
    return Match.MAYBE


def _match(expression: dict[str, Any], table: _Table, address: ipaddress.IPv4Address) -> Match:
    op, left, right = expression.get("op", "=="), expression.get("left"), expression.get("right")
    found = _member(left, right, table, address)
    if op in ("==", "in"):
        return found
    if op == "!=":
        return {Match.YES: Match.NO, Match.NO: Match.YES, Match.MAYBE: Match.MAYBE}[found]
    return Match.MAYBE


_TERMINAL = {"accept": "accept", "queue": "accept", "drop": "refuse", "reject": "refuse", "return": "return"}


def _walk(table: _Table, chain: str, address: ipaddress.IPv4Address, depth: int) -> list[tuple[str, str]]:
    """Every outcome a path through ``chain`` may reach: (accept | refuse | return, where)."""
    if depth > MAX_DEPTH:
        return [("accept", f"chain {chain} is nested deeper than {MAX_DEPTH}")]
    outcomes: list[tuple[str, str]] = []
    for rule in table.rules.get(chain, []):
        where = f"rule {rule.get('handle', '?')} of chain {chain}"
        matched = Match.YES
        reached: list[tuple[str, str]] | None = None
        for expression in rule.get("expr", []):
            kind, body = next(iter(expression.items())) if len(expression) == 1 else ("?", {})
            if kind == "match":
                step = _match(body, table, address)
                matched = Match.NO if step is Match.NO or matched is Match.NO else (
                    Match.MAYBE if Match.MAYBE in (step, matched) else Match.YES)
            elif kind == "limit":
                matched = Match.NO if matched is Match.NO else Match.MAYBE
            elif kind in _TERMINAL:
                reached = [(_TERMINAL[kind], where)]
                break
            elif kind in ("jump", "goto"):
                inner = _walk(table, body["target"], address, depth + 1)
                reached = [o for o in inner if o[0] != "return" or kind == "goto"]
                if kind == "jump" and any(o[0] == "return" for o in inner):
                    reached.append(("continue", where))
                break
            elif kind in ("counter", "log", "comment", "notrack", "xt"):
                continue
            elif kind in ("mangle", "dnat", "snat", "redirect", "masquerade", "tproxy", "dup", "fwd", "?"):
                matched = Match.NO if matched is Match.NO else Match.MAYBE
                reached = [("accept", f"{where} ({kind})")]  # it changes the packet: not decided here
                break
            if matched is Match.NO:
                break
        if matched is Match.NO or reached is None:
            continue
        outcomes += [o for o in reached if o[0] != "continue"]
        if matched is Match.YES and not any(o[0] == "continue" for o in reached):
            return outcomes
    outcomes.append(("return", f"end of chain {chain}"))
    return outcomes


def reach(listing: Mapping[str, Any], address: str, family: str = "inet", table_name: str = "dejima",
          hook: str = "output") -> Reach:
    """Whether the table's base chains on ``hook`` may accept a new packet from the session to ``address``."""
    target = ipaddress.IPv4Address(address)
    table = _table(listing, family, table_name)
    bases = [c for c in table.chains.values() if c.get("hook") == hook and c.get("type") == "filter"]
    if not bases:
        return Reach(True, f"table {family} {table_name} has no {hook} chain: nothing filters the session")
    for base in sorted(bases, key=lambda c: int(c.get("prio", 0))):
        outcomes = _walk(table, base["name"], target, 0)
        for outcome, where in outcomes:
            if outcome == "accept" or (outcome == "return" and base.get("policy") != "drop"):
                shown = where if outcome == "accept" else f"chain {base['name']}'s policy {base.get('policy')}"
                return Reach(True, f"{shown} may accept a new connection to {address}")
    return Reach(False, f"every path of table {family} {table_name}'s {hook} hook refuses {address}")
