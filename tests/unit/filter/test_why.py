"""dejima-why's pure parts: what it asks about, where it asks, how it reads a reply and what it says.

Replies are written with dnslib (a second implementation of the wire format); the command against
the filter's real resolver on loopback is in test_resolver.py, and inside a real session in
tests/integration/test_egress.py.
"""

from __future__ import annotations

import re
import struct

import pytest
from dnslib import EDNS0, QTYPE, RCODE, RR, A, DNSRecord, EDNSOption

from dejima.filter import why
from dejima.filter.why import Explanation, ResolverReply, Target, Usage

CONTROL = re.compile(r"[\x00-\x1f\x7f-\U0010ffff]")  # anything a terminal could take as control, or spoof


@pytest.mark.parametrize(("argument", "expected"), [
    ("example.com", Target("example.com", None)),
    ("Example.COM.", Target("example.com", None)),
    ("api.example.com:443", Target("api.example.com", 443)),
    ("https://user@api.example.com:8443/v1/x?y=1", Target("api.example.com", 8443)),
    ("bücher.example", Target("xn--bcher-kva.example", None)),
])
def test_the_host_asked_about_is_read_from_a_name_a_port_or_a_url(argument: str, expected: Target) -> None:
    assert why.target(argument) == expected


@pytest.mark.parametrize(("argument", "says"), [
    ("203.0.113.7", "is an address"),
    ("[2001:db8::1]", "is an address"),
    ("exa mple.com", "not a host name"),
    ("a..b", "not a host name"),
    ("-x.example", "not a host name"),
    ("example.com:0", "the port"),
    ("example.com:99999", "the port"),
    ("example.com:\u00b2", "the port"),
    ("x" * 254, "not a host name"),
    ("evil\x1b]2;owned\x07.example", "not a host name"),
])
def test_what_is_not_a_host_name_is_refused_and_shown_as_text(argument: str, says: str) -> None:
    with pytest.raises(Usage, match=re.escape(says)) as caught:
        why.target(argument)
    assert not CONTROL.search(str(caught.value).replace("\n", ""))


@pytest.mark.parametrize("argument", ["203.0.113.7:8080", "http://203.0.113.7:8080/index.html"])
def test_an_address_gets_the_grant_to_ask_for(argument: str) -> None:
    with pytest.raises(Usage, match=re.escape("`dejima-allow 203.0.113.7:8080`")):
        why.target(argument)


@pytest.mark.parametrize(("text", "server"), [
    ("nameserver 127.0.0.1\noptions ndots:0\n", "127.0.0.1"),
    ("# dejima\nsearch x\nnameserver 127.0.0.1\nnameserver 8.8.8.8\n", "127.0.0.1"),
])
def test_the_resolver_asked_is_the_loopback_one_resolv_conf_names(text: str, server: str) -> None:
    assert why.resolver_of(text) == server


@pytest.mark.parametrize("text", ["nameserver 192.0.2.53\nnameserver 127.0.0.1\n", "nameserver ::1\n",
                                  "nameserver 127.0.0.11x\n", "", "search example\n"])
def test_any_other_resolver_is_never_asked(text: str) -> None:
    with pytest.raises(Usage, match="does not look like a dejima session"):
        why.resolver_of(text)


def test_the_question_is_an_a_query_with_edns() -> None:
    packet = why.query("web.example.test", 0x1234)
    parsed = DNSRecord.parse(packet)
    assert parsed.header.id == 0x1234 and parsed.header.rd == 1 and str(parsed.q.qname) == "web.example.test."
    assert parsed.q.qtype == QTYPE.A and [rr.rtype for rr in parsed.ar] == [QTYPE.OPT]


def reply_to(packet: bytes, rcode: int = RCODE.NOERROR, addresses: tuple[str, ...] = (),
             ede: tuple[int, bytes] | None = None) -> bytes:
    reply = DNSRecord.parse(packet).reply()
    reply.header.rcode = rcode
    for address in addresses:
        reply.add_answer(RR("web.example.test", QTYPE.A, rdata=A(address), ttl=60))
    reply.ar = []
    options = [EDNSOption(why.EDE_OPTION, struct.pack("!H", ede[0]) + ede[1])] if ede else []
    reply.add_ar(EDNS0(udp_len=1232, opts=options))
    return bytes(reply.pack())


def test_a_reply_is_read_for_its_code_addresses_and_extended_error() -> None:
    packet = why.query("web.example.test", 7)
    assert why.read_reply(reply_to(packet, addresses=("203.0.113.7", "203.0.113.8")), packet) == ResolverReply(
        RCODE.NOERROR, ("203.0.113.7", "203.0.113.8"), None, False)
    refused = why.read_reply(reply_to(packet, RCODE.REFUSED, ede=(18, b"dejima: denied: why")), packet)
    assert refused == ResolverReply(RCODE.REFUSED, (), (18, b"dejima: denied: why"), False)


def test_a_reply_to_another_query_or_cut_short_is_not_read() -> None:
    packet = why.query("web.example.test", 7)
    good = reply_to(packet, addresses=("203.0.113.7",))
    other = why.query("other.example.test", 7)
    for bad in (good[:1] + b"\x08" + good[2:], reply_to(other, addresses=("203.0.113.7",)), packet,
                *(good[:n] for n in range(0, len(good), 3))):
        with pytest.raises(why.Unreadable):
            why.read_reply(bad, packet)


def test_a_hostile_reply_ends_in_bounded_time() -> None:
    """Pointer loops, labels past the end, record lengths past the end: each read ends with Unreadable."""
    packet = why.query("web.example.test", 7)
    head = packet[:2] + b"\x81\x80\x00\x00\x00\x01\x00\x00\x00\x00"
    for body in (b"\xc0\x0c" * 2000, b"\x3f" + b"a" * 10, b"\x00" + struct.pack("!HHIH", 1, 1, 60, 9000),
                 b"\x01a" * 200 + b"\x00"):
        with pytest.raises(why.Unreadable):
            why.read_reply(head + body, packet)


WEB = Target("web.example.test", None)


def explained(rcode: int, text: bytes | None = None, addresses: tuple[str, ...] = (),
              target: Target = WEB) -> Explanation:
    return why.explain(target, ResolverReply(rcode, addresses, (18, text) if text is not None else None, False))


def test_each_kind_of_refusal_is_explained_apart() -> None:
    said = {kind.token: explained(RCODE.REFUSED, why.ede(kind, "the reason")[1]) for kind in why.KINDS.values()}
    assert len({finding.text for finding in said.values()}) == len(why.KINDS)
    assert said["not-allowed"] == Explanation(1, (
        "refused by dejima's policy: web.example.test is not on this session's allow list.\n"
        "This is not a network fault: retrying will not help. Ask the user to run `dejima-allow web.example.test`\n"
        "on the host; the grant takes effect at once, without a restart."))
    assert said["denied"].text.startswith("refused by dejima's deny list: the reason.")
    assert said["upstream-failed"].status == 3 and "not dejima's policy" in said["upstream-failed"].text
    assert all(finding.status == 1 for token, finding in said.items() if token not in ("upstream-failed", "no-ipv6"))


def test_the_grant_asked_for_names_the_port_asked_about() -> None:
    finding = explained(RCODE.REFUSED, b"dejima: not-allowed: x", target=Target("web.example.test", 443))
    assert "`dejima-allow web.example.test:443`" in finding.text


@pytest.mark.parametrize(("rcode", "addresses", "status", "says"), [
    (RCODE.NOERROR, ("203.0.113.7",), 0, "allowed: web.example.test resolves to 203.0.113.7."),
    (RCODE.NOERROR, (), 3, "web.example.test is allowed, but it has no IPv4 address"),
    (RCODE.NXDOMAIN, (), 3, "web.example.test is allowed, but it does not exist"),
    (RCODE.REFUSED, (), 1, "dejima's resolver refused web.example.test without saying why."),
    (RCODE.SERVFAIL, (), 3, "dejima's resolver answered SERVFAIL for web.example.test without saying why."),
])
def test_answers_without_a_reason_are_explained_by_their_code(rcode: int, addresses: tuple[str, ...], status: int,
                                                              says: str) -> None:
    finding = explained(rcode, addresses=addresses)
    assert finding.status == status and finding.text.startswith(says)


@pytest.mark.parametrize("text", [
    b"dejima: denied: evil\x1b]2;owned\x07\x1b[2J\x9b31m\xe2\x80\xae done",
    b"dejima: no-such-kind: \x1b]52;c;cGF5bG9hZA==\x07",
    b"\x1b[31mnot dejima's at all\r\n\x00",
])
def test_the_resolvers_text_is_data_never_terminal_control(text: bytes) -> None:
    finding = explained(RCODE.REFUSED, text)
    assert finding.status == 1
    assert not CONTROL.search(finding.text.replace("\n", ""))
    assert "\\x1b" in finding.text  # shown, escaped, not dropped silently
