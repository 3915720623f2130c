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

from dejima.filter.answer import Rec, encode
from dejima.filter.wire import Request, reply


@dataclass(frozen=True, slots=True)
class Hit:
    policy: object  # the policy object it was checked under (replaced whole on any change)
    rcode: int
    counts: tuple[int, int, int]  # answer, authority, additional records of ``body``
    body: bytes  # the sections after the question, TTLs as stored
    ttls: tuple[tuple[int, int], ...]  # (offset in body, stored TTL)
    stored: float  # when the upstream answered (TTLs age from here)
    expires: float
    addresses: tuple[str, ...]  # what the answer put into the allow sets
    ports: tuple[int, ...] | None
    address_ttl: int  # the lowest TTL of those addresses, as stored


def build(policy: object, asked: str, rcode: int, answers: list[Rec], authority: list[Rec], stored: float,
          expires: float, addresses: list[str], ports: list[int] | None, ceiling: int) -> Hit:
    """The reply's template: ``answers`` and ``authority`` records with TTLs capped at ``ceiling``."""
    body, ttls = encode(answers + authority, asked, ceiling)
    address_ttl = min((rec.ttl for rec in answers if rec.rtype == 1), default=0)
    return Hit(policy, rcode, (len(answers), len(authority), 0), body, ttls,
               stored, expires, tuple(addresses), tuple(ports) if ports is not None else None,
               min(address_ttl, ceiling))


def render(hit: Hit, request: Request, age: int) -> bytes:
    """The reply to ``request`` from ``hit``, its TTLs aged ``age`` seconds."""
    body = hit.body
    if age > 0 and hit.ttls:
        aged = bytearray(body)
        for offset, ttl in hit.ttls:
            aged[offset:offset + 4] = max(0, ttl - age).to_bytes(4, "big")
        body = bytes(aged)
    return reply(request, hit.rcode, hit.counts, body)
