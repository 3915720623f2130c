"""Upstream answers read from bytes, and the chain of records that answers a question.

``parse`` reads a reply the upstream socket already matched to our question (dns_upstream.py) into
small tuples: each record's owner (a checked name), type, TTL and rdata with every name in it
written out uncompressed, so a record can be written back anywhere. Records the resolver never
passes on are not kept: in the answer section only CNAMEs and the asked type, in the authority
section only SOA (a negative answer's TTL), nothing of the additional section. A reply that
cannot be read is None and counts as no reply.

``chain`` keeps only what answers the question: the CNAME chain that starts at the asked name,
then the records of the asked type at its end.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from dejima.filter.dns_wire import CLASS_IN, HEADER, BadName, Question, encode_labels, encode_name, ldh_name, read_name
from dejima.filter.query import Malformed, checked_name

TYPE_A, TYPE_NS, TYPE_CNAME, TYPE_SOA, TYPE_PTR, TYPE_MX, TYPE_SRV, TYPE_AAAA = 1, 2, 5, 6, 12, 15, 33, 28
# Where the one name inside the rdata of these types starts (RFC 1035 lets it be compressed; SRV
# must not be, but some servers do). The rdata of other kept types holds no compressed name.
NAME_AT = {TYPE_CNAME: 0, TYPE_NS: 0, TYPE_PTR: 0, TYPE_MX: 2, TYPE_SRV: 6}
RECORD = struct.Struct("!HHIH")  # type, class, TTL, rdata length
MAX_CHAIN = 12  # CNAME hops followed inside one answer


class DnsUpstreamError(Exception):
    """No upstream gave a usable answer (timeouts, refusals, mismatched replies)."""


class Rec(NamedTuple):
    owner: str  # lower-case, letters, digits and hyphens
    rtype: int
    ttl: int
    rdata: bytes  # names written out, uncompressed


class Answer(NamedTuple):
    rcode: int
    records: tuple[Rec, ...]  # the answer section's, then the authority section's SOA records
    ttl: int | None  # the lowest TTL of the answer section (None: it is empty)
    truncated: bool


def parse(data: bytes, question: Question, at: int | None = None) -> Answer | None:
    """The answer in ``data``, whose records start at ``at`` (after the one question; found
    when not given)."""
    if len(data) < 12:
        return None
    flags, _qd, an, ns, _ar = HEADER.unpack_from(data, 2)
    records: list[Rec] = []
    lowest: int | None = None
    try:
        if at is None:
            at = read_name(data, 12)[1] + 4
        for index in range(an + ns):
            labels, at = read_name(data, at)
            if at + 10 > len(data):
                return None
            rtype, rclass, ttl, size = RECORD.unpack_from(data, at)
            start, at = at + 10, at + 10 + size
            if at > len(data):
                return None
            if index < an:
                lowest = ttl if lowest is None else min(lowest, ttl)
                wanted = rtype in (TYPE_CNAME, question.qtype)
            else:
                wanted = rtype == TYPE_SOA
            owner = ldh_name(labels) if wanted and rclass == CLASS_IN else None
            if owner is not None:  # a record for a name no chain can reach is dropped
                records.append(Rec(question.name if owner == question.name else owner, rtype, ttl,
                                   _rdata(data, start, at, rtype)))
    except BadName:
        return None
    return Answer(flags & 0xF, tuple(records), lowest, bool(flags & 0x0200))


def _rdata(data: bytes, start: int, end: int, rtype: int) -> bytes:
    if rtype == TYPE_A and end - start != 4:
        raise BadName("an A record of other than four bytes")
    if rtype == TYPE_SOA:
        primary, at = read_name(data, start)
        mailbox, at = read_name(data, at)
        if at + 20 != end:
            raise BadName("an SOA record of the wrong length")
        return encode_labels(primary) + encode_labels(mailbox) + data[at:end]
    skip = NAME_AT.get(rtype)
    if skip is None:
        return data[start:end]
    labels, at = read_name(data, start + skip)
    if at != end:
        raise BadName("a record's name does not end its rdata")
    return data[start:start + skip] + encode_labels(labels)


def target(alias: Rec) -> str:
    """The checked name a CNAME points at (Malformed when it is not letters, digits, hyphens)."""
    labels, _end = read_name(alias.rdata, 0)
    return checked_name(labels)


def chain(question: Question, records: tuple[Rec, ...]) -> tuple[list[str], list[Rec]]:
    """The CNAME chain that starts at the asked name, and the records that answer along it.

    Records for other owners are dropped: only what answers the question reaches the client and
    the allow sets."""
    by_owner: dict[str, list[Rec]] = {}
    for rec in records:
        if rec.rtype != TYPE_SOA:
            by_owner.setdefault(rec.owner, []).append(rec)
    names, kept = [question.name], []
    for _ in range(MAX_CHAIN):
        owned = by_owner.get(names[-1], [])
        alias = next((rec for rec in owned if rec.rtype == TYPE_CNAME), None)
        if alias is None or question.qtype == TYPE_CNAME:
            kept += [rec for rec in owned if rec.rtype == question.qtype]
            if alias is not None:
                names.append(target(alias))
            return names, kept
        kept.append(alias)
        name = target(alias)
        if name in names:
            raise Malformed(f"CNAME loop at {name}")
        names.append(name)
    raise Malformed(f"CNAME chain longer than {MAX_CHAIN}")


def address(rec: Rec) -> str:
    return "%d.%d.%d.%d" % tuple(rec.rdata)


def encode(records: list[Rec], asked: str, ceiling: int) -> tuple[bytes, tuple[tuple[int, int], ...]]:
    """The records as a reply's sections (the asked name as a pointer to the question), TTLs
    capped at ``ceiling``; and where each TTL sits, with its value."""
    body = bytearray()
    ttls = []
    for rec in records:
        body += b"\xc0\x0c" if rec.owner == asked else encode_name(rec.owner)
        ttl = min(rec.ttl, ceiling)
        ttls.append((len(body) + 4, ttl))
        body += RECORD.pack(rec.rtype, 1, ttl, len(rec.rdata)) + rec.rdata
    return bytes(body), tuple(ttls)
