"""One request's round trip to its upstream: send the head and body, stream the response back.

The request body flows to the upstream while the response is awaited (an upstream may answer
before it has read everything). Failures before the response head reach the client become a
502 or 504 whose body says what happened; after that, the client connection is closed, since a
started response cannot change its status.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from dejima.core.admission import Admission
from dejima.core.httpwire import (
    Framing,
    HttpError,
    RequestHead,
    ResponseHead,
    end_to_end,
    parse_response_head,
    response_framing,
    serialize_request,
    serialize_response,
    wants_keep_alive,
)
from dejima.proxy.http_streams import BodyCut, pipe, plain_response, relay_body
from dejima.proxy.services import ProxyServices
from dejima.proxy.upstream import UpstreamConnection, UpstreamError


@dataclass(frozen=True, slots=True)
class Outcome:
    status: int
    bytes_in: int = 0
    bytes_out: int = 0
    keep_alive: bool = False
    error: str = ""


class _Stale(Exception):
    """A reused upstream connection closed before answering (it had timed out on the upstream's side)."""


class Withheld(Exception):
    """Raised by a body sender that decided, once it had read the client's body, that the request
    must not complete upstream: the upstream connection is cut (the upstream never got the whole
    body), and the client gets ``answer`` (a whole response) instead."""

    def __init__(self, answer: bytes, outcome: Outcome) -> None:
        super().__init__(outcome.error)
        self.answer, self.outcome = answer, outcome


# Sends a request's body to the upstream (its writer given) and returns the bytes it took from the client.
BodySender = Callable[[asyncio.StreamWriter], Awaitable[int]]


class Exchange:
    def __init__(self, server: ProxyServices, head: RequestHead, framing: Framing, admission: Admission,
                 reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.server, self.head, self.framing, self.admission = server, head, framing, admission
        self.reader, self.writer = reader, writer
        self.upstream = admission.route.upstream
        self.target = admission.target  # toward the upstream; a git route's guard makes it canonical

    async def run(self, request: bytes, body: bytes | None = None, send: BodySender | None = None) -> Outcome:
        """Forward; ``body`` is a body already read (it replaces the client's framing); ``send``
        sends the body itself (on a new upstream connection: a body it streams cannot be sent twice)."""
        replayable = send is None and (body is not None or self.framing.kind == "none")
        for attempt in (0, 1):
            try:
                conn = await (self.server.pool.connect(self.upstream) if send is not None
                              else self.server.pool.acquire(self.upstream))
            except UpstreamError as exc:
                return await self.fail(exc.status, exc.message)
            try:
                return await self._round_trip(conn, request, body, send)
            except _Stale:
                conn.close()
                if attempt or not replayable:
                    return await self.fail(502, f"{self.upstream} closed the connection without answering")
            except BaseException:
                conn.close()
                raise
        raise AssertionError("unreachable")

    def continue_if_expected(self) -> None:
        """Answer ``Expect: 100-continue`` at once: the body is the proxy's to read, whatever the upstream says."""
        if (self.head.get(b"expect") or b"").lower() == b"100-continue":
            self.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    async def fail(self, status: int, message: str, body_read: bool = False) -> Outcome:
        """Answer the client ``status`` with ``message``; the connection stays open only when no
        unread body of the client's is left on it."""
        keep = body_read or self.framing.kind == "none"
        await self.server.answer(self.writer, status, message, close=not keep)
        return Outcome(status, keep_alive=keep, error=message)

    async def run_whole(self, headers: list[tuple[bytes, bytes]], body: bytes, length: bool = True) -> Outcome:
        """Forward a request whose body was read whole: the client's framing gives way to a
        Content-Length (``length``: even for an empty body)."""
        forwarded = [(k, v) for k, v in headers if k.lower() not in (b"content-length", b"transfer-encoding")]
        if length or body:
            forwarded.append((b"Content-Length", b"%d" % len(body)))
        outcome = await self.run(serialize_request(self.head.method, self.target, forwarded), body)
        return Outcome(outcome.status, len(body), outcome.bytes_out, outcome.keep_alive, outcome.error)

    async def _client_body_failed(self, error: str) -> Outcome:
        self.writer.write(plain_response(400, "Bad Request", error, close=True))
        return Outcome(400, keep_alive=False, error=error)

    async def _send(self, conn: UpstreamConnection, body: bytes | None,
                    send: BodySender | None) -> tuple[int, str] | Withheld:
        """(bytes sent, "" or what went wrong); a Withheld when ``send`` decided against the request."""
        try:
            if send is not None:
                return await send(conn.writer), ""
            if body is not None:
                conn.writer.write(body)
                await conn.writer.drain()
                return len(body), ""
            return await relay_body(self.reader, conn.writer, self.framing, self.server.idle), ""
        except Withheld as withheld:
            return withheld
        except HttpError as exc:  # the client's body is malformed (its chunks or trailers): recorded like a head
            self.server.violation("malformed-request", self.admission.route.name, exc.reason)
            return 0, f"request body not fully sent: {exc.reason}"
        except (BodyCut, ConnectionError, OSError, TimeoutError, asyncio.IncompleteReadError) as exc:
            return 0, f"request body not fully sent: {exc or type(exc).__name__}"

    async def _head_or_error(self, conn: UpstreamConnection) -> ResponseHead | UpstreamError | _Stale:
        """A TaskGroup child never raises (a raising child would cancel the answer to the client)."""
        try:
            return await self._response_head(conn)
        except (UpstreamError, _Stale) as exc:
            return exc

    async def _response_head(self, conn: UpstreamConnection) -> ResponseHead:
        while True:
            try:
                async with asyncio.timeout(self.server.config.response_timeout):
                    raw = await conn.reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError as exc:
                if conn.reused and not exc.partial:
                    raise _Stale() from None
                raise UpstreamError(502, f"{self.upstream} closed the connection without answering") from None
            except TimeoutError:
                raise UpstreamError(504, f"{self.upstream} did not answer within "
                                         f"{self.server.config.response_timeout:g} s") from None
            except (ConnectionError, OSError) as exc:
                if conn.reused:
                    raise _Stale() from None
                raise UpstreamError(502, f"{self.upstream} broke the connection: {exc}") from None
            except asyncio.LimitOverrunError:
                raise UpstreamError(502, f"{self.upstream} sent a response head that is too large") from None
            try:
                response = parse_response_head(raw)
            except HttpError as exc:
                raise UpstreamError(502, f"{self.upstream}: {exc.reason}") from None
            if response.status == 101 or not 100 <= response.status < 200:
                return response
            # 100 Continue was answered by the proxy itself; an HTTP/1.0 client gets no 1xx (RFC 9110
            # section 15.2). The head goes on as parsed (its reason phrase clean), not as it came.
            if response.status != 100 and self.head.version != "HTTP/1.0":
                self.writer.write(serialize_response(response.status, response.reason, response.headers))

    async def _round_trip(self, conn: UpstreamConnection, request: bytes, body: bytes | None,
                          send: BodySender | None) -> Outcome:
        conn.writer.write(request)
        async with asyncio.TaskGroup() as group:
            sender = group.create_task(self._send(conn, body, send))
            head = group.create_task(self._head_or_error(conn))
            await asyncio.wait((sender, head), return_when=asyncio.FIRST_COMPLETED)
            sent = sender.result() if sender.done() else None
            if not head.done() and isinstance(sent, Withheld):
                head.cancel()  # cut before the upstream got the whole body: it completes nothing
                conn.close()
                self.writer.write(sent.answer)
                await self.writer.drain()
                return sent.outcome
            if not head.done() and isinstance(sent, tuple) and sent[1]:
                head.cancel()  # the client's body was bad or cut: nothing more can go upstream
                conn.close()
                return await self._client_body_failed(sent[1])
            response = await head
            if isinstance(response, UpstreamError):
                sender.cancel()
                conn.close()
                return await self.fail(response.status, response.message)
            if isinstance(response, _Stale):
                sender.cancel()
                raise response
            if response.status == 101 and self.admission.upgrade:
                sender.cancel()
                return await self._upgrade(conn, response)
            outcome = await self._relay_response(conn, response, sender)
            if not sender.done():
                sender.cancel()
                outcome = Outcome(outcome.status, 0, outcome.bytes_out, False, outcome.error)
        return outcome

    async def _relay_response(self, conn: UpstreamConnection, response: ResponseHead,
                              sender: asyncio.Task[tuple[int, str] | Withheld]) -> Outcome:
        framing = response_framing(self.head.method, response)
        http10 = self.head.version == "HTTP/1.0"
        upstream_keep = wants_keep_alive(response.version, response.headers) and framing.kind != "close"
        keep = wants_keep_alive(self.head.version, self.head.headers) and upstream_keep \
            and not (http10 and framing.kind == "chunked")
        headers = end_to_end(response.headers)
        if framing.kind == "chunked" and not http10:
            headers.append((b"Transfer-Encoding", b"chunked"))
        headers.append((b"Connection", b"keep-alive" if keep else b"close"))
        self.writer.write(serialize_response(response.status, response.reason, headers))
        try:
            sent = await relay_body(conn.reader, self.writer, framing, self.server.idle, rechunk=not http10)
            await self.writer.drain()
        except (BodyCut, HttpError, TimeoutError, asyncio.IncompleteReadError, ConnectionError, OSError) as exc:
            conn.close()
            return Outcome(response.status, 0, 0, False, f"response cut: {exc or type(exc).__name__}")
        done = sender.result() if sender.done() else (0, "")
        bytes_in, error = done if isinstance(done, tuple) else (0, done.outcome.error)
        if upstream_keep and sender.done() and not error:
            self.server.pool.release(conn)
        else:
            conn.close()
        return Outcome(response.status, bytes_in, sent, keep and not error, error or _note(response))

    async def _upgrade(self, conn: UpstreamConnection, response: ResponseHead) -> Outcome:
        headers = end_to_end(response.headers)
        headers += [(b"Connection", b"Upgrade"), (b"Upgrade", response.get(b"upgrade") or b"websocket")]
        self.writer.write(serialize_response(101, response.reason, headers))
        async with asyncio.TaskGroup() as group:
            up = group.create_task(pipe(self.reader, conn.writer))
            down = group.create_task(pipe(conn.reader, self.writer))
        conn.close()
        return Outcome(101, up.result(), down.result(), False, _note(response))


def _note(response: ResponseHead) -> str:
    """What the ledger says of a response the proxy passed on changed (httpwire.parse_response_head)."""
    if response.reason_replaced:
        return f"the upstream's reason phrase held control characters; the session got {response.reason!r}"
    return ""
