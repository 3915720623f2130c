"""The resolver's reading of a client's query (dejima.filter.query.read: wire.plain_request for the
plainest, then dnslib plus parse_query) against dnslib's own parser (DNSRecord.parse), over
generated packets: valid queries, 0x20 case, EDNS OPT records, odd classes and types, QDCOUNT other
than 1, counts that do not match the sections, truncated packets, bad label lengths, compression
pointers (backward, forward, looping), trailing bytes.

Where dnslib cannot parse a packet, the resolver must refuse it (no question, or Malformed). Where
both read one, they must agree on the id, the name (case-insensitively), the type and the class
(IN: the only one answered), recursion desired and EDNS. And a name the resolver accepts is letters,
digits and hyphens, label by label, as query.py promises.

Reproducible and bounded: hypothesis derandomised, no example database, a fixed number of examples.
"""

from __future__ import annotations

import re
import struct
from collections import Counter
from collections.abc import Callable

import pytest
from dnslib import QTYPE, DNSRecord
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from dejima.filter import query
from dejima.filter.dns_wire import ClientQuery, Question
from dejima.filter.query import ORDINARY_TYPES, Malformed

EXAMPLES = 800  # generated packets (about 3 s)
LDH = re.compile(rb"(?!-)[A-Za-z0-9-]{1,63}(?<!-)")


def profile(examples: int, shrink: bool = True) -> settings:
    phases = [Phase.explicit, Phase.generate] + ([Phase.shrink] if shrink else [])
    return settings(max_examples=examples, derandomize=True, database=None, deadline=None, phases=phases,
                    suppress_health_check=list(HealthCheck), print_blob=False)


class Divergence(AssertionError):
    """The resolver and dnslib read one packet differently (or the resolver reads what dnslib cannot)."""


Reader = Callable[[bytes], tuple[ClientQuery, Question | Malformed] | None]


def compare(packet: bytes, read: Reader = query.read) -> str:
    """"agreed", "refused" (both), "stricter" (dnslib reads it, the resolver refuses), or Divergence."""
    try:
        record: DNSRecord | None = DNSRecord.parse(packet)
    except Exception:  # noqa: BLE001 - dnslib raises many kinds on garbage
        record = None
    found = read(packet)
    request, question = found if found is not None else (None, None)
    if request is None or not isinstance(question, Question):
        return "refused" if record is None else "stricter"
    if record is None:
        raise Divergence(f"the resolver reads {question} from a packet dnslib cannot parse: {packet!r}")
    if not all(LDH.fullmatch(label) for label in question.name.encode("ascii").split(b".")):
        raise Divergence(f"the resolver accepts a name that is not letters, digits and hyphens: {question.name!r}")
    if len(record.questions) != 1:
        raise Divergence(f"the resolver reads one question where dnslib reads {len(record.questions)}: {packet!r}")
    (asked,) = record.questions
    options = [rr for rr in record.ar if rr.rtype == QTYPE.OPT]
    theirs = (struct.pack("!H", record.header.id), b".".join(asked.qname.label).lower(), asked.qtype, asked.qclass,
              record.header.rd, bool(options))
    ours = (request.id, question.name.encode("ascii"), question.qtype, 1, request.rd, request.edns)
    if ours != theirs:
        raise Divergence(f"the resolver and dnslib read {packet!r} differently:\n  dejima {ours}\n  dnslib {theirs}")
    return "agreed"


# --- generated packets --------------------------------------------------------------------------

LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
good_labels = st.one_of(
    st.text(alphabet=LETTERS, min_size=1, max_size=12).map(str.encode),
    st.sampled_from([b"example", b"GitHub", b"cOm", b"a-b", b"x1", b"a" * 63, b"xn--bcher-kva"]),
)
bad_labels = st.sampled_from([b"", b"a.b", b"a\n", b"com\n", b"\x00", b"-a", b"a-", b"a" * 64, b"\xc3\xa9", b"a b",
                              b"_srv", b"*", b"a\\b", b"\x7f"])
QTYPES = [int(t) for t in ORDINARY_TYPES]
odd_qtypes = st.sampled_from([0, 41, 252, 255, 65535, 99, 64, 65])
FAULTS = ["label", "flags", "qtype", "qclass", "qdcount", "counts", "pointer", "records", "opt", "truncate", "trailing",
          "long"]


def _labels(labels: list[bytes]) -> bytes:
    return b"".join(bytes((len(label) & 0xFF,)) + label for label in labels) + b"\x00"


@st.composite
def packets(draw: st.DrawFn) -> bytes:
    faults: set[str] = draw(st.sets(st.sampled_from(FAULTS), max_size=2))
    labels = draw(st.lists(good_labels, min_size=1, max_size=4))
    if "label" in faults:
        labels.insert(draw(st.integers(0, len(labels))), draw(bad_labels))
    if "long" in faults:  # around the 255-octet wire limit and the 253-character name limit
        labels = [b"a" * 63] * 3 + [b"b" * draw(st.sampled_from([58, 59, 60, 61, 62, 63]))] + labels[:1]
    name = _labels(labels)
    if "pointer" in faults:  # compression: back into the header, onto itself, forward, past the end
        target = draw(st.sampled_from([0, 2, 12, 13, 30, 0x3FFF]))
        name = draw(st.sampled_from([b"", _labels(labels[:1])[:-1]])) + struct.pack("!H", 0xC000 | target)
    qtype = draw(odd_qtypes) if "qtype" in faults else draw(st.sampled_from(QTYPES))
    qclass = draw(st.sampled_from([3, 4, 254, 255, 0])) if "qclass" in faults else 1
    question = name + struct.pack("!HH", qtype, qclass)
    questions = [question] * (draw(st.sampled_from([0, 2])) if "qdcount" in faults else 1)
    answers = []
    if "records" in faults:  # an answer or authority record in a query
        answers = [_labels([b"x"]) + struct.pack("!HHIH", 1, 1, 60, 4) + b"\x01\x02\x03\x04"]
    additional = []
    if "opt" in faults or draw(st.booleans()):
        payload = draw(st.sampled_from([512, 1232, 4096, 0, 65535]))
        option = b""
        if "opt" in faults:
            option = draw(st.sampled_from([b"\x00\x0a\x00\x08" + b"c" * 8, b"\x00\x0a\x00\x09" + b"c" * 8,
                                           b"\x00\x0c\x00\x00", b"\x00"]))
        owner = draw(st.sampled_from([b"\x00", b"\x01a\x00"])) if "opt" in faults else b"\x00"
        additional = [owner + struct.pack("!HHIH", 41, payload, 0, len(option)) + option]
        if "opt" in faults and draw(st.booleans()):
            additional *= 2
    rd = draw(st.sampled_from([0x0100, 0x0000]))
    flags = rd | (draw(st.sampled_from([0x8000, 0x0800, 0x2000, 0x0400, 0x0200, 0x0020, 0x0010, 0x000F]))
                  if "flags" in faults else 0)
    counts = [len(questions), len(answers), 0, len(additional)]
    if "counts" in faults:
        which = draw(st.integers(0, 3))
        counts[which] = draw(st.sampled_from([0, 1, 2, 255, 65535]))
    packet = struct.pack("!HHHHHH", draw(st.integers(0, 0xFFFF)), flags, *counts)
    packet += b"".join(questions) + b"".join(answers) + b"".join(additional)
    if "truncate" in faults:
        packet = packet[:draw(st.integers(0, max(len(packet) - 1, 0)))]
    if "trailing" in faults:
        packet += draw(st.binary(min_size=1, max_size=6))
    return packet


def _packet(labels: list[bytes], qtype: int = 1, tail: bytes = b"", counts: tuple[int, int, int, int] = (1, 0, 0, 0),
            flags: int = 0x0100) -> bytes:
    return struct.pack("!HHHHHH", 0x1234, flags, *counts) + _labels(labels) + struct.pack("!HH", qtype, 1) + tail


OPT = b"\x00\x00\x29\x04\xd0\x00\x00\x00\x00\x00\x00"
CASES = [
    _packet([b"api", b"GitHub", b"com"]),  # 0x20 case
    _packet([b"example", b"com"], 28, OPT, (1, 0, 0, 1)),
    _packet([b"abc\n", b"example", b"com"]),  # a label ending in a line feed
    _packet([b"a.b", b"example"]),
    _packet([b"example", b"com"], 1, OPT[:-3], (1, 0, 0, 1)),  # a truncated OPT
    _packet([b"example", b"com"], 1, b"", (1, 0, 0, 1)),  # an OPT counted, not sent
    _packet([b"example", b"com"], 1, b"\x00", (1, 0, 0, 0)),  # a trailing byte
    struct.pack("!HHHHHH", 1, 0x0100, 1, 0, 0, 0) + b"\xc0\x0c\x00\x01\x00\x01",  # a pointer to itself
    _packet([b"example", b"com"], 255),
    _packet([b"example", b"com"], 1, b"", (2, 0, 0, 0)),
]


def _run(read: Reader, examples: int, shrink: bool = True, cases: bool = True) -> Counter[str]:
    seen: Counter[str] = Counter()

    @profile(examples, shrink)
    @given(packets())
    def check(packet: bytes) -> None:
        seen[compare(packet, read)] += 1

    for case in CASES if cases else []:
        check = example(case)(check)
    check()
    return seen


def test_the_resolver_refuses_what_dnslib_cannot_parse_and_reads_the_rest_as_dnslib_does() -> None:
    seen = _run(query.read, EXAMPLES)
    # (Margins: hypothesis also draws constants from the modules loaded.)
    assert seen["agreed"] >= EXAMPLES // 5 and seen["refused"] >= EXAMPLES // 10 and seen["stricter"] >= 50, seen


@pytest.mark.parametrize("packet,dnslib_reads,dejima_reads", [
    (CASES[0], True, True), (CASES[1], True, True), (CASES[2], True, False), (CASES[3], True, False),
    (CASES[4], False, False), (CASES[5], False, False), (CASES[7], False, False), (CASES[8], True, False),
    (CASES[9], False, False),
])
def test_known_packets(packet: bytes, dnslib_reads: bool, dejima_reads: bool) -> None:
    try:
        DNSRecord.parse(packet)
        parsed = True
    except Exception:  # noqa: BLE001 - see compare
        parsed = False
    found = query.read(packet)
    assert (parsed, found is not None and isinstance(found[1], Question)) == (dnslib_reads, dejima_reads)
    compare(packet)


# --- controls: the comparison catches a reader that is too lenient or reads differently ------

def _sections_ignored(packet: bytes) -> tuple[ClientQuery, Question | Malformed] | None:
    """The resolver, but reading the question alone: the other counts zeroed, what follows cut."""
    found = query.read(packet)
    if found is None or not isinstance(found[1], Malformed) or len(packet) < 12:
        return found
    end = 12
    while end < len(packet) and packet[end] and packet[end] < 64:
        end += 1 + packet[end]
    return query.read(packet[:4] + b"\x00\x01\x00\x00\x00\x00\x00\x00" + packet[12:end + 5])


def _id_swapped(packet: bytes) -> tuple[ClientQuery, Question | Malformed] | None:
    found = query.read(packet)
    if found is not None and found[0].id[0] != found[0].id[1]:
        found[0].id = found[0].id[::-1]
    return found


@pytest.mark.parametrize("read", [_sections_ignored, _id_swapped])
def test_control_a_diverging_reader_is_caught(read: Reader) -> None:
    with pytest.raises(Divergence):
        _run(read, 300, shrink=False, cases=False)  # the generated packets alone catch it
