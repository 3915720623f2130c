"""The resolver's upstream sockets (dns_upstream.py), against a fake upstream on loopback: replies
count only from the upstream's address and port, with an id the socket has outstanding and the
very question asked; sockets are reused a bounded number of times, then closed."""

from __future__ import annotations

import asyncio
import socket
import struct
from collections import Counter
from collections.abc import Iterator

import pytest

from dejima.filter import dns_upstream
from dejima.filter.answer import Answer, address
from dejima.filter.dns_upstream import Forwarder
from dejima.filter.dns_wire import Question, encode_name


def reply(query: bytes, ip: str, qid: bytes | None = None, name: str | None = None) -> bytes:
    """An answer to ``query`` (its id and question, unless told otherwise) pointing at ``ip``."""
    section = query[12:len(query) - 11]  # the question, before our OPT record
    if name is not None:
        section = encode_name(name) + section[-4:]
    head = (qid or query[:2]) + struct.pack("!HHHHH", 0x8180, 1, 1, 0, 0)
    return head + section + b"\xc0\x0c" + struct.pack("!HHIH", 1, 1, 60, 4) + socket.inet_aton(ip)


def addresses_of(found: Answer) -> list[str]:
    return [address(rec) for rec in found.records if rec.rtype == 1]


@pytest.fixture
def fake() -> Iterator[socket.socket]:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.setblocking(False)
        yield sock


def test_forged_replies_are_dropped_and_the_upstreams_own_counts(fake: socket.socket) -> None:
    forward = Forwarder(["127.0.0.1"], mark=0, timeout=2.0, port=fake.getsockname()[1])

    async def main() -> Answer:
        loop = asyncio.get_running_loop()
        async with asyncio.TaskGroup() as tasks:
            asked = tasks.create_task(forward(Question("web.example.test", 1)))
            query, resolver = await loop.sock_recvfrom(fake, 4096)
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as forger:  # same host, another port
                forger.sendto(reply(query, "203.0.113.66"), resolver)
            wrong_id = bytes([query[0] ^ 0xFF, query[1]])
            fake.sendto(reply(query, "203.0.113.67", qid=wrong_id), resolver)
            fake.sendto(reply(query, "203.0.113.68", name="other.example.test"), resolver)
            fake.sendto(reply(query, "203.0.113.7"), resolver)  # control: the genuine answer counts
        forward.close()
        return asked.result()

    assert addresses_of(asyncio.run(main())) == ["203.0.113.7"]


def test_sockets_are_reused_a_bounded_number_of_times_with_fresh_ids(fake: socket.socket,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dns_upstream, "USES", 5)
    forward = Forwarder(["127.0.0.1"], mark=0, timeout=2.0, port=fake.getsockname()[1])
    seen: list[tuple[int, bytes]] = []  # (source port, id) of every query

    async def answer_all(count: int) -> None:
        loop = asyncio.get_running_loop()
        for _ in range(count):
            query, peer = await loop.sock_recvfrom(fake, 4096)
            seen.append((peer[1], query[:2]))
            n = int(query[14:13 + query[12]])  # qN.example.test: N
            fake.sendto(reply(query, f"203.0.113.{n}"), peer)

    async def main() -> list[list[str]]:
        async with asyncio.TaskGroup() as tasks:
            tasks.create_task(answer_all(40))
            asked = [tasks.create_task(forward(Question(f"q{n}.example.test", 1))) for n in range(40)]
        assert len([flow for flows in forward.flows.values() for flow in flows]) <= dns_upstream.SOCKETS
        forward.close()
        return [addresses_of(task.result()) for task in asked]

    assert asyncio.run(main()) == [[f"203.0.113.{n}"] for n in range(40)]  # each its own answer
    per_port = Counter(port for port, _id in seen)
    assert len(per_port) >= 40 // 5 and max(per_port.values()) <= 5, per_port  # fresh ports as they rotate
    assert len(set(seen)) == len(seen)  # no id twice on one socket


def test_a_retired_socket_is_closed_once_its_last_query_is_answered(fake: socket.socket,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dns_upstream, "USES", 1)
    forward = Forwarder(["127.0.0.1"], mark=0, timeout=2.0, port=fake.getsockname()[1])

    async def main() -> tuple[socket.socket, Answer]:
        loop = asyncio.get_running_loop()
        async with asyncio.TaskGroup() as tasks:
            asked = tasks.create_task(forward(Question("web.example.test", 1)))
            query, peer = await loop.sock_recvfrom(fake, 4096)
            (flow,) = [f for f in _all_flows(forward, retired=True)]
            fake.sendto(reply(query, "203.0.113.7"), peer)
        forward.close()
        return flow.sock, asked.result()

    sock, found = asyncio.run(main())
    assert addresses_of(found) == ["203.0.113.7"] and sock.fileno() == -1


def _all_flows(forward: Forwarder, retired: bool) -> list[dns_upstream._Flow]:
    import gc

    return [obj for obj in gc.get_objects() if isinstance(obj, dns_upstream._Flow) and obj.retired == retired
            and obj.peer[1] == forward.port and obj.sock.fileno() >= 0]
