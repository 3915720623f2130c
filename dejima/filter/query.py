"""What the resolver accepts from a client, and what it sends upstream in its stead.

The resolver decides on the wire form of a query, never on a printed one: a label holding a
literal dot prints like two labels, so ``exfil\\.wild.example`` would pass a ``*.wild.example``
check while the upstream sees a different name. A query is accepted only when it is an ordinary
question: opcode QUERY, exactly one question, class IN, a type from ``ORDINARY_TYPES``, and a
name whose every label is letters, digits and hyphens. The upstream then gets a query the
resolver builds itself from that question (fresh id, no client options), and an upstream reply
counts only when it answers exactly that question.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass

from dnslib import CLASS, EDNS0, OPCODE, QTYPE, DNSHeader, DNSLabel, DNSQuestion, DNSRecord

# Types an agent's tools ask for. ANY is not here (RFC 8482 deprecates it; it would hand out
# every record of an allowed name at once); neither are zone transfers or obsolete types.
ORDINARY_TYPES = frozenset({
    QTYPE.A, QTYPE.AAAA, QTYPE.CNAME, QTYPE.MX, QTYPE.TXT, QTYPE.SRV, QTYPE.NS, QTYPE.SOA,
    QTYPE.PTR, QTYPE.CAA, QTYPE.HTTPS, QTYPE.SVCB,
})
UPSTREAM_PAYLOAD = 1232  # the EDNS buffer size DNS Flag Day 2020 settled on
_LABEL = re.compile(rb"^(?!-)[A-Za-z0-9-]{1,63}(?<!-)$")


class Malformed(ValueError):
    """The packet is not an ordinary query; the message says why (it reaches the client)."""


@dataclass(frozen=True, slots=True)
class Question:
    name: str  # lower-case, labels joined by dots, no trailing dot
    qtype: int

    @property
    def type_name(self) -> str:
        return str(QTYPE.get(self.qtype, str(self.qtype)))


def wire_name(label: DNSLabel) -> str:
    """The name a DNSLabel carries on the wire, or Malformed when a label is not letters, digits
    and hyphens (a dot, a byte outside ASCII, an empty or over-long label)."""
    parts = label.label
    if not parts:
        raise Malformed("the root name is not a host name")
    for part in parts:
        if not _LABEL.match(part):
            raise Malformed(f"label {part[:80]!r} is not letters, digits and hyphens")
    name = b".".join(parts).decode("ascii").lower()
    if len(name) > 253:
        raise Malformed("a name has at most 253 characters")
    return name


def parse_query(request: DNSRecord) -> Question:
    """The one ordinary question of ``request``, or Malformed."""
    header = request.header
    if header.qr:
        raise Malformed("a response is not a query")
    if header.opcode != OPCODE.QUERY:
        raise Malformed(f"opcode {OPCODE.get(header.opcode, header.opcode)} is not answered")
    if len(request.questions) != 1:
        raise Malformed(f"a query carries exactly one question, not {len(request.questions)}")
    if request.rr or request.auth:
        raise Malformed("a query carries no answer or authority records")
    question = request.questions[0]
    if question.qclass != CLASS.IN:
        raise Malformed(f"class {CLASS.get(question.qclass, question.qclass)} is not answered")
    if question.qtype not in ORDINARY_TYPES:
        raise Malformed(f"type {QTYPE.get(question.qtype, question.qtype)} is not answered")
    return Question(wire_name(question.qname), question.qtype)


def build_upstream_query(question: Question) -> DNSRecord:
    """A query of the resolver's own making: random id, recursion desired, EDNS with our buffer
    size and nothing of the client's (no client subnet, cookies or padding)."""
    query = DNSRecord(DNSHeader(id=secrets.randbits(16), rd=1),
                      q=DNSQuestion(DNSLabel(question.name), question.qtype, CLASS.IN))
    query.add_ar(EDNS0(udp_len=UPSTREAM_PAYLOAD))
    return query


def answers_question(reply: DNSRecord, query: DNSRecord) -> bool:
    """Is ``reply`` the upstream's answer to ``query`` (id, flags and the very question)?"""
    if reply.header.id != query.header.id or not reply.header.qr or len(reply.questions) != 1:
        return False
    mine, theirs = query.questions[0], reply.questions[0]
    return (theirs.qtype == mine.qtype and theirs.qclass == mine.qclass
            and tuple(p.lower() for p in theirs.qname.label) == tuple(p.lower() for p in mine.qname.label))
