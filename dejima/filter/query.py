"""What the resolver accepts from a client, and what it sends upstream in its stead.

The resolver decides on the wire form of a query, never on a printed one: a label holding a
literal dot prints like two labels, so ``exfil\\.wild.example`` would pass a ``*.wild.example``
check while the upstream sees a different name. A query is accepted only when it is an ordinary
question: opcode QUERY, exactly one question, class IN, a type from ``ORDINARY_TYPES``, and a
name whose every label is letters, digits and hyphens. The upstream then gets a query the
resolver builds itself from that question (fresh id, no client options), and an upstream reply
counts only when it answers exactly that question (dns_upstream.py).

The plainest queries are read from bytes (dns_wire.plain_request); the rest are read here with
dnslib, which also names what is wrong with a query that is refused.
"""

from __future__ import annotations

import secrets
import struct

from dnslib import CLASS, OPCODE, QTYPE, DNSBuffer, DNSRecord

from dejima.filter.dns_wire import (
    LABEL,
    OPT,
    ClientQuery,
    Question,
    client_limit,
    joined,
    plain_request,
    question_section,
)

# Types an agent's tools ask for. ANY is not here (RFC 8482 deprecates it; it would hand out
# every record of an allowed name at once); neither are zone transfers or obsolete types.
ORDINARY_TYPES = frozenset({
    QTYPE.A, QTYPE.AAAA, QTYPE.CNAME, QTYPE.MX, QTYPE.TXT, QTYPE.SRV, QTYPE.NS, QTYPE.SOA,
    QTYPE.PTR, QTYPE.CAA, QTYPE.HTTPS, QTYPE.SVCB,
})


class Malformed(ValueError):
    """The packet is not an ordinary query; the message says why (it reaches the client)."""


def checked_name(labels: list[bytes] | tuple[bytes, ...]) -> str:
    """The name raw labels spell, or Malformed when a label is not letters, digits and hyphens
    (a dot, a byte outside ASCII, an empty or over-long label)."""
    if not labels:
        raise Malformed("the root name is not a host name")
    for part in labels:
        if not LABEL.match(part):
            raise Malformed(f"label {part[:80]!r} is not letters, digits and hyphens")
    name = joined(labels)
    if name is None:
        raise Malformed("a name has at most 253 characters")
    return name


def read(packet: bytes) -> tuple[ClientQuery, Question | Malformed] | None:
    """The client's request and its one ordinary question, or Malformed saying why it is not;
    None when the packet is not a DNS message at all."""
    plain = plain_request(packet)
    if plain is not None and plain[1].qtype in ORDINARY_TYPES:
        return plain
    try:
        record = DNSRecord.parse(packet)
    except Exception:  # noqa: BLE001 - dnslib raises many kinds on garbage; all mean "malformed"
        return None
    request = _request(record)
    try:
        return request, parse_query(record)
    except Malformed as exc:
        return request, exc


def printable(packet: bytes) -> str:
    """A name for the record of a malformed query: the dnslib text of its first question, if any."""
    try:
        questions = DNSRecord.parse(packet).questions
    except Exception:  # noqa: BLE001 - see read
        return ""
    return str(questions[0].qname).rstrip(".")[:253] if questions else ""


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
    return Question(checked_name(question.qname.label), question.qtype)


def _request(record: DNSRecord) -> ClientQuery:
    """What a reply to a query read by dnslib echoes: its id, rd, first question and EDNS."""
    section = b""
    if record.questions:
        try:
            buffer = DNSBuffer()
            record.questions[0].pack(buffer)
            section = bytes(buffer.data)
        except Exception:  # noqa: BLE001 - a question dnslib cannot write back is not echoed
            section = b""
    options = [rr for rr in record.ar if rr.rtype == QTYPE.OPT]
    limit = client_limit(int(options[0].rclass)) if options else 512
    return ClientQuery(struct.pack("!H", record.header.id), record.header.rd, section, bool(options), limit)


def upstream_query(question: Question) -> tuple[int, bytes, bytes]:
    """A query of the resolver's own making: (id, packet, question section). Random id,
    recursion desired, EDNS with our buffer size and nothing of the client's (no client subnet,
    cookies or padding)."""
    qid = secrets.randbits(16)
    section = question_section(question)
    return qid, struct.pack("!HHHHHH", qid, 0x0100, 1, 0, 0, 1) + section + OPT, section
