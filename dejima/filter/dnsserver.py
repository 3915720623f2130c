"""The resolver's sockets toward the session, on one asyncio loop: UDP and TCP on 127.0.0.1:53.
(Its sockets toward the upstream resolvers are dns_upstream.py's.)

A plain repeated question is answered straight from the resolver's checked answers
(PolicyResolver.quick) as its datagram is read; everything else gets a task.

The servers shed load instead of queueing it: past ``MAX_INFLIGHT`` UDP queries or
``MAX_TCP_CLIENTS`` connections, new ones are dropped, so a flood from the session costs it
its own answers and never the filter's memory.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import sys
from collections.abc import Callable, Coroutine
from typing import Any

from dnslib import RCODE, DNSRecord

from dejima.filter.resolver import SELF_CHECK_NAME, PolicyResolver

MAX_INFLIGHT = 1024
READS_PER_WAKEUP = 64
DATAGRAM_BYTES = 65535  # the largest UDP payload: a longer query cannot arrive cut short
MAX_TCP_CLIENTS = 64
TCP_IDLE_SECONDS = 10.0

Spawn = Callable[[Coroutine[Any, Any, None]], object]


def _report_bug(where: str, exc: BaseException) -> None:
    # A query that makes the resolver fail is a bug, but it must not stop the other queries.
    print(f"dejima-filter: resolver error in {where}: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)


class _UdpServer:
    """UDP on a non-blocking socket the loop watches (not an asyncio transport: that reads one
    datagram per wake-up, into a fresh 256 KiB buffer). Each wake-up drains up to
    ``READS_PER_WAKEUP`` datagrams, so a burst of hits costs one trip through the loop, and the
    bound leaves the loop to the misses' tasks, the upstream replies and the control channel."""

    def __init__(self, resolver: PolicyResolver, spawn: Spawn, sock: socket.socket) -> None:
        self.resolver, self.spawn, self.sock = resolver, spawn, sock
        self.inflight = 0
        self.loop = asyncio.get_running_loop()
        self.loop.add_reader(sock.fileno(), self._readable)

    def _readable(self) -> None:
        recvfrom, quick = self.sock.recvfrom, self.resolver.quick
        for _ in range(READS_PER_WAKEUP):
            try:
                data, addr = recvfrom(DATAGRAM_BYTES)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # an error queued on the socket, not a datagram: the next read goes on
                continue
            try:
                reply = quick(data)  # a checked repeat: answered here, no task
            except Exception as exc:  # noqa: BLE001 - see _report_bug; the full path still answers
                _report_bug("udp hit", exc)
                reply = None
            if reply is not None:
                self._send(reply, addr)
            elif self.inflight < MAX_INFLIGHT:  # else shed: the client retries, the filter keeps its memory
                self.inflight += 1
                self.spawn(self._handle(data, addr))

    def _send(self, reply: bytes, addr: tuple[str, int]) -> None:
        try:
            self.sock.sendto(reply, addr)
        except OSError:
            pass  # a full send buffer or a client gone: UDP, the client asks again

    async def _handle(self, data: bytes, addr: tuple[str, int]) -> None:
        try:
            reply = await self.resolver.answer(data)
            if reply is not None and self.sock.fileno() >= 0:
                self._send(reply, addr)
        except Exception as exc:  # noqa: BLE001 - see _report_bug
            _report_bug("udp", exc)
        finally:
            self.inflight -= 1

    def close(self) -> None:
        if self.sock.fileno() >= 0:
            self.loop.remove_reader(self.sock.fileno())
            self.sock.close()


class _TcpServer:
    def __init__(self, resolver: PolicyResolver) -> None:
        self.resolver = resolver
        self.clients = 0

    async def __call__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.clients >= MAX_TCP_CLIENTS:
            writer.close()
            return
        self.clients += 1
        try:
            while True:
                async with asyncio.timeout(TCP_IDLE_SECONDS):
                    length = struct.unpack("!H", await reader.readexactly(2))[0]
                    packet = await reader.readexactly(length)
                reply = await self.resolver.answer(packet, max_size=65535)
                if reply is None:
                    break
                writer.write(struct.pack("!H", len(reply)) + reply)
                await writer.drain()
        except (TimeoutError, asyncio.IncompleteReadError, ConnectionError):
            pass
        except Exception as exc:  # noqa: BLE001 - see _report_bug
            _report_bug("tcp", exc)
        finally:
            self.clients -= 1
            writer.close()


async def start_servers(resolver: PolicyResolver, spawn: Spawn, address: str = "127.0.0.1",
                        port: int = 53) -> tuple[_UdpServer, asyncio.Server]:
    """UDP and TCP servers for ``resolver`` on the same port (0: pick one, same for both)."""
    tcp = await asyncio.start_server(_TcpServer(resolver), address, port, reuse_address=True)
    port = tcp.sockets[0].getsockname()[1]
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        sock.setblocking(False)
        sock.bind((address, port))
    except OSError:
        sock.close()
        tcp.close()
        raise
    return _UdpServer(resolver, spawn, sock), tcp


async def self_check(address: str = "127.0.0.1", port: int = 53, timeout: float = 5.0) -> None:
    """The resolver answers over UDP and TCP (a refusal for a name no policy can allow)."""
    query = DNSRecord.question(SELF_CHECK_NAME, "A")
    loop = asyncio.get_running_loop()
    async with asyncio.timeout(timeout):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.setblocking(False)
            sock.connect((address, port))
            await loop.sock_sendall(sock, query.pack())
            _expect_refused(await loop.sock_recv(sock, 4096), "UDP")
        reader, writer = await asyncio.open_connection(address, port)
        try:
            packed = query.pack()
            writer.write(struct.pack("!H", len(packed)) + packed)
            await writer.drain()
            length = struct.unpack("!H", await reader.readexactly(2))[0]
            _expect_refused(await reader.readexactly(length), "TCP")
        finally:
            writer.close()


def _expect_refused(data: bytes, transport: str) -> None:
    answer = DNSRecord.parse(data)
    if answer.header.rcode != RCODE.REFUSED:
        raise OSError(f"resolver self-check over {transport} got {RCODE.get(answer.header.rcode)}")
