"""The resolver's hook for the credential proxy's TLS fallback: an intercepted name resolves to the
filter's loopback relay, with no upstream query and no set insertion; the policy still decides first."""

from __future__ import annotations

import asyncio

from dnslib import QTYPE, RCODE, DNSRecord

from dejima.core.egress import parse_policy
from dejima.filter.answer import Answer
from dejima.filter.dns_wire import Question
from dejima.filter.resolver import PolicyResolver
from tests.unit.filter.test_resolver import RecordingSets, question, upstream_reply


def resolver(asked: list[str], added: list[object], records: list[dict[str, object]]) -> PolicyResolver:
    async def forward(query: Question) -> Answer:
        asked.append(query.name + ".")
        return upstream_reply(query, DNSRecord.question(query.name, query.type_name).reply())

    policy = parse_policy(["api.github.com:443", "github.com:443"], [("denied.example.test", "a test says no")])
    return PolicyResolver(policy, forward, RecordingSets(added), records.append,  # type: ignore[arg-type]
                          intercepted=frozenset({"api.github.com", "denied.example.test", "unlisted.example.test"}))


def ask(resolver: PolicyResolver, name: str, qtype: str = "A") -> DNSRecord:
    return DNSRecord.parse(asyncio.run(resolver.answer(question(name, qtype))))


def test_an_intercepted_name_resolves_to_the_relay_without_asking_upstream() -> None:
    asked: list[str] = []
    added: list[object] = []
    records: list[dict[str, object]] = []
    subject = resolver(asked, added, records)
    for _ in range(2):
        reply = ask(subject, "api.github.com")
        assert reply.header.rcode == RCODE.NOERROR
        assert [(rr.rtype, str(rr.rdata)) for rr in reply.rr] == [(QTYPE.A, "127.0.0.1")]
    for qtype in ("AAAA", "HTTPS", "TXT"):
        reply = ask(subject, "api.github.com", qtype)
        assert reply.header.rcode == RCODE.NOERROR and reply.rr == [], qtype
    assert asked == [] and added == [] and records == []


def test_the_policy_decides_before_the_interception() -> None:
    asked: list[str] = []
    records: list[dict[str, object]] = []
    subject = resolver(asked, [], records)
    for name in ("denied.example.test", "unlisted.example.test"):
        assert ask(subject, name).header.rcode == RCODE.REFUSED, name
    assert asked == [] and [r["domain"] for r in records] == ["denied.example.test", "unlisted.example.test"]


def test_control_a_name_that_is_not_intercepted_is_asked_upstream() -> None:
    asked: list[str] = []
    subject = resolver(asked, [], [])
    ask(subject, "github.com")
    assert asked == ["github.com."]
