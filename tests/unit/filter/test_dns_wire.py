"""The resolver's bytes-level reading and writing of DNS messages (dns_wire.py, answer.py, hitcache.py),
checked against dnslib, which writes and reads the same messages independently."""

from __future__ import annotations

import struct

import pytest
from dnslib import CNAME, EDNS0, MX, QTYPE, RCODE, RR, SOA, SRV, TXT, A, DNSHeader, DNSQuestion, DNSRecord

from dejima.filter import answer, dns_wire, hitcache, query, why
from dejima.filter.answer import Rec
from dejima.filter.dns_wire import BadName, Question
from dejima.filter.query import Malformed


def upstream(name: str, qtype: str, *records: RR, auth: tuple[RR, ...] = (), rcode: int = 0) -> bytes:
    reply = DNSRecord(DNSHeader(id=7, qr=1, ra=1, rcode=rcode), q=DNSQuestion(name, getattr(QTYPE, qtype)))
    for rr in records:
        reply.add_answer(rr)
    for rr in auth:
        reply.add_auth(rr)
    return bytes(reply.pack())  # dnslib compresses every name it has written before


def test_a_compressed_answer_is_read_as_dnslib_reads_it() -> None:
    data = upstream("www.example.test", "A",
                    RR("www.example.test", QTYPE.CNAME, rdata=CNAME("edge.example.test"), ttl=60),
                    RR("edge.example.test", QTYPE.A, rdata=A("203.0.113.9"), ttl=30),
                    RR("www.example.test", QTYPE.TXT, rdata=TXT("not asked"), ttl=30))
    found = answer.parse(data, Question("www.example.test", QTYPE.A))
    assert found is not None and found.rcode == 0 and found.ttl == 30 and not found.truncated
    cname, address = found.records  # the TXT record is not what was asked: not kept
    assert (cname.owner, cname.rtype, answer.target(cname)) == ("www.example.test", QTYPE.CNAME, "edge.example.test")
    assert (address.owner, answer.address(address)) == ("edge.example.test", "203.0.113.9")
    assert answer.chain(Question("www.example.test", QTYPE.A), found.records) == (
        ["www.example.test", "edge.example.test"], [cname, address])


@pytest.mark.parametrize(("qtype", "rdata", "text"), [
    ("MX", MX("mail.example.test", 10), "10 mail.example.test."),
    ("SRV", SRV(1, 2, 443, "svc.example.test"), "1 2 443 svc.example.test."),
])
def test_names_inside_rdata_are_written_out_uncompressed(qtype: str, rdata: object, text: str) -> None:
    data = upstream("example.test", qtype, RR("example.test", getattr(QTYPE, qtype), rdata=rdata, ttl=60))
    found = answer.parse(data, Question("example.test", getattr(QTYPE, qtype)))
    assert found is not None and b"\xc0" not in found.records[0].rdata
    body, _ttls = answer.encode(list(found.records), "example.test", 3600)
    section = dns_wire.encode_name("example.test") + struct.pack("!HH", getattr(QTYPE, qtype), 1)
    request = dns_wire.ClientQuery(b"\x12\x34", 1, section, False, 512)
    assert str(DNSRecord.parse(dns_wire.reply(request, 0, (1, 0, 0), body)).rr[0].rdata) == text


def test_a_negative_answer_keeps_its_soa() -> None:
    soa = RR("example.test", QTYPE.SOA, rdata=SOA("ns.example.test", "admin.example.test", (1, 2, 3, 4, 5)), ttl=90)
    data = upstream("nothing.example.test", "A", auth=(soa,), rcode=RCODE.NXDOMAIN)
    found = answer.parse(data, Question("nothing.example.test", QTYPE.A))
    assert found is not None and found.rcode == RCODE.NXDOMAIN and found.ttl is None
    (kept,) = found.records
    question = dns_wire.encode_name("nothing.example.test") + b"\x00\x01\x00\x01"
    request = dns_wire.ClientQuery(b"\x00\x01", 1, question, False, 512)
    body, _ttls = answer.encode([kept], "nothing.example.test", 3600)
    assert DNSRecord.parse(dns_wire.reply(request, RCODE.NXDOMAIN, (0, 1, 0), body)).auth[0].rdata == soa.rdata


def records_after_question(records: bytes, count: int = 1) -> bytes:
    question = dns_wire.encode_name("a.example.test") + b"\x00\x01\x00\x01"
    return struct.pack("!HHHHHH", 7, 0x8180, 1, count, 0, 0) + question + records


@pytest.mark.parametrize(("records", "why"), [
    (b"\xc0\x1f" + struct.pack("!HHIH", 1, 1, 60, 4) + b"\x01\x02\x03\x04", "a pointer forward"),
    (b"\xc0\x20\xc0\x1e" + struct.pack("!HHIH", 1, 1, 60, 4) + b"\x01\x02\x03\x04", "a pointer loop"),
    (b"\xc0\x0c" + struct.pack("!HHIH", 1, 1, 60, 4) + b"\x01\x02\x03", "a record past the end"),
    (b"\xc0\x0c" + struct.pack("!HHIH", 1, 1, 60, 5) + b"\x01\x02\x03\x04\x05", "an A record of five bytes"),
    (b"\x7f" + b"x" * 20, "an unknown label type"),
    (b"".join(b"\x3f" + b"a" * 63 for _ in range(5)) + b"\x00" + struct.pack("!HHIH", 1, 1, 60, 4)
     + b"\x01\x02\x03\x04", "a name over 255 octets"),
])
def test_an_answer_that_cannot_be_read_counts_as_no_answer(records: bytes, why: str) -> None:
    assert answer.parse(records_after_question(records), Question("a.example.test", 1)) is None, why


def test_records_of_owners_no_chain_can_reach_are_dropped() -> None:
    dotted = b"\x05a.b.c\x04test\x00"  # a label holding a dot
    data = records_after_question(dotted + struct.pack("!HHIH", 1, 1, 60, 4) + b"\x01\x02\x03\x04")
    found = answer.parse(data, Question("a.example.test", 1))
    assert found is not None and found.records == () and found.ttl == 60


def test_a_cname_to_a_name_that_is_not_ldh_is_malformed() -> None:
    rec = Rec("a.example.test", QTYPE.CNAME, 60, b"\x05x.y.z\x04test\x00")
    with pytest.raises(Malformed):
        answer.chain(Question("a.example.test", QTYPE.A), (rec,))


def test_read_name_refuses_loops_and_forward_pointers() -> None:
    with pytest.raises(BadName):
        dns_wire.read_name(b"\xc0\x00", 0)
    assert dns_wire.read_name(b"\x01a\x00\x01b\xc0\x00", 3) == ([b"b", b"a"], 7)


@pytest.mark.parametrize(("packet", "plain"), [
    (bytes(DNSRecord.question("Web.Example.test", "A").pack()), True),
    (bytes(DNSRecord(DNSHeader(id=1, rd=1), q=DNSQuestion("web.example.test"),
                     ar=[EDNS0(udp_len=4096)]).pack()), True),
    (b"\x00\x01\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x03web\xc0\x0c\x00\x01\x00\x01", False),  # compressed
    (b"\x00\x01\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x05we.bx\x00\x00\x01\x00\x01", False),  # a dot in a label
    (b"\x00\x01\x09\x00\x00\x01\x00\x00\x00\x00\x00\x00\x03web\x00\x00\x01\x00\x01", False),  # opcode 1
])
def test_plain_requests_are_only_the_plainest_queries(packet: bytes, plain: bool) -> None:
    found = dns_wire.plain_request(packet)
    assert (found is not None) == plain
    if found is not None:
        request, question = found
        assert question.name == "web.example.test" and request.question == packet[12:12 + len(request.question)]


def test_a_refusal_carries_the_reason_only_to_edns_clients() -> None:
    packet = bytes(DNSRecord(DNSHeader(id=9, rd=1), q=DNSQuestion("x.test"), ar=[EDNS0(udp_len=4096)]).pack())
    found = query.read(packet)
    assert found is not None
    request, _question = found
    ede = why.ede(why.NOT_ALLOWED, "x.test is not on the allow list")
    refused = DNSRecord.parse(dns_wire.reply(request, RCODE.REFUSED, ede=ede))
    assert refused.header.rcode == RCODE.REFUSED and refused.header.id == 9 and str(refused.q.qname) == "x.test."
    (opt,) = refused.ar
    assert opt.rdata[0].code == 15
    assert opt.rdata[0].data == b"\x00\x12dejima: not-allowed: x.test is not on the allow list"
    request.edns = False
    assert DNSRecord.parse(dns_wire.reply(request, RCODE.REFUSED, ede=ede)).ar == []


def test_a_refusal_reason_reaches_the_wire_as_printable_ascii_only() -> None:
    """A deny reason is the user's text (settings, manifests): control characters, non-ASCII and a
    length past the limit are escaped and cut before they reach any client."""
    code, text = why.ede(why.DENIED, "evil\x1b]2;owned\x07 caf\u00e9 \u202e" + "x" * 300)
    assert code == 18 and len(text) == why.EDE_TEXT_LIMIT
    assert all(0x20 <= byte < 0x7F for byte in text)
    assert text.startswith(b"dejima: denied: evil\\x1b]2;owned\\x07 caf\\xe9 \\u202exxx")


def test_a_hit_reads_back_as_the_answer_it_was_built_from() -> None:
    question = Question("www.example.test", QTYPE.A)
    records = [Rec("www.example.test", QTYPE.CNAME, 60, dns_wire.encode_name("edge.example.test")),
               Rec("edge.example.test", QTYPE.A, 30, bytes([203, 0, 113, 9]))]
    hit = hitcache.build(object(), question.name, 0, records, [], 100.0, 130.0, ["203.0.113.9"], None, 3600)
    found = hitcache.answer_of(hit, question)
    assert found is not None and list(found.records) == records and hit.address_ttl == 30
    section = dns_wire.encode_name("WWW.example.test") + b"\x00\x01\x00\x01"
    request = dns_wire.ClientQuery(b"\x00\x05", 1, section, False, 512)
    aged = DNSRecord.parse(hitcache.render(hit, request, 10))
    assert [rr.ttl for rr in aged.rr] == [50, 20] and str(aged.rr[0].rname) == "WWW.example.test."


def test_a_name_past_253_characters_is_refused_on_every_path() -> None:
    """Labels that are each valid can still spell a name past 253 characters (past 255 octets on the
    wire): the plain reader leaves it to the full path, which refuses it; 253 characters pass."""
    longest = ".".join(["a" * 63, "b" * 63, "c" * 63, "d" * 61])  # 253 characters, 255 octets
    too_long = longest + "dd"
    for name, accepted in ((longest, True), (too_long, False)):
        labels = [label.encode() for label in name.split(".")]
        assert (dns_wire.ldh_name(labels) is not None) == accepted
        header = b"\x00\x01\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00"
        packet = header + dns_wire.encode_labels(labels) + b"\x00\x01\x00\x01"
        assert (dns_wire.plain_request(packet) is not None) == accepted
        read = query.read(packet)
        assert read is None or isinstance(read[1], Malformed) != accepted, read
        if not accepted:
            with pytest.raises(Malformed):
                query.checked_name(labels)
