"""Repeated questions answered from bytes: the resolver's fast path for cache hits.

A hit is an allowed answer the full path (resolver.py) already built and checked under one
policy object: the packed answer section, where its TTLs sit, and what it put into the sets.
``plain_question`` reads a client packet without dnslib and accepts only the plainest query
(one question, class IN, labels of letters, digits and hyphens, no compression, at most an OPT
record without options); anything else is None and takes the full path, which refuses what is
hostile exactly as before. ``render`` patches the client's id, question and the aged TTLs in.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from dnslib import DNSRecord

from dejima.filter.query import _LABEL, UPSTREAM_PAYLOAD, Question

# Our OPT record: root name, type OPT, our buffer size, no extended flags, no options.
OPT = b"\x00\x00\x29" + struct.pack("!H", UPSTREAM_PAYLOAD) + b"\x00\x00\x00\x00\x00\x00"
_FLAGS = struct.Struct("!HHHHH")  # flags and the four counts
_TTL = struct.Struct("!I")


@dataclass(frozen=True, slots=True)
class Plain:
    """A plain query: its question (lower-cased), where the question ends, the client's limit."""

    key: tuple[str, int]
    end: int
    edns: bool
    limit: int
    rd: int


@dataclass(frozen=True, slots=True)
class Hit:
    policy: object  # the policy object it was checked under (replaced whole on any change)
    counts: tuple[int, int, int]  # answer, authority, additional records of ``body``
    body: bytes  # the sections after the question, TTLs as stored
    ttls: tuple[tuple[int, int], ...]  # (offset in body, stored TTL)
    stored: float  # when the upstream answered (TTLs age from here)
    expires: float
    addresses: tuple[str, ...]  # what the answer put into the allow sets
    ports: tuple[int, ...] | None
    address_ttl: int  # the lowest TTL of those addresses, as stored


def plain_question(packet: bytes) -> Plain | None:
    if len(packet) < 17 or packet[2] & 0xFE:  # qr, opcode, aa, tc: a plain query has none
        return None
    _flags, qd, an, ns, ar = _FLAGS.unpack_from(packet, 2)
    if qd != 1 or an or ns or ar > 1:
        return None
    at, labels = 12, []
    while True:
        size = packet[at] if at < len(packet) else 0xC0
        if size == 0:
            break
        label = packet[at + 1:at + 1 + size]
        if size > 63 or len(label) != size or not _LABEL.match(label):
            return None
        labels.append(label)
        at += 1 + size
    end = at + 5
    if not labels or end > len(packet) or packet[end - 2:end] != b"\x00\x01":  # class IN
        return None
    qtype = (packet[end - 4] << 8) | packet[end - 3]
    edns, limit = False, 512
    if ar:
        if packet[end:end + 3] != b"\x00\x00\x29" or len(packet) != end + 11 or packet[end + 9:end + 11] != b"\0\0":
            return None  # an OPT with options, or something else: the full path decides
        edns, limit = True, max(512, min((packet[end + 3] << 8) | packet[end + 4], UPSTREAM_PAYLOAD))
    elif len(packet) != end:
        return None
    name = b".".join(labels).decode("ascii").lower()
    return Plain((name, qtype), end, edns, limit, packet[2] & 1) if len(name) <= 253 else None


def build(policy: object, question: Question, reply: DNSRecord, stored: float, expires: float,
          addresses: list[str], ports: list[int] | None, address_ttl: int) -> Hit:
    """A hit from the full path's reply (its records carrying TTLs as stored, no OPT)."""
    packed = reply.pack()
    qlen = sum(len(label) + 1 for label in question.name.split(".")) + 5
    body = packed[12 + qlen:]
    _flags, _qd, an, ns, ar = _FLAGS.unpack_from(packed, 2)
    return Hit(policy, (an, ns, ar), body, _ttl_offsets(body, an + ns + ar), stored, expires,
               tuple(addresses), tuple(ports) if ports is not None else None, address_ttl)


def _ttl_offsets(body: bytes, count: int) -> tuple[tuple[int, int], ...]:
    at, found = 0, []
    for _ in range(count):
        while body[at] and body[at] < 0xC0:  # labels, then the root or a pointer
            at += 1 + body[at]
        at += 2 if body[at] >= 0xC0 else 1
        found.append((at + 4, _TTL.unpack_from(body, at + 4)[0]))
        at += 10 + struct.unpack_from("!H", body, at + 8)[0]
    return tuple(found)


def render(hit: Hit, packet: bytes, plain: Plain, age: int) -> bytes | None:
    """The reply to ``packet`` from ``hit`` aged ``age`` seconds; None when it would not fit."""
    body = bytearray(hit.body)
    if age:
        for offset, ttl in hit.ttls:
            _TTL.pack_into(body, offset, max(0, ttl - age))
    an, ns, ar = hit.counts
    head = packet[:2] + _FLAGS.pack(0x8080 | plain.rd << 8, 1, an, ns, ar + plain.edns)
    reply = head + packet[12:plain.end] + body + (OPT if plain.edns else b"")
    return reply if len(reply) <= plain.limit else None

