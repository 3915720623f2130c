"""The resolver's queries to its upstreams: UDP over a few marked, connected sockets, TCP when
an answer is truncated.

Every upstream socket carries the resolver mark: the ruleset lets only marked packets reach an
upstream (even on a flow the resolver opened), and setting a mark needs CAP_NET_ADMIN, which the
session lacks. A UDP socket is *connected* to its upstream, so the kernel hands it only
datagrams from that address and port; the session, which shares the namespace, can send to the
socket's port but cannot send from the upstream's address (not a local address, and spoofing
one needs CAP_NET_RAW). Behind that, a reply counts only when its id is one this socket has
outstanding and it answers exactly the question asked with that id; anything else is dropped.

Sockets are reused, a bounded number of times (``USES``), then retired and closed once their
last query is answered: the kernel picks each new socket's source port at random, so ports keep
changing, and each query gets a random id unused on its socket. A socket left idle for
``IDLE_SECONDS`` is closed. A closed socket's port can be bound by the session, but what it
sends from there lacks the mark and is refused before the flow's conntrack entry is consulted.
"""

from __future__ import annotations

import asyncio
import random
import socket
import struct
from dataclasses import dataclass

from dejima.filter.answer import Answer, DnsUpstreamError, parse
from dejima.filter.dns_wire import Question
from dejima.filter.query import upstream_query

SO_MARK = 36
SOCKETS = 4  # sockets per upstream taking new queries
USES = 64  # queries a socket carries before it is retired (a fresh random port after that)
IDLE_SECONDS = 1.0  # an idle socket is closed after this long
READS_PER_WAKEUP = 64


@dataclass(slots=True)
class _Waiting:
    section: bytes  # our question section, name lower-case
    question: Question
    future: asyncio.Future[Answer]


def _match(data: bytes, section: bytes) -> bool:
    """Is ``data`` a reply (qr set) with one question, exactly ``section`` (the name compared
    without case)?"""
    end = 12 + len(section)
    return (len(data) >= end and data[2] & 0x80 != 0 and data[4:6] == b"\x00\x01"
            and data[12:end - 4].lower() == section[:-4] and data[end - 4:end] == section[-4:])


class _Flow:
    """One connected UDP socket toward one upstream, and the queries it has outstanding."""

    def __init__(self, loop: asyncio.AbstractEventLoop, peer: tuple[str, int], mark: int) -> None:
        self.loop, self.peer = loop, peer
        self.sock = _socket(socket.SOCK_DGRAM, mark)
        try:
            self.sock.connect(peer)  # the kernel binds a random source port
        except OSError:
            self.sock.close()
            raise
        self.pending: dict[int, _Waiting] = {}
        self.uses = 0
        self.retired = False
        self.last_used = loop.time()
        self.idle: asyncio.TimerHandle | None = None
        loop.add_reader(self.sock.fileno(), self._readable)

    def ask(self, question: Question) -> tuple[int, asyncio.Future[Answer]]:
        while True:
            qid, packet, section = upstream_query(question)
            if qid not in self.pending:
                break
        future: asyncio.Future[Answer] = self.loop.create_future()
        self.pending[qid] = _Waiting(section, question, future)
        self.uses += 1
        self.last_used = self.loop.time()
        try:
            self.sock.send(packet)
        except OSError:
            del self.pending[qid]
            raise
        return qid, future

    def done(self, qid: int, future: asyncio.Future[Answer]) -> None:
        """The query ``qid`` is over (answered, timed out or cancelled)."""
        waiting = self.pending.get(qid)
        if waiting is not None and waiting.future is future:
            del self.pending[qid]
        if self.pending:
            return
        if self.retired:
            self.close()
        elif self.idle is None:
            self.idle = self.loop.call_later(IDLE_SECONDS, self._idle_check)

    def _idle_check(self) -> None:
        self.idle = None
        if self.pending or self.retired:
            return
        left = self.last_used + IDLE_SECONDS - self.loop.time()
        if left > 0:
            self.idle = self.loop.call_later(left, self._idle_check)
        else:
            self.retired = True
            self.close()

    def _readable(self) -> None:
        for _ in range(READS_PER_WAKEUP):
            try:
                data, peer = self.sock.recvfrom(65535)
            except BlockingIOError:
                return
            except OSError as exc:  # an ICMP error for this flow (port unreachable): its queries fail
                self._fail(exc)
                return
            if peer != self.peer or len(data) < 12:
                continue  # the socket is connected; this is only a second look
            waiting = self.pending.get((data[0] << 8) | data[1])
            if waiting is None or waiting.future.done() or not _match(data, waiting.section):
                continue
            found = parse(data, waiting.question, 12 + len(waiting.section))
            if found is not None:
                waiting.future.set_result(found)

    def _fail(self, exc: BaseException) -> None:
        for waiting in self.pending.values():
            if not waiting.future.done():
                waiting.future.set_exception(OSError(f"{exc}"))

    def close(self) -> None:
        if self.idle is not None:
            self.idle.cancel()
            self.idle = None
        if self.sock.fileno() >= 0:
            self.loop.remove_reader(self.sock.fileno())
            self.sock.close()
        self._fail(ConnectionAbortedError("the upstream socket was closed"))


def _socket(kind: int, mark: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, kind)
    try:
        if mark:
            sock.setsockopt(socket.SOL_SOCKET, SO_MARK, mark)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


class Forwarder:
    """Sends the resolver's own query to the upstreams in turn: UDP, then TCP when truncated."""

    def __init__(self, upstreams: list[str], mark: int, timeout: float = 2.5, port: int = 53) -> None:
        self.upstreams, self.mark, self.timeout, self.port = upstreams, mark, timeout, port
        self.flows: dict[str, list[_Flow]] = {}  # per upstream, the sockets taking new queries

    async def __call__(self, question: Question) -> Answer:
        errors: list[str] = []
        for upstream in self.upstreams:
            try:
                async with asyncio.timeout(self.timeout):
                    found = await self._udp(question, upstream)
                    if found.truncated:
                        found = await self._tcp(question, upstream)
                return found
            except TimeoutError:
                errors.append(f"{upstream}: no answer within {self.timeout:g} s")
            except (OSError, ValueError, EOFError) as exc:
                errors.append(f"{upstream}: {exc}")
        raise DnsUpstreamError("; ".join(errors) or "no upstream resolver configured")

    def close(self) -> None:
        """Close the sockets that take new queries (retired ones close with their last query)."""
        for flows in self.flows.values():
            for flow in flows:
                flow.retired = True
                flow.close()
        self.flows.clear()

    def _flow(self, upstream: str) -> _Flow:
        loop = asyncio.get_running_loop()
        active = self.flows.setdefault(upstream, [])
        active[:] = [flow for flow in active if not flow.retired]
        if len(active) < SOCKETS:
            flow = _Flow(loop, (upstream, self.port), self.mark)
            active.append(flow)
        else:
            flow = random.choice(active)
        if flow.uses + 1 >= USES:
            flow.retired = True  # closed once its last query is over
            active.remove(flow)
        return flow

    async def _udp(self, question: Question, upstream: str) -> Answer:
        flow = self._flow(upstream)
        qid, future = flow.ask(question)
        try:
            return await future
        finally:
            flow.done(qid, future)

    async def _tcp(self, question: Question, upstream: str) -> Answer:
        loop = asyncio.get_running_loop()
        sock = _socket(socket.SOCK_STREAM, self.mark)
        try:
            await loop.sock_connect(sock, (upstream, self.port))
        except BaseException:
            sock.close()
            raise
        reader, writer = await asyncio.open_connection(sock=sock)
        try:
            _qid, packet, section = upstream_query(question)
            writer.write(struct.pack("!H", len(packet)) + packet)
            await writer.drain()
            length = struct.unpack("!H", await reader.readexactly(2))[0]
            data = await reader.readexactly(length)
            found = parse(data, question, 12 + len(section)) if data[:2] == packet[:2] and _match(data, section) \
                else None
            if found is None:
                raise ValueError("the TCP reply does not answer the question")
            return found
        finally:
            writer.close()
