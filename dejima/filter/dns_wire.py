"""DNS messages as bytes: the client's request, the replies the resolver sends, names.

The resolver decides on the wire form of a name, never on a printed one (query.py says why), so
every name here is a list of raw labels until ``ldh_name`` accepts it: letters, digits and
hyphens only, lower-cased, at most 253 characters.

``plain_request`` reads the plainest client query without dnslib: one question, class IN, labels
of letters, digits and hyphens, no compression, at most an OPT record without options. Anything
else is None and query.py reads it with dnslib, which refuses what is hostile. Either way the
reply is built here, from a ``ClientQuery``: the client's id, its question echoed as sent, our EDNS.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from typing import NamedTuple

from dnslib import QTYPE

from dejima.filter.why import EDE_OPTION

LABEL = re.compile(rb"^(?!-)[A-Za-z0-9-]{1,63}(?<!-)\Z")  # \Z: ``$`` also matches before a final newline
UPSTREAM_PAYLOAD = 1232  # the EDNS buffer size DNS Flag Day 2020 settled on
CLASS_IN = 1
TYPE_OPT = 41
NOERROR, FORMERR, SERVFAIL, NXDOMAIN, REFUSED = 0, 1, 2, 3, 5
HEADER = struct.Struct("!HHHHH")  # flags and the four counts, after the id
# Our OPT record: root name, type OPT, our buffer size, no extended flags, no options.
OPT = b"\x00\x00\x29" + struct.pack("!H", UPSTREAM_PAYLOAD) + b"\x00\x00\x00\x00\x00\x00"
MAX_NAME = 255  # octets on the wire, RFC 1035 2.3.4


class Question(NamedTuple):
    """An ordinary question: the name lower-cased, labels joined by dots, no trailing dot."""

    name: str
    qtype: int

    @property
    def type_name(self) -> str:
        return str(QTYPE.get(self.qtype, str(self.qtype)))


@dataclass(slots=True)
class ClientQuery:
    """What a reply needs from the client's query."""

    id: bytes  # the client's id, echoed
    rd: int  # recursion desired, echoed
    question: bytes  # the question section as the client sent it; b"" when there is none to echo
    edns: bool  # the client sent an OPT record: the reply carries ours
    limit: int  # the largest UDP reply the client takes


class BadName(ValueError):
    """A name that cannot be read: a pointer loop or a forward pointer, a label type we do not
    know, a name running past the message or over 255 octets."""


def read_name(data: bytes, at: int) -> tuple[list[bytes], int]:
    """The raw labels of the name at ``at`` (compression followed) and where the name ends."""
    labels: list[bytes] = []
    end, size_total = -1, 0
    while True:
        if at >= len(data):
            raise BadName("a name runs past the message")
        size = data[at]
        if size >= 0xC0:
            if at + 1 >= len(data):
                raise BadName("a name runs past the message")
            target = ((size & 0x3F) << 8) | data[at + 1]
            if target >= at:  # only backwards: no loops
                raise BadName("a compression pointer does not point back")
            if end < 0:
                end = at + 2
            at = target
            continue
        if size > 63:
            raise BadName("an unknown label type")
        if size == 0:
            return labels, end if end >= 0 else at + 1
        size_total += size + 1
        if size_total >= MAX_NAME or at + 1 + size > len(data):
            raise BadName("a name is too long or runs past the message")
        labels.append(data[at + 1:at + 1 + size])
        at += 1 + size


def ldh_name(labels: list[bytes]) -> str | None:
    """The name the labels spell when every one is letters, digits and hyphens, else None."""
    if not labels or not all(LABEL.match(label) for label in labels):
        return None
    return joined(labels)


def joined(labels: list[bytes] | tuple[bytes, ...]) -> str | None:
    """Labels already checked against LABEL as a name: lower-cased, dot-joined; None past 253 characters."""
    name = b".".join(labels).decode("ascii").lower()
    return name if len(name) <= 253 else None


def question_section(question: Question) -> bytes:
    """The question section asking ``question`` (class IN), as the resolver writes it."""
    return encode_name(question.name) + struct.pack("!HH", question.qtype, CLASS_IN)


def client_limit(payload: int) -> int:
    """The largest UDP reply a client that announced ``payload`` gets: at least 512, at most ours."""
    return max(512, min(payload, UPSTREAM_PAYLOAD))


def encode_labels(labels: list[bytes]) -> bytes:
    return b"".join(bytes((len(label),)) + label for label in labels) + b"\x00"


def encode_name(name: str) -> bytes:
    """The wire form of a checked name (letters, digits, hyphens and dots)."""
    return encode_labels(name.encode("ascii").split(b"."))


def plain_request(packet: bytes) -> tuple[ClientQuery, Question] | None:
    if len(packet) < 17 or packet[2] & 0xFE:  # qr, opcode, aa, tc: a plain query has none
        return None
    _flags, qd, an, ns, ar = HEADER.unpack_from(packet, 2)
    if qd != 1 or an or ns or ar > 1:
        return None
    at, labels = 12, []
    while True:
        size = packet[at] if at < len(packet) else 0xC0
        if size == 0:
            break
        label = packet[at + 1:at + 1 + size]
        if size > 63 or len(label) != size or not LABEL.match(label):
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
        edns, limit = True, client_limit((packet[end + 3] << 8) | packet[end + 4])
    elif len(packet) != end:
        return None
    name = joined(labels)
    if name is None:
        return None
    return ClientQuery(packet[:2], packet[2] & 1, packet[12:end], edns, limit), Question(name, qtype)


def reply(request: ClientQuery, rcode: int = NOERROR, counts: tuple[int, int, int] = (0, 0, 0), body: bytes = b"",
          ede: tuple[int, bytes] | None = None) -> bytes:
    """A reply to ``request``: its id and question, recursion available, ``body`` (the records
    of ``counts`` answer, authority and additional records), then our OPT when the client sent
    one, carrying the Extended DNS Error ``ede`` (info code, text: why.ede) when given."""
    an, ns, ar = counts
    head = request.id + HEADER.pack(0x8080 | request.rd << 8 | rcode, 1 if request.question else 0, an, ns,
                                    ar + request.edns)
    if not request.edns:
        return head + request.question + body
    if ede is None:
        return head + request.question + body + OPT
    code, text = ede
    info = struct.pack("!H", code) + text
    option = struct.pack("!HH", EDE_OPTION, len(info)) + info
    return head + request.question + body + OPT[:-2] + struct.pack("!H", len(option)) + option


def truncated(request: ClientQuery) -> bytes:
    """The reply that sends the client to TCP: no records, TC set."""
    data = bytearray(reply(request))
    data[2] |= 0x02
    return bytes(data)


def formerr(packet: bytes) -> bytes | None:
    """FORMERR for a packet that cannot be read at all, echoing its id; nothing when there is no id."""
    if len(packet) < 12 or packet[2] & 0x80:
        return None
    return packet[:2] + b"\x81\x01" + b"\x00" * 8
