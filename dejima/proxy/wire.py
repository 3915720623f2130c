"""Moving HTTP/1.1 bodies between two asyncio streams, chunk by chunk, never buffering a response.

Each relay reads what has arrived and writes it on at once, so a server-sent event or a slow
chunk reaches the client when the upstream sends it. ``Idle`` bounds the wait for each read.
"""

from __future__ import annotations

import asyncio

from dejima.core.httpwire import Framing, Headers, HttpError, parse_chunk_size, serialize_response

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
                raise HttpError(400, "chunk size line too long") from None

    async def readexactly(self, reader: asyncio.StreamReader, size: int) -> bytes:
        async with asyncio.timeout(self.seconds):
            return await reader.readexactly(size)


class BodyCut(Exception):
    """The sending side ended before its body did."""


async def relay_length(src: asyncio.StreamReader, dst: asyncio.StreamWriter, length: int, idle: Idle) -> int:
    left = length
    while left:
        data = await idle.read(src, min(left, READ_SIZE))
        if not data:
            raise BodyCut(f"{length - left} of {length} body bytes arrived")
        left -= len(data)
        dst.write(data)
        await dst.drain()
    return length


async def relay_until_close(src: asyncio.StreamReader, dst: asyncio.StreamWriter, idle: Idle) -> int:
    total = 0
    while data := await idle.read(src, READ_SIZE):
        total += len(data)
        dst.write(data)
        await dst.drain()
    return total


async def relay_chunked(src: asyncio.StreamReader, dst: asyncio.StreamWriter, idle: Idle,
                        rechunk: bool = True) -> int:
    """Forward a chunked body chunk by chunk, framing normalised (extensions and trailers dropped).

    ``rechunk=False`` writes the data alone (toward an HTTP/1.0 client, which ends at close).
    """
    total = 0
    while True:
        try:
            size = parse_chunk_size(await idle.readline(src))
        except asyncio.IncompleteReadError:
            raise BodyCut("the chunked body ended early") from None
        if size == 0:
            break
        if rechunk:
            dst.write(b"%x\r\n" % size)
        left = size
        while left:
            data = await idle.read(src, min(left, READ_SIZE))
            if not data:
                raise BodyCut("the chunked body ended inside a chunk")
            left -= len(data)
            dst.write(data)
        total += size
        try:
            if await idle.readexactly(src, 2) != b"\r\n":
                raise HttpError(400, "chunk data not followed by CRLF")
        except asyncio.IncompleteReadError:
            raise BodyCut("the chunked body ended early") from None
        if rechunk:
            dst.write(b"\r\n")
        await dst.drain()
    while True:  # trailer section: read and drop
        try:
            line = await idle.readline(src)
        except asyncio.IncompleteReadError:
            raise BodyCut("the chunked body ended in its trailers") from None
        if line == b"\r\n":
            break
    if rechunk:
        dst.write(b"0\r\n\r\n")
        await dst.drain()
    return total


async def relay_body(src: asyncio.StreamReader, dst: asyncio.StreamWriter, framing: Framing, idle: Idle,
                     rechunk: bool = True) -> int:
    if framing.kind == "length":
        return await relay_length(src, dst, framing.length, idle)
    if framing.kind == "chunked":
        return await relay_chunked(src, dst, idle, rechunk)
    if framing.kind == "close":
        return await relay_until_close(src, dst, idle)
    return 0


class _Collector:
    """A writer-shaped sink that keeps what it is given, up to a limit."""

    def __init__(self, limit: int) -> None:
        self.parts: list[bytes] = []
        self.size, self.limit = 0, limit

    def write(self, data: bytes) -> None:
        self.size += len(data)
        if self.size > self.limit:
            raise HttpError(413, f"request body larger than {self.limit} bytes")
        self.parts.append(data)

    async def drain(self) -> None:
        return None


async def read_body(src: asyncio.StreamReader, framing: Framing, idle: Idle, limit: int) -> bytes:
    """The whole de-framed body, for the few requests the proxy must read before forwarding."""
    sink = _Collector(limit)
    if framing.kind == "length" and framing.length > limit:
        raise HttpError(413, f"request body larger than {limit} bytes")
    await relay_body(src, sink, framing, idle, rechunk=False)  # type: ignore[arg-type]
    return b"".join(sink.parts)


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
