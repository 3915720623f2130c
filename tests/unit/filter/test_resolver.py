"""The resolver on real loopback sockets: a session-side client, dejima's resolver (asyncio, the
filter's code) and a fake upstream (dnslib on UDP and TCP) that records every packet it gets.

No marks and no nft here (those need the filter's namespace; the integration battery covers
them): the set writer is a recorder, the mark is 0.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import struct
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from dnslib import (
    CLASS,
    CNAME,
    EDNS0,
    QTYPE,
    RCODE,
    RR,
    TXT,
    A,
    DNSHeader,
    DNSLabel,
    DNSQuestion,
    DNSRecord,
    EDNSOption,
)
from dnslib.server import BaseResolver, DNSLogger, DNSServer

from dejima.core.egress import parse_policy
from dejima.filter import why
from dejima.filter.answer import Answer, parse
from dejima.filter.dns_upstream import Forwarder
from dejima.filter.dns_wire import Question
from dejima.filter.dnsserver import start_servers
from dejima.filter.resolver import PolicyResolver

DOCUMENTATION = ipaddress.ip_network("203.0.113.0/24")  # a reserved range answers may point into here
ZONE: dict[str, list[tuple[str, str, int]]] = {
    "web.example.test": [("A", "203.0.113.7", 300)],
    "a.wild.example.test": [("A", "203.0.113.8", 300)],
    "alias.example.test": [("CNAME", "web.example.test", 300)],
    "bad-alias.example.test": [("CNAME", "evil.example.test", 300)],
    "evil.example.test": [("A", "203.0.113.66", 300)],
    "meta.example.test": [("A", "169.254.169.254", 300)],
    "txt.example.test": [("TXT", "hello", 300)],
    "big.example.test": [("TXT", "x" * 250, 300)] * 8,
    "stray.example.test": [("A", "203.0.113.9", 300), ("STRAY", "203.0.113.99", 300)],
    "short.example.test": [("A", "203.0.113.10", 1)],
    "loop.example.test": [("LOOP", "loop2.example.test", 300)],
    "servfail.example.test": [("SERVFAIL", "", 0)],
    "many.example.test": [("A", f"203.0.113.{n}", 300) for n in range(100, 200)],  # over 1232 octets
}


class _Zone(BaseResolver):  # type: ignore[misc]
    def __init__(self, seen: list[bytes], spoof: list[bool]) -> None:
        self.seen, self.spoof = seen, spoof

    def resolve(self, request: DNSRecord, handler: object) -> DNSRecord:
        self.seen.append(request.pack())
        name = str(request.q.qname).rstrip(".").lower()
        reply = request.reply()
        if self.spoof and self.spoof[0]:
            reply.header.id = (reply.header.id + 1) % 65536  # a reply to someone else's query
        for kind, value, ttl in ZONE.get(name, []):
            if kind == "CNAME":
                reply.add_answer(RR(name, QTYPE.CNAME, rdata=CNAME(value), ttl=ttl))
                for _k2, v2, t2 in ZONE.get(value, []):
                    reply.add_answer(RR(value, QTYPE.A, rdata=A(v2), ttl=t2))
            elif kind == "A" and request.q.qtype == QTYPE.A:
                reply.add_answer(RR(name, QTYPE.A, rdata=A(value), ttl=ttl))
            elif kind == "STRAY":  # an address for a name nobody asked about
                reply.add_answer(RR("elsewhere.example.test", QTYPE.A, rdata=A(value), ttl=ttl))
            elif kind == "TXT" and request.q.qtype == QTYPE.TXT:
                reply.add_answer(RR(name, QTYPE.TXT, rdata=TXT(value), ttl=ttl))
            elif kind == "LOOP":  # two names, each an alias of the other
                reply.add_answer(RR(name, QTYPE.CNAME, rdata=CNAME(value), ttl=ttl))
                reply.add_answer(RR(value, QTYPE.CNAME, rdata=CNAME(name), ttl=ttl))
            elif kind == "SERVFAIL":
                reply.header.rcode = RCODE.SERVFAIL
        if name not in ZONE:
            reply.header.rcode = RCODE.NXDOMAIN
        return reply


class RecordingSets:
    """Stands in for the allow sets: records every insert, and calls an element fresh once it was
    inserted (as SetWriter does while most of its timeout is left)."""

    def __init__(self, added: list[tuple[list[str], list[int] | None, int]] | None = None) -> None:
        self.added = added if added is not None else []
        self.asked = 0

    def fresh(self, addresses: list[str], ports: list[int] | None, timeout: int | None) -> bool:
        self.asked += 1
        return any(a == addresses and p == ports for a, p, _t in self.added)

    async def add(self, addresses: list[str], ports: list[int] | None, timeout: int | None, others: int = 0) -> None:
        self.added.append((addresses, ports, timeout or 0))


@dataclass
class World:
    port: int  # dejima's resolver
    seen: list[bytes]  # raw packets the upstream got
    added: list[tuple[list[str], list[int] | None, int]]  # set insertions
    records: list[dict[str, object]]
    resolver: PolicyResolver
    sets: RecordingSets
    spoof: list[bool] = field(default_factory=list)

    def names_seen(self) -> list[str]:
        return [str(DNSRecord.parse(p).q.qname).rstrip(".") for p in self.seen]


@pytest.fixture(scope="module")
def upstream() -> Iterator[tuple[int, list[bytes], list[bool]]]:
    """The fake upstream, on UDP and TCP, shared by the module (dnslib's servers stop slowly)."""
    seen: list[bytes] = []
    spoof: list[bool] = []
    logger = DNSLogger(log="-request,-reply,-truncated,-recv,-send,-data,-error", prefix=False)
    udp = DNSServer(_Zone(seen, spoof), address="127.0.0.1", port=0, logger=logger)
    udp.start_thread()
    port = udp.server.server_address[1]
    tcp = DNSServer(_Zone(seen, spoof), address="127.0.0.1", port=port, tcp=True, logger=logger)
    tcp.start_thread()
    yield port, seen, spoof
    udp.stop()
    tcp.stop()


@pytest.fixture
def world(upstream: tuple[int, list[bytes], list[bool]]) -> Iterator[World]:
    upstream_port, seen, spoof = upstream
    seen.clear()
    spoof.clear()
    policy = parse_policy(["web.example.test", "*.wild.example.test", "alias.example.test",
                           "bad-alias.example.test", "meta.example.test", "txt.example.test:443",
                           "big.example.test", "stray.example.test", "short.example.test", "loop.example.test",
                           "servfail.example.test", "many.example.test"],
                          [("evil.example.test", "a test says this host exfiltrates")],
                          answer_networks=(DOCUMENTATION,))
    added: list[tuple[list[str], list[int] | None, int]] = []
    sets = RecordingSets(added)
    records: list[dict[str, object]] = []
    ready = threading.Event()
    loop = asyncio.new_event_loop()
    state: dict[str, object] = {}

    async def serve() -> None:
        forward = Forwarder(["127.0.0.1"], mark=0, timeout=1.0, port=upstream_port)
        resolver = PolicyResolver(policy, forward, sets, records.append)
        state["resolver"] = resolver
        async with asyncio.TaskGroup() as tasks:
            udp, tcp = await start_servers(resolver, tasks.create_task, port=0)
            state["port"] = tcp.sockets[0].getsockname()[1]
            state["stop"] = asyncio.Event()
            ready.set()
            await state["stop"].wait()  # type: ignore[attr-defined]
            udp.close()
            tcp.close()

    thread = threading.Thread(target=loop.run_until_complete, args=(serve(),), daemon=True)
    thread.start()
    assert ready.wait(5)
    yield World(int(state["port"]), seen, added, records, state["resolver"], sets, spoof)  # type: ignore[call-overload, arg-type]
    loop.call_soon_threadsafe(state["stop"].set)  # type: ignore[attr-defined]
    thread.join(5)
    loop.close()


def ask(world: World, packet: bytes, tcp: bool = False) -> DNSRecord:
    kind = socket.SOCK_STREAM if tcp else socket.SOCK_DGRAM
    with socket.socket(socket.AF_INET, kind) as sock:
        sock.settimeout(3)
        sock.connect(("127.0.0.1", world.port))
        if tcp:
            sock.sendall(struct.pack("!H", len(packet)) + packet)
            size = struct.unpack("!H", sock.recv(2))[0]
            data = b""
            while len(data) < size:
                data += sock.recv(size - len(data))
        else:
            sock.send(packet)
            data = sock.recv(65535)
    return DNSRecord.parse(data)


def question(name: str, qtype: str = "A", edns: bool = False) -> bytes:
    query = DNSRecord.question(name, qtype)
    if edns:
        query.add_ar(EDNS0(udp_len=4096))
    return bytes(query.pack())


def wire(labels: list[bytes], qtype: int = QTYPE.A, qclass: int = CLASS.IN, questions: int = 1) -> bytes:
    record = DNSRecord(DNSHeader(id=0x1234, rd=1))
    for _ in range(questions):
        record.add_question(DNSQuestion(DNSLabel(labels), qtype, qclass))
    return bytes(record.pack())


def upstream_reply(question: Question, reply: DNSRecord) -> Answer:
    """What the forwarder makes of ``reply`` from the upstream (a test's stand-in for it)."""
    data = bytes(reply.pack())
    found = parse(data, question)
    assert found is not None
    return found


def addresses(reply: DNSRecord) -> list[str]:
    return [str(rr.rdata) for rr in reply.rr if rr.rtype == QTYPE.A]


# --- what reaches the upstream --------------------------------------------------------------------


def test_allowed_name_is_answered_and_its_address_enters_the_set(world: World) -> None:
    reply = ask(world, question("web.example.test"))
    assert reply.header.rcode == RCODE.NOERROR and addresses(reply) == ["203.0.113.7"]
    assert world.added == [(["203.0.113.7"], None, 300)]


def test_name_not_allowed_never_reaches_the_upstream(world: World) -> None:
    reply = ask(world, question("secret-data.other.test", edns=True))
    assert reply.header.rcode == RCODE.REFUSED
    assert b"secret-data.other.test is not on the allow list" in reply.pack()  # the Extended DNS Error
    assert world.seen == []
    assert world.records[-1]["domain"] == "secret-data.other.test"


@pytest.mark.parametrize("labels", [
    [b"exfil-data.wild", b"example", b"test"],  # prints as exfil-data.wild.example.test
    [b"a", b"wild.example", b"test"],
    [b"a\x00b", b"wild", b"example", b"test"],
    [b"caf\xc3\xa9", b"wild", b"example", b"test"],
])
def test_labels_are_checked_as_they_are_on_the_wire(world: World, labels: list[bytes]) -> None:
    reply = ask(world, wire(labels))
    assert reply.header.rcode in (RCODE.REFUSED, RCODE.FORMERR)
    assert world.seen == [], "a name the policy did not check reached the upstream"


def test_control_for_the_wire_check_an_ordinary_wildcard_name_passes(world: World) -> None:
    reply = ask(world, wire([b"a", b"wild", b"example", b"test"]))
    assert reply.header.rcode == RCODE.NOERROR and addresses(reply) == ["203.0.113.8"]


@pytest.mark.parametrize(("packet", "why"), [
    (wire([b"web", b"example", b"test"], questions=2), "two questions"),
    (wire([b"web", b"example", b"test"], qclass=CLASS.CH), "class CH"),
    (wire([b"web", b"example", b"test"], qtype=QTYPE.ANY), "type ANY"),
    (wire([b"web", b"example", b"test"], qtype=QTYPE.AXFR), "zone transfer"),
])
def test_only_one_ordinary_question_is_answered(world: World, packet: bytes, why: str) -> None:
    reply = ask(world, packet)
    assert reply.header.rcode in (RCODE.REFUSED, RCODE.FORMERR), why
    assert world.seen == [], why


def test_second_question_cannot_smuggle_a_name(world: World) -> None:
    record = DNSRecord(DNSHeader(id=7, rd=1))
    record.add_question(DNSQuestion("web.example.test", QTYPE.A))
    record.add_question(DNSQuestion("smuggled.other.test", QTYPE.A))
    assert ask(world, bytes(record.pack())).header.rcode == RCODE.FORMERR
    assert "smuggled.other.test" not in world.names_seen()


def test_upstream_gets_a_query_the_resolver_built(world: World) -> None:
    client = DNSRecord(DNSHeader(id=0x4242, rd=1), q=DNSQuestion("WeB.Example.TEST", QTYPE.A))
    # EDNS client subnet (8) and a cookie (10): the client's options stay with the client.
    client.add_ar(EDNS0(udp_len=4096, opts=[EDNSOption(8, b"\x00\x01\x18\x00\x0a\x00\x00"),
                                            EDNSOption(10, b"clientcookie")]))
    reply = ask(world, bytes(client.pack()))
    assert reply.header.id == 0x4242 and addresses(reply) == ["203.0.113.7"]
    (sent,) = [DNSRecord.parse(p) for p in world.seen]
    assert str(sent.q.qname) == "web.example.test."
    assert sent.header.id != 0x4242 or sent.pack() != client.pack()
    assert [option for rr in sent.ar if rr.rtype == QTYPE.OPT for option in rr.rdata] == []
    assert b"clientcookie" not in world.seen[0]


def test_garbage_gets_formerr_or_nothing_and_the_resolver_goes_on(world: World) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(2)
        for junk in (b"", b"\x00", b"\x12\x34" + b"\xff" * 30, b"\x12\x34\x01\x00\x00\x01" + b"\x00" * 6 + b"\xc0\x0c"):
            sock.sendto(junk, ("127.0.0.1", world.port))
    with socket.create_connection(("127.0.0.1", world.port), timeout=2) as stream:
        stream.sendall(b"\x00\x05hello\xff\xff")  # a short message, then a length it never sends
    assert addresses(ask(world, question("web.example.test"))) == ["203.0.113.7"]


# --- what the answer may carry --------------------------------------------------------------------


def test_cname_chain_is_followed_and_only_the_chain_is_kept(world: World) -> None:
    reply = ask(world, question("alias.example.test"))
    assert addresses(reply) == ["203.0.113.7"]
    assert ask(world, question("web.example.test")).header.rcode == RCODE.NOERROR
    stray = ask(world, question("stray.example.test"))
    assert addresses(stray) == ["203.0.113.9"]  # the record for another owner is dropped
    assert all(["203.0.113.99"] != a for a, _p, _t in world.added)


def test_denied_name_inside_a_chain_refuses_the_answer_with_its_reason(world: World) -> None:
    reply = ask(world, question("bad-alias.example.test", edns=True))
    assert reply.header.rcode == RCODE.REFUSED
    assert b"a test says this host exfiltrates" in reply.pack()
    assert all("203.0.113.66" not in a for a, _p, _t in world.added)
    assert world.records[-1]["alias"] == "evil.example.test"


def test_answer_in_a_denied_class_is_refused(world: World) -> None:
    assert ask(world, question("meta.example.test")).header.rcode == RCODE.REFUSED
    assert world.added == []


def test_aaaa_gets_an_empty_answer_without_asking_upstream(world: World) -> None:
    reply = ask(world, question("web.example.test", "AAAA"))
    assert reply.header.rcode == RCODE.NOERROR and reply.rr == []
    assert world.seen == []


def test_large_answer_is_truncated_over_udp_and_whole_over_tcp(world: World) -> None:
    udp = ask(world, question("big.example.test", "TXT"))
    assert udp.header.tc == 1 and udp.rr == []
    tcp = ask(world, question("big.example.test", "TXT"), tcp=True)
    assert tcp.header.tc == 0 and len(tcp.rr) == 8


# --- cache and upstream replies --------------------------------------------------------------------


def test_repeated_name_is_answered_from_the_cache_and_rechecked(world: World) -> None:
    for _ in range(5):
        assert addresses(ask(world, question("web.example.test"))) == ["203.0.113.7"]
    assert world.names_seen() == ["web.example.test"]
    assert len(world.added) == 1 and world.sets.asked == 4  # each hit asks whether the set still holds it


def test_cached_answer_expires_with_its_ttl_and_follows_policy_changes() -> None:
    """Pure logic, with the clock and the upstream injected."""
    now = [1000.0]
    asked: list[str] = []

    async def forward(question: Question) -> Answer:
        asked.append(question.name)
        reply = DNSRecord.question(question.name, question.type_name).reply()
        reply.add_answer(RR(question.name, QTYPE.A, rdata=A("203.0.113.7"), ttl=30))
        return upstream_reply(question, reply)

    policy = parse_policy(["web.example.test"], [], answer_networks=(DOCUMENTATION,))
    resolver = PolicyResolver(policy, forward, RecordingSets(), lambda r: None, clock=lambda: now[0])
    packet = question("web.example.test")

    def ask_directly() -> DNSRecord:
        return DNSRecord.parse(asyncio.run(resolver.answer(packet)))

    assert addresses(ask_directly()) == ["203.0.113.7"]
    now[0] += 20
    cached = ask_directly()
    assert len(asked) == 1 and cached.rr[0].ttl == 10  # served from the cache, TTL aged
    now[0] += 11
    ask_directly()
    assert len(asked) == 2  # expired: asked again
    resolver.policy = parse_policy(["other.example.test"], [])
    assert ask_directly().header.rcode == RCODE.REFUSED  # a cached answer never outlives its policy


def test_reply_with_the_wrong_id_is_ignored(world: World) -> None:
    world.spoof.append(True)
    reply = ask(world, question("web.example.test"))
    assert reply.header.rcode == RCODE.SERVFAIL  # only mismatched replies came back: none counted
    assert world.added == []
    assert world.records[-1]["kind"] == "dns-upstream"


def test_refusals_of_one_name_are_folded(world: World) -> None:
    for _ in range(20):
        ask(world, question("loop.other.test"))
    assert [r["domain"] for r in world.records].count("loop.other.test") == 1


def test_a_name_carrying_a_placeholder_is_refused_even_under_an_allowed_wildcard() -> None:
    asked: list[str] = []

    async def forward(question: Question) -> Answer:
        asked.append(question.name)
        return upstream_reply(question, DNSRecord.question(question.name, question.type_name).reply())

    records: list[dict[str, object]] = []
    policy = parse_policy(["*.wild.example.test"], [])
    resolver = PolicyResolver(policy, forward, RecordingSets(), records.append,
                              canaries=("q7w8e9r0t1y2u3i4",))
    for name in ("q7w8e9r0t1y2u3i4.wild.example.test", "q7w8e9r0-t1y2u3i4.wild.example.test",
                 "q7w8e9.r0t1y2u3i4.wild.example.test"):
        reply = DNSRecord.parse(asyncio.run(resolver.answer(question(name))))
        assert reply.header.rcode == RCODE.REFUSED, name
    assert asked == [] and {r["kind"] for r in records} == {"canary"}
    assert DNSRecord.parse(asyncio.run(resolver.answer(question("a.wild.example.test")))).header.rcode == 0


# --- the fast path for repeated questions ------------------------------------------------------------


def test_a_revoke_takes_effect_for_a_cached_name_at_once(world: World) -> None:
    assert addresses(ask(world, question("web.example.test"))) == ["203.0.113.7"]
    assert addresses(ask(world, question("web.example.test"))) == ["203.0.113.7"]  # control: a hit
    assert world.sets.asked == 1
    world.resolver.policy = parse_policy(["a.wild.example.test"], [], answer_networks=(DOCUMENTATION,))
    assert ask(world, question("web.example.test")).header.rcode == RCODE.REFUSED
    assert world.names_seen() == ["web.example.test"]


def test_a_hit_echoes_the_client_and_ages_its_ttls_like_the_full_path(world: World) -> None:
    ask(world, question("web.example.test"))
    client = DNSRecord(DNSHeader(id=0x5151, rd=1), q=DNSQuestion("WEB.example.Test", QTYPE.A))
    client.add_ar(EDNS0(udp_len=4096))
    reply = ask(world, bytes(client.pack()))
    assert world.sets.asked == 1, "not answered by the fast path"
    assert reply.header.id == 0x5151 and reply.header.rd == 1 and reply.header.ra == 1 and reply.header.qr == 1
    assert str(reply.q.qname) == "WEB.example.Test." and addresses(reply) == ["203.0.113.7"]
    assert 299 <= reply.rr[0].ttl <= 300 and [rr.rtype for rr in reply.ar] == [QTYPE.OPT]


def test_unusual_repeats_take_the_full_path_and_are_refused_as_before(world: World) -> None:
    ask(world, question("web.example.test"))
    assert ask(world, wire([b"web", b"example", b"test"], questions=2)).header.rcode == RCODE.FORMERR
    assert ask(world, wire([b"web", b"example", b"test"], qclass=CLASS.CH)).header.rcode == RCODE.FORMERR
    assert ask(world, wire([b"web.example", b"test"])).header.rcode in (RCODE.REFUSED, RCODE.FORMERR)
    assert world.sets.asked == 0


def test_a_hit_whose_set_element_is_stale_is_inserted_again_before_the_answer(world: World) -> None:
    ask(world, question("web.example.test"))
    world.added.clear()  # the set writer now says the element needs a refresh
    assert addresses(ask(world, question("web.example.test"))) == ["203.0.113.7"]
    assert world.added == [(["203.0.113.7"], None, 300)] and world.names_seen() == ["web.example.test"]


@pytest.mark.parametrize("when", ["upstream", "insert", "never"])
def test_a_name_revoked_while_its_answer_is_on_the_way_is_refused(when: str) -> None:
    """A grant revoked while the upstream answers, or while the answer's insert runs: the answer
    is refused and its address not learned (the revoke's cut stands). Control: no revoke."""
    allowed = parse_policy(["web.example.test"], [], answer_networks=(DOCUMENTATION,))
    revoked = parse_policy(["other.example.test"], [], answer_networks=(DOCUMENTATION,))
    resolver: PolicyResolver

    class RevokingSets(RecordingSets):
        async def add(self, addresses: list[str], ports: list[int] | None, timeout: int | None,
                      others: int = 0) -> None:
            await super().add(addresses, ports, timeout, others)
            if when == "insert":
                resolver.policy = revoked

    async def forward(question: Question) -> Answer:
        if when == "upstream":
            resolver.policy = revoked
        reply = DNSRecord.question(question.name, "A").reply()
        reply.add_answer(RR(question.name, QTYPE.A, rdata=A("203.0.113.7"), ttl=300))
        return upstream_reply(question, reply)

    sets = RevokingSets()
    resolver = PolicyResolver(allowed, forward, sets, lambda r: None)
    reply = DNSRecord.parse(asyncio.run(resolver.answer(question("web.example.test", edns=True))))
    if when == "never":
        assert addresses(reply) == ["203.0.113.7"] and resolver.learned() == {"203.0.113.7": "web.example.test"}
    else:
        assert reply.header.rcode == RCODE.REFUSED and resolver.learned() == {} and resolver.hits == {}
        # Revoked before the answer was checked: the name is simply no longer allowed.
        assert ede_of(reply)[1] == ("revoked" if when == "insert" else "not-allowed")
        assert sets.added == ([] if when == "upstream" else [(["203.0.113.7"], None, 300)])


def test_a_repeated_packet_is_answered_from_its_written_reply_and_checked_like_a_hit() -> None:
    """quick() keeps the reply it wrote per client packet (id aside); the same packet again is
    answered from it only while the hit's checks hold: a revoke, a forgotten name, an element to
    refresh or a second of age each send it back to the hit or the full path."""
    now = [1000.0]
    allowed = parse_policy(["web.example.test"], [], answer_networks=(DOCUMENTATION,))

    async def forward(question: Question) -> Answer:
        reply = DNSRecord.question(question.name, "A").reply()
        reply.add_answer(RR(question.name, QTYPE.A, rdata=A("203.0.113.7"), ttl=300))
        return upstream_reply(question, reply)

    sets = RecordingSets()
    resolver = PolicyResolver(allowed, forward, sets, lambda r: None, clock=lambda: now[0])
    packet = bytearray(question("web.example.test"))
    asyncio.run(resolver.answer(bytes(packet)))
    first = resolver.quick(bytes(packet))
    assert first is not None and len(resolver.replies) == 1
    packet[:2] = b"\x42\x42"
    again = resolver.quick(bytes(packet))
    assert again == b"\x42\x42" + first[2:]  # the written reply, with this client's id
    assert sets.asked == 2  # the written reply still asks the set writer
    added, sets.added[:] = list(sets.added), []
    assert resolver.quick(bytes(packet)) is None  # an element to refresh: the full path inserts it
    sets.added[:] = added
    now[0] += 1
    aged = DNSRecord.parse(resolver.quick(bytes(packet)))
    assert aged.header.id == 0x4242 and aged.rr[0].ttl == 299  # re-written at the new age
    resolver.forget({"web.example.test"})
    assert resolver.quick(bytes(packet)) is None and resolver.replies == {}
    asyncio.run(resolver.answer(bytes(packet)))
    assert resolver.quick(bytes(packet)) is not None  # control: kept again, answered again
    resolver.policy = parse_policy(["other.example.test"], [], answer_networks=(DOCUMENTATION,))
    assert resolver.quick(bytes(packet)) is None  # revoked: never from the written reply
    refused = DNSRecord.parse(asyncio.run(resolver.answer(bytes(packet))))
    assert refused.header.rcode == RCODE.REFUSED


def test_a_hit_asked_over_tcp_is_answered_from_the_kept_answer(world: World) -> None:
    """The full path (TCP here) answers a kept hit as it is: no upstream query, no insert while its
    element is fresh; a stale element is inserted again first."""
    udp = ask(world, question("web.example.test"))
    tcp = ask(world, question("web.example.test"), tcp=True)
    assert addresses(tcp) == addresses(udp) == ["203.0.113.7"] and tcp.rr[0].ttl <= 300
    assert world.names_seen() == ["web.example.test"] and len(world.added) == 1 and world.sets.asked == 1
    world.added.clear()  # the set writer now says the element needs a refresh
    assert addresses(ask(world, question("web.example.test"), tcp=True)) == ["203.0.113.7"]
    assert world.added == [(["203.0.113.7"], None, 300)] and world.names_seen() == ["web.example.test"]


def test_a_hit_revoked_while_its_element_is_refreshed_is_refused() -> None:
    allowed = parse_policy(["web.example.test"], [], answer_networks=(DOCUMENTATION,))
    resolver: PolicyResolver
    revoke = [False]

    class RevokingSets(RecordingSets):
        def fresh(self, addresses: list[str], ports: list[int] | None, timeout: int | None) -> bool:
            return False  # every repeat refreshes its element

        async def add(self, addresses: list[str], ports: list[int] | None, timeout: int | None,
                      others: int = 0) -> None:
            await super().add(addresses, ports, timeout, others)
            if revoke[0]:
                resolver.policy = parse_policy(["other.example.test"], [])

    async def forward(question: Question) -> Answer:
        reply = DNSRecord.question(question.name, "A").reply()
        reply.add_answer(RR(question.name, QTYPE.A, rdata=A("203.0.113.7"), ttl=300))
        return upstream_reply(question, reply)

    resolver = PolicyResolver(allowed, forward, RevokingSets(), lambda r: None)
    packet = question("web.example.test")
    assert addresses(DNSRecord.parse(asyncio.run(resolver.answer(packet)))) == ["203.0.113.7"]
    assert addresses(DNSRecord.parse(asyncio.run(resolver.answer(packet)))) == ["203.0.113.7"]  # control
    revoke[0] = True
    assert DNSRecord.parse(asyncio.run(resolver.answer(packet))).header.rcode == RCODE.REFUSED
    assert resolver.hits == {} and resolver.quick(packet) is None


# --- what dejima-why reads ---------------------------------------------------------------------------


def ede_of(reply: DNSRecord) -> tuple[int, str]:
    """The one Extended DNS Error of ``reply``: its info-code, and the kind its text names."""
    options = [option for rr in reply.ar if rr.rtype == QTYPE.OPT for option in rr.rdata if option.code == 15]
    assert len(options) == 1, reply
    kind, reason = why.read_ede(options[0].data[2:])
    assert kind is not None, reason
    return struct.unpack("!H", options[0].data[:2])[0], kind.token


def edns_wire(labels: list[bytes], qclass: int) -> bytes:
    record = DNSRecord.parse(wire(labels, qclass=qclass))
    record.add_ar(EDNS0(udp_len=4096))
    return bytes(record.pack())


def test_each_kind_of_refusal_carries_an_extended_error_of_its_own(world: World) -> None:
    """Every way the resolver refuses names its kind (why.KINDS) and that kind's info-code, so dejima-why
    (and dig) can tell them apart: the revoke's kind is shown by the revoke test above."""
    cases = [
        (question("secret.other.test", edns=True), RCODE.REFUSED, "not-allowed"),
        (question("evil.example.test", edns=True), RCODE.REFUSED, "denied"),
        (question("q7w8e9r0t1y2u3i4.wild.example.test", edns=True), RCODE.REFUSED, "credential"),
        (edns_wire([b"web", b"example", b"test"], CLASS.CH), RCODE.FORMERR, "malformed-query"),
        (question("bad-alias.example.test", edns=True), RCODE.REFUSED, "alias-denied"),
        (question("meta.example.test", edns=True), RCODE.REFUSED, "answer-denied"),
        (question("loop.example.test", edns=True), RCODE.REFUSED, "malformed-answer"),
        (question("servfail.example.test", edns=True), RCODE.SERVFAIL, "upstream-failed"),
        (question("web.example.test", "AAAA", edns=True), RCODE.NOERROR, "no-ipv6"),
    ]
    world.resolver.canaries = ("q7w8e9r0t1y2u3i4",)
    for packet, rcode, kind in cases:
        reply = ask(world, packet)
        assert (reply.header.rcode, ede_of(reply)) == (rcode, (why.KINDS[kind].code, kind)), kind
    assert {kind for _p, _r, kind in cases} == set(why.KINDS) - {"revoked"}
    world.spoof.append(True)  # no upstream answer at all: the same kind as its SERVFAIL
    assert ede_of(ask(world, question("web.example.test", edns=True))) == (why.UPSTREAM_FAILED.code,
                                                                           "upstream-failed")


_watched = threading.local()
_destinations: list[object] = []


def _hook(event: str, args: tuple[object, ...]) -> None:
    if getattr(_watched, "on", False) and event.startswith("socket."):
        _destinations.append(args[1] if event in ("socket.connect", "socket.sendto") else event)


sys.addaudithook(_hook)  # a hook cannot be removed: it records only this thread, while a test's block runs


@contextmanager
def sockets_recorded() -> Iterator[list[object]]:
    """What this thread does with sockets: each address connected or sent to, each other socket event."""
    _destinations.clear()
    _watched.on = True
    try:
        yield _destinations
    finally:
        _watched.on = False


@pytest.mark.parametrize(("name", "status", "says"), [
    ("web.example.test", 0, "allowed: web.example.test resolves to 203.0.113.7.\n"),
    ("secret.other.test", 1, "refused by dejima's policy: secret.other.test is not on this session's allow list."),
    ("evil.example.test", 1, "refused by dejima's deny list: a test says this host exfiltrates.\n"),
    ("meta.example.test", 1, "refused by dejima's policy: meta.example.test is allowed, but it resolves only to"),
    ("servfail.example.test", 3, "servfail.example.test is allowed, but the upstream DNS gave no usable answer"),
    ("gone.wild.example.test", 3, "gone.wild.example.test is allowed, but it does not exist"),
])
def test_dejima_why_asks_the_session_resolver_and_says_why(world: World, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str], name: str,
                                                            status: int, says: str) -> None:
    """The command against the filter's real resolver: it talks to the resolver resolv.conf names, nothing else."""
    conf = tmp_path / "resolv.conf"
    conf.write_text("nameserver 127.0.0.1\noptions ndots:0\n")
    with sockets_recorded() as seen:
        assert why.main([name], str(conf), world.port) == status
    assert capsys.readouterr().out.startswith(says)
    assert [s for s in seen if not isinstance(s, str)] == [("127.0.0.1", world.port)]


def test_dejima_why_takes_a_truncated_answer_again_over_tcp_from_the_same_resolver(
        world: World, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    conf = tmp_path / "resolv.conf"
    conf.write_text("nameserver 127.0.0.1\n")
    with sockets_recorded() as seen:
        assert why.main(["many.example.test"], str(conf), world.port) == 0
    shown = capsys.readouterr().out.split("\n", 1)[0]
    assert shown.startswith("allowed: many.example.test resolves to 203.0.113.100, ") and shown.count(",") == 99
    assert [s for s in seen if not isinstance(s, str)] == [("127.0.0.1", world.port)] * 2  # UDP, then TCP


def test_dejima_why_sends_nothing_when_resolv_conf_names_another_resolver(
        world: World, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A resolv.conf the agent points elsewhere (or a host that is no session) gets no packet from it."""
    conf = tmp_path / "resolv.conf"
    conf.write_text("nameserver 192.0.2.53\nnameserver 127.0.0.1\n")
    with sockets_recorded() as seen:
        assert why.main(["web.example.test"], str(conf), world.port) == 2
    assert seen == [] and "does not look like a dejima session" in capsys.readouterr().err
    assert world.seen == []
