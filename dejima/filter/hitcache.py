"""Answers as the client gets them, written once: the resolver's replies and its fast path for
repeated questions.

A ``Hit`` is an answer the resolver (resolver.py) checked under one policy object: its sections
as bytes with the TTLs as stored, where those TTLs sit, and what it put into the allow sets.
``render`` writes the reply to any client that asks the same question: the client's id and
question, the TTLs aged, our OPT. The resolver renders every allowed answer this way, and keeps
the plain ones (NOERROR, nothing dropped, a TTL to keep them for) to answer repeats from bytes,
under the same policy object only.
"""

from __future__ import annotations

from dataclasses import dataclass

from dejima.filter.answer import TYPE_A, Answer, Rec, encode, parse
from dejima.filter.dns_wire import HEADER, ClientQuery, Question, question_section, reply


@dataclass(frozen=True, slots=True)
class Hit:
    policy: object  # the policy object it was checked under (replaced whole on any change)
    rcode: int
    counts: tuple[int, int, int]  # answer, authority, additional records of ``body``
    body: bytes  # the sections after the question, TTLs as stored
    ttls: tuple[int, ...]  # offset in body, stored TTL; offset, TTL; ...
    stored: float  # when the upstream answered (TTLs age from here)
    expires: float
    addresses: tuple[str, ...]  # what the answer put into the allow sets
    ports: tuple[int, ...] | None
    address_ttl: int  # the lowest TTL of those addresses, as stored


def build(policy: object, asked: str, rcode: int, answers: list[Rec], authority: list[Rec], stored: float,
          expires: float, addresses: list[str], ports: list[int] | None, ceiling: int) -> Hit:
    """The reply's template: ``answers`` and ``authority`` records with TTLs capped at ``ceiling``."""
    body, places = encode(answers + authority, asked, ceiling)
    ttls = tuple(value for place in places for value in place)
    address_ttl = min((rec.ttl for rec in answers if rec.rtype == TYPE_A), default=0)
    return Hit(policy, rcode, (len(answers), len(authority), 0), body, ttls,
               stored, expires, tuple(addresses), tuple(ports) if ports is not None else None,
               min(address_ttl, ceiling))


def render(hit: Hit, request: ClientQuery, age: int) -> bytes:
    """The reply to ``request`` from ``hit``, its TTLs aged ``age`` seconds."""
    body = hit.body
    if age > 0 and hit.ttls:
        aged = bytearray(body)
        ttls = hit.ttls
        for at in range(0, len(ttls), 2):
            offset = ttls[at]
            aged[offset:offset + 4] = max(0, ttls[at + 1] - age).to_bytes(4, "big")
        body = bytes(aged)
    return reply(request, hit.rcode, hit.counts, body)


def answer_of(hit: Hit, question: Question) -> Answer | None:
    """The records of ``hit`` (TTLs as stored) read back as an upstream answer, for the resolver
    to check again under another policy."""
    head = b"\x00\x00" + HEADER.pack(0x8180 | hit.rcode, 1, *hit.counts)
    return parse(head + question_section(question) + hit.body, question)
