"""The resolver's UDP server on real loopback sockets: how many datagrams one wake-up reads, and
the shedding of misses past MAX_INFLIGHT (hits are still answered meanwhile).

The server's reader is taken off the loop and called by the test, so what one wake-up does is
seen exactly; the upstream is a function the test holds back.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Coroutine
from typing import Any

from dnslib import QTYPE, RR, A, DNSRecord

from dejima.core.egress import parse_policy
from dejima.filter.answer import Answer, parse
from dejima.filter.dns_wire import Question
from dejima.filter.dnsserver import MAX_INFLIGHT, READS_PER_WAKEUP, start_servers
from dejima.filter.resolver import PolicyResolver

DOCUMENTATION = ipaddress.ip_network("203.0.113.0/24")


class Sets:
    def __init__(self) -> None:
        self.added: list[list[str]] = []

    def fresh(self, addresses: list[str], ports: list[int] | None, timeout: int | None) -> bool:
        return addresses in self.added

    async def add(self, addresses: list[str], ports: list[int] | None, timeout: int | None, others: int = 0) -> None:
        self.added.append(addresses)


def query(name: str, qid: int) -> bytes:
    packet = DNSRecord.question(name, "A")
    packet.header.id = qid
    return bytes(packet.pack())


def replies(client: socket.socket) -> list[DNSRecord]:
    found = []
    while True:
        try:
            found.append(DNSRecord.parse(client.recv(4096)))
        except BlockingIOError:
            return found


async def serve(held: asyncio.Event) -> tuple[Any, PolicyResolver, socket.socket, list[asyncio.Task[None]]]:
    async def forward(question: Question) -> Answer:
        if question.name != "web.example.test":
            await held.wait()
        reply = DNSRecord.question(question.name, "A").reply()
        reply.add_answer(RR(question.name, QTYPE.A, rdata=A("203.0.113.7"), ttl=300))
        found = parse(bytes(reply.pack()), question)
        assert found is not None
        return found

    policy = parse_policy(["web.example.test", "*.slow.example.test"], [], answer_networks=(DOCUMENTATION,))
    resolver = PolicyResolver(policy, forward, Sets(), lambda r: None)
    tasks: list[asyncio.Task[None]] = []

    def spawn(coroutine: Coroutine[Any, Any, None]) -> object:
        tasks.append(asyncio.get_running_loop().create_task(coroutine))
        return tasks[-1]

    udp, tcp = await start_servers(resolver, spawn, port=0)
    tcp.close()
    asyncio.get_running_loop().remove_reader(udp.sock.fileno())  # the test calls the reader itself
    client = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    client.setblocking(False)
    client.connect(udp.sock.getsockname())
    client.send(query("web.example.test", 1))  # a miss whose answer becomes a hit
    udp._readable()
    await asyncio.gather(*tasks)
    assert [r.header.id for r in replies(client)] == [1]
    tasks.clear()
    return udp, resolver, client, tasks


def test_one_wakeup_answers_a_bounded_burst_of_hits_in_place() -> None:
    async def main() -> None:
        udp, _resolver, client, tasks = await serve(asyncio.Event())
        for qid in range(2, 2 + READS_PER_WAKEUP + 36):
            client.send(query("web.example.test", qid))
        udp._readable()
        first = replies(client)
        assert len(first) == READS_PER_WAKEUP and tasks == []  # answered as read, no task; then the loop's turn
        udp._readable()
        assert len(replies(client)) == 36
        assert all(r.header.id == n + 2 and r.rr[0].rdata == A("203.0.113.7") for n, r in enumerate(first))
        client.close()
        udp.close()

    asyncio.run(main())


def test_misses_past_the_inflight_bound_are_shed_and_hits_still_answered() -> None:
    async def main() -> None:
        held = asyncio.Event()
        udp, resolver, client, tasks = await serve(held)
        sent = 0
        while sent < MAX_INFLIGHT + 100:  # in bursts the socket buffer holds
            for _ in range(READS_PER_WAKEUP):
                client.send(query(f"n{sent}.slow.example.test", sent & 0xFFFF))
                sent += 1
            udp._readable()
        assert len(tasks) == MAX_INFLIGHT and udp.inflight == MAX_INFLIGHT  # the rest were dropped
        client.send(query("web.example.test", 7))
        udp._readable()
        assert [r.header.id for r in replies(client)] == [7]  # a hit needs no task: answered meanwhile
        held.set()
        await asyncio.gather(*tasks)
        assert udp.inflight == 0 and resolver.fetching == 0
        assert {r.header.rcode for r in replies(client)} == {0}  # answered (as many as the client's buffer held)
        client.send(query("n0.slow.example.test", 9))  # control: the server takes misses again
        udp._readable()
        assert len(tasks) == MAX_INFLIGHT + 1
        await asyncio.gather(*tasks)
        assert [r.header.id for r in replies(client)] == [9]
        client.close()
        udp.close()

    asyncio.run(main())
