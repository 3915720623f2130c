"""The resolver's sockets, on one asyncio loop: UDP and TCP on 127.0.0.1:53 for the session, and
marked sockets toward the upstream resolvers.

Upstream queries leave from a fresh socket each (a random source port picked by the kernel and a
random id, so replies are hard to forge) that carries the resolver mark: the ruleset lets only
marked packets reach an upstream, and setting a mark needs CAP_NET_ADMIN, which the session
lacks. A reply counts only when it answers the very question asked (query.answers_question).

A plain repeated question is answered straight from the resolver's checked answers
(PolicyResolver.quick) in the datagram callback; everything else gets a task.

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

from dejima.filter.query import answers_question
from dejima.filter.resolver import SELF_CHECK_NAME, PolicyResolver, UpstreamError

SO_MARK = 36
MAX_INFLIGHT = 1024
MAX_TCP_CLIENTS = 64
TCP_IDLE_SECONDS = 10.0

Spawn = Callable[[Coroutine[Any, Any, None]], object]


class Forwarder:
    """Sends the resolver's own query to the upstreams in turn: UDP, then TCP when truncated."""

    def __init__(self, upstreams: list[str], mark: int, timeout: float = 2.5, port: int = 53) -> None:
        self.upstreams, self.mark, self.timeout, self.port = upstreams, mark, timeout, port

    def _socket(self, kind: int) -> socket.socket:
        sock = socket.socket(socket.AF_INET, kind)
        try:
            if self.mark:
                sock.setsockopt(socket.SOL_SOCKET, SO_MARK, self.mark)
            sock.setblocking(False)
        except OSError:
            sock.close()
            raise
        return sock

    async def __call__(self, query: DNSRecord) -> DNSRecord:
        errors: list[str] = []
        for upstream in self.upstreams:
            try:
                async with asyncio.timeout(self.timeout):
                    reply = await self._udp(query, upstream)
                    if reply.header.tc:
                        reply = await self._tcp(query, upstream)
                return reply
            except TimeoutError:
                errors.append(f"{upstream}: no answer within {self.timeout:g} s")
            except (OSError, ValueError, EOFError) as exc:
                errors.append(f"{upstream}: {exc}")
        raise UpstreamError("; ".join(errors) or "no upstream resolver configured")

    async def _udp(self, query: DNSRecord, upstream: str) -> DNSRecord:
        loop = asyncio.get_running_loop()
        with self._socket(socket.SOCK_DGRAM) as sock:
            sock.connect((upstream, self.port))
            await loop.sock_sendall(sock, query.pack())
            while True:  # until the reply to this very question (anything else is ignored)
                data = await loop.sock_recv(sock, 65535)
                reply = _parse(data)
                if reply is not None and answers_question(reply, query):
                    return reply

    async def _tcp(self, query: DNSRecord, upstream: str) -> DNSRecord:
        loop = asyncio.get_running_loop()
        sock = self._socket(socket.SOCK_STREAM)
        try:
            await loop.sock_connect(sock, (upstream, self.port))
        except BaseException:
            sock.close()
            raise
        reader, writer = await asyncio.open_connection(sock=sock)
        try:
            packed = query.pack()
            writer.write(struct.pack("!H", len(packed)) + packed)
            await writer.drain()
            length = struct.unpack("!H", await reader.readexactly(2))[0]
            reply = _parse(await reader.readexactly(length))
            if reply is None or not answers_question(reply, query):
                raise ValueError("the TCP reply does not answer the question")
            return reply
        finally:
            writer.close()


def _parse(data: bytes) -> DNSRecord | None:
    try:
        return DNSRecord.parse(data)
    except Exception:  # noqa: BLE001 - garbage from the network is ignored, whatever dnslib raises
        return None


def _report_bug(where: str, exc: BaseException) -> None:
    # A query that makes the resolver fail is a bug, but it must not stop the other queries.
    print(f"dejima-filter: resolver error in {where}: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)


class _UdpServer(asyncio.DatagramProtocol):
    def __init__(self, resolver: PolicyResolver, spawn: Spawn) -> None:
        self.resolver, self.spawn = resolver, spawn
        self.inflight = 0
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        try:
            reply = self.resolver.quick(data)  # a checked repeat: answered here, no task
        except Exception as exc:  # noqa: BLE001 - see _report_bug; the full path still answers
            _report_bug("udp hit", exc)
            reply = None
        if reply is not None:
            if self.transport is not None:
                self.transport.sendto(reply, addr)
            return
        if self.inflight >= MAX_INFLIGHT:
            return  # shed: the client retries, the filter keeps its memory
        self.inflight += 1
        self.spawn(self._handle(data, addr))

    def error_received(self, exc: Exception) -> None:
        pass  # an ICMP error for a reply the client no longer waits for: nothing to do

    async def _handle(self, data: bytes, addr: tuple[str, int]) -> None:
        try:
            reply = await self.resolver.answer(data)
            if reply is not None and self.transport is not None:
                self.transport.sendto(reply, addr)
        except Exception as exc:  # noqa: BLE001 - see _report_bug
            _report_bug("udp", exc)
        finally:
            self.inflight -= 1


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
                        port: int = 53) -> tuple[asyncio.DatagramTransport, asyncio.Server]:
    """UDP and TCP servers for ``resolver`` on the same port (0: pick one, same for both)."""
    loop = asyncio.get_running_loop()
    tcp = await asyncio.start_server(_TcpServer(resolver), address, port, reuse_address=True)
    port = tcp.sockets[0].getsockname()[1]
    udp, _ = await loop.create_datagram_endpoint(lambda: _UdpServer(resolver, spawn), local_addr=(address, port))
    return udp, tcp


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
