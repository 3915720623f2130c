"""Moving HTTP/1.1 bodies between two asyncio streams, chunk by chunk, never buffering a response.

Each relay reads what has arrived and writes it on at once, so a server-sent event or a slow
chunk reaches the client when the upstream sends it. ``Idle`` bounds the wait for each read.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from dejima.core.httpwire import (
    MAX_TRAILER_BYTES,
    Framing,
    Headers,
    HttpError,
    parse_chunk_size,
    parse_trailers,
    serialize_response,
)
from dejima.proxy.budget import Hold

READ_SIZE = 256 * 1024


class Idle:
    """A per-read deadline: each read may wait at most ``seconds`` (asyncio.timeout, rescheduled)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    async def read(self, reader: asyncio.StreamReader, size: int) -> bytes:
        async with asyncio.timeout(self.seconds):
            return await reader.read(size)

    async def readline(self, reader: asyncio.StreamReader) -> bytes:
        async with asyncio.timeout(self.seconds):
            try:
                return await reader.readuntil(b"\r\n")
            except asyncio.LimitOverrunError:
                raise HttpError(400, "chunk-size or trailer line too long") from None

    async def readexactly(self, reader: asyncio.StreamReader, size: int) -> bytes:
        async with asyncio.timeout(self.seconds):
            return await reader.readexactly(size)


class BodyCut(Exception):
    """The sending side ended before its body did."""


async def body_pieces(src: asyncio.StreamReader, framing: Framing, idle: Idle) -> AsyncIterator[bytes]:
    """A body's data as it arrives, de-framed (chunk sizes, extensions and trailers dropped, trailers
    once read and checked), one read (at most READ_SIZE bytes) at a time; raises BodyCut when the
    sender ends before its body does, HttpError when its framing or trailers are malformed."""
    if framing.kind == "length":
        left = framing.length
        while left:
            data = await idle.read(src, min(left, READ_SIZE))
            if not data:
                raise BodyCut(f"{framing.length - left} of {framing.length} body bytes arrived")
            left -= len(data)
            yield data
    elif framing.kind == "chunked":
        async for data in _chunks(src, idle):
            yield data
    elif framing.kind == "close":
        while data := await idle.read(src, READ_SIZE):
            yield data


async def _chunks(src: asyncio.StreamReader, idle: Idle) -> AsyncIterator[bytes]:
    try:
        while size := parse_chunk_size(await idle.readline(src)):
            while size:
                data = await idle.read(src, min(size, READ_SIZE))
                if not data:
                    raise BodyCut("the chunked body ended inside a chunk")
                size -= len(data)
                yield data
            if await idle.readexactly(src, 2) != b"\r\n":
                raise HttpError(400, "chunk data not followed by CRLF")
        await _trailers(src, idle)
    except asyncio.IncompleteReadError:
        raise BodyCut("the chunked body ended early") from None


async def _trailers(src: asyncio.StreamReader, idle: Idle) -> Headers:
    """The trailer section, read line by line (each at most the stream's limit), each line checked as
    it arrives and the whole within MAX_TRAILER_BYTES, so neither a malformed nor an endless section
    holds the connection; raises HttpError. _chunks drops the fields it returns: no trailer is forwarded."""
    section = line = b""
    while line != b"\r\n":
        line = await idle.readline(src)
        section += line
        if len(section) > MAX_TRAILER_BYTES:
            raise HttpError(400, f"trailer section larger than {MAX_TRAILER_BYTES} bytes")
        if line != b"\r\n":
            parse_trailers(line + b"\r\n")  # this line alone, at once
    return parse_trailers(section)


class BodyWriter:
    """Writes a body's data toward one peer, framed as that peer is told (``chunked``: one chunk per
    write, so a streamed event leaves at once), waiting for the peer to take each write."""

    def __init__(self, dst: asyncio.StreamWriter, chunked: bool) -> None:
        self.dst, self.chunked = dst, chunked
        self.total = 0

    async def write(self, data: bytes) -> None:
        if not data:
            return
        self.total += len(data)
        if self.chunked:
            self.dst.write(b"%x\r\n" % len(data))
            self.dst.write(data)
            self.dst.write(b"\r\n")
        else:
            self.dst.write(data)
        await self.dst.drain()

    async def end(self) -> None:
        if self.chunked:
            self.dst.write(b"0\r\n\r\n")
            await self.dst.drain()


async def relay_body(src: asyncio.StreamReader, dst: asyncio.StreamWriter, framing: Framing, idle: Idle,
                     rechunk: bool = True) -> int:
    """Forward a body as it arrives. A chunked body is re-chunked (``rechunk=False`` writes the data
    alone, toward an HTTP/1.0 client, which ends at close)."""
    writer = BodyWriter(dst, chunked=rechunk and framing.kind == "chunked")
    async for data in body_pieces(src, framing, idle):
        await writer.write(data)
    await writer.end()
    return writer.total


class OverBudget(HttpError):
    """A body the proxy must hold went past the session's budget (dejima.proxy.budget)."""


async def read_body(src: asyncio.StreamReader, framing: Framing, idle: Idle, limit: int, hold: Hold) -> bytes:
    """The whole de-framed body, for the few requests the proxy must read before forwarding: at most
    ``limit`` bytes (413 past it), each byte reserved in ``hold`` first (OverBudget when refused)."""
    if framing.kind == "length" and framing.length > limit:
        raise HttpError(413, f"request body larger than {limit} bytes")
    parts: list[bytes] = []
    size = 0
    async for data in body_pieces(src, framing, idle):
        size += len(data)
        if size > limit:
            raise HttpError(413, f"request body larger than {limit} bytes")
        if not hold.reserve(len(data)):
            raise OverBudget(413, hold.budget.refusal())
        parts.append(data)
    return b"".join(parts)


async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> int:
    """Copy bytes one way until EOF (a websocket after 101), then half-close the other side."""
    total = 0
    try:
        while data := await src.read(READ_SIZE):
            total += len(data)
            dst.write(data)
            await dst.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        if dst.can_write_eof():
            try:
                dst.write_eof()
            except (ConnectionError, OSError):
                pass
    return total


def plain_response(status: int, reason: str, message: str, close: bool, extra: Headers | None = None) -> bytes:
    body = f"dejima proxy: {message}\n".encode("utf-8", "replace")
    headers: Headers = [(b"Content-Type", b"text/plain; charset=utf-8"), (b"Content-Length", b"%d" % len(body)),
                        (b"X-Dejima-Proxy", b"refused" if status < 500 else b"upstream-error")]
    headers += extra or []
    if close:
        headers.append((b"Connection", b"close"))
    return serialize_response(status, reason, headers) + body


async def close_writer(writer: asyncio.StreamWriter, timeout: float = 2.0) -> None:
    """Close a stream and wait (bounded) until its transport is gone."""
    writer.close()
    try:
        async with asyncio.timeout(timeout):
            await writer.wait_closed()
    except (ConnectionError, OSError, TimeoutError, asyncio.CancelledError):
        pass
