"""Live grants in the filter: message validation, the resolver's policy and the nft batches.

The nft handle records its batches (the kernel's side is in tests/integration/test_grants.py);
the resolver is the real one, with an upstream that answers every name with one address.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json

import pytest
from dnslib import QTYPE, RCODE, RR, A, DNSRecord

from dejima.core.egress import parse_policy
from dejima.filter.answer import Answer, parse
from dejima.filter.control import Grants
from dejima.filter.dns_wire import Question
from dejima.filter.nft import SetWriter
from dejima.filter.resolver import PolicyResolver
from dejima.filter.setbatch import BatchedSets
from tests.unit.cli.livefilter import RecordingNft

DOCUMENTATION = ipaddress.ip_network("203.0.113.0/24")


async def _forward(question: Question) -> Answer:
    reply = DNSRecord.question(question.name, "A").reply()
    reply.add_answer(RR(question.name, QTYPE.A, rdata=A("203.0.113.7"), ttl=300))
    data = bytes(reply.pack())
    found = parse(data, question)
    assert found is not None
    return found


World = tuple[Grants, PolicyResolver, RecordingNft, list[dict[str, object]]]


@pytest.fixture
def world() -> World:
    policy = parse_policy(["web.example.test"], [("evil.example.test", "known exfiltration host"),
                                                 ("*.bad.example.test", "")],
                          answer_networks=(DOCUMENTATION,))
    nft = RecordingNft()
    sets = SetWriter("inet", "dejima", handle=nft)
    records: list[dict[str, object]] = []
    resolver = PolicyResolver(policy, _forward, BatchedSets(sets), records.append)
    now = [1000.0]
    return Grants(resolver, sets, records.append, clock=lambda: now[0]), resolver, nft, records


def ask(resolver: PolicyResolver, name: str) -> int:
    packet = bytes(DNSRecord.question(name, "A").pack())
    return int(DNSRecord.parse(asyncio.run(resolver.answer(packet))).header.rcode)


def send(grants: Grants, **message: object) -> dict[str, object]:
    return grants.handle(json.dumps({"v": 1, **message}).encode())


def test_grant_lets_the_next_query_through_and_is_recorded(world: World) -> None:
    grants, resolver, _nft, records = world
    assert ask(resolver, "crates.example.test") == RCODE.REFUSED
    answer = send(grants, op="grant", entries=["crates.example.test:443"], reason="cargo build")
    assert answer == {"ok": True, "granted": ["crates.example.test:443"]}
    assert ask(resolver, "crates.example.test") == RCODE.NOERROR
    assert records[-1]["kind"] == "grant" and records[-1]["reason"] == "cargo build"
    listing = send(grants, op="list")
    assert isinstance(listing["grants"], list), listing
    assert [g["entry"] for g in listing["grants"]] == ["crates.example.test:443"]


@pytest.mark.parametrize("entry", ["evil.example.test", "x.bad.example.test", "*.bad.example.test"])
def test_a_name_on_the_deny_list_is_refused_with_its_reason(world: World, entry: str) -> None:
    grants, resolver, _nft, _records = world
    answer = send(grants, op="grant", entries=[entry])
    assert answer["ok"] is False and "deny list" in str(answer["error"])
    assert resolver.policy == grants.base


def test_revoke_removes_the_name_its_addresses_and_cuts_their_flows(world: World) -> None:
    grants, resolver, nft, records = world
    send(grants, op="grant", entries=["crates.example.test"])
    assert ask(resolver, "crates.example.test") == RCODE.NOERROR
    answer = send(grants, op="revoke", entries=["crates.example.test"])
    assert answer == {"ok": True, "revoked": ["crates.example.test"]}
    assert ask(resolver, "crates.example.test") == RCODE.REFUSED
    assert "delete element inet dejima allow4 { 203.0.113.7 }" in nft.batches[-1]
    assert "add element inet dejima revoked4 { 203.0.113.7 timeout 3600s }" in nft.batches[-1]
    assert records[-2]["kind"] == "revoke" or records[-1]["kind"] == "revoke"


def test_revoke_keeps_addresses_another_allowed_name_still_uses(world: World) -> None:
    grants, resolver, nft, _records = world
    send(grants, op="grant", entries=["crates.example.test"])
    ask(resolver, "crates.example.test")
    ask(resolver, "web.example.test")  # the base policy's name: same address, learned last for it
    batches = len(nft.batches)
    send(grants, op="revoke", entries=["crates.example.test"])
    assert all("revoked4 { 203.0.113.7 timeout" not in b for b in nft.batches[batches:])


def test_expiry_revokes_on_its_own(world: World) -> None:
    grants, resolver, _nft, records = world
    send(grants, op="grant", entries=["crates.example.test"], seconds=60)
    assert ask(resolver, "crates.example.test") == RCODE.NOERROR
    grants.expire("crates.example.test")  # what the loop's timer calls
    assert ask(resolver, "crates.example.test") == RCODE.REFUSED
    assert any(r["kind"] == "grant-expired" for r in records)


def test_address_grant_goes_into_the_set_with_its_expiry(world: World) -> None:
    grants, _resolver, nft, _records = world
    assert send(grants, op="grant", entries=["203.0.113.9:8080"], seconds=120)["ok"] is True
    assert "add element inet dejima allow4_port { 203.0.113.9 . 8080 timeout 120s }" in nft.batches[-1]


@pytest.mark.parametrize(("raw", "why"), [
    (b"not json", "not a JSON object"),
    (b"[1, 2]", "a JSON object"),
    (b'{"v": 2, "op": "list"}', "protocol version 2"),
    (b'{"v": 1, "op": "drop-table"}', "unknown op"),
    (b'{"v": 1, "op": "grant", "entries": ["a.example.test"], "sneaky": 1}', "unknown key(s) sneaky"),
    (b'{"v": 1, "op": "grant", "entries": "a.example.test"}', "non-empty list of strings"),
    (b'{"v": 1, "op": "grant", "entries": []}', "non-empty list of strings"),
    (b'{"v": 1, "op": "grant", "entries": ["*"]}', "would allow everything"),
    (b'{"v": 1, "op": "grant", "entries": ["10.0.0.0/8"]}', "one IPv4 address"),
    (b'{"v": 1, "op": "grant", "entries": ["169.254.169.254"]}', "link-local"),
    (b'{"v": 1, "op": "grant", "entries": ["a.example.test"], "seconds": -5}', "seconds must be"),
    (b'{"v": 1, "op": "grant", "entries": ["a.example.test"], "seconds": true}', "seconds must be"),
    (b'{"v": 1, "op": "revoke", "entries": ["never.example.test"]}', "not a live grant"),
])
def test_bad_messages_are_refused_with_a_reason_and_change_nothing(world: World, raw: bytes,
                                                                   why: str) -> None:
    grants, resolver, nft, _records = world
    answer = grants.handle(raw)
    assert answer["ok"] is False and why in str(answer["error"])
    assert resolver.policy == grants.base and nft.batches == [] and grants.active == {}
