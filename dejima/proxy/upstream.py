"""Connections to upstreams: TLS with the system's trust (plus optional extra CA bundles), kept alive.

Only the proxy's own configuration names an upstream (a route's URL), never the request, so a
connection here can only reach the services the session's routes allow. Behind an upstream
(corporate) proxy (core/upstream_proxy.py) an https upstream is reached through it: CONNECT
host:port, then TLS to the upstream inside that tunnel, verified as directly. A plain http upstream
is this host's loopback (a test world, a local gateway): always direct.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections import deque
from dataclasses import dataclass, field

from dejima.core.credentials import Upstream
from dejima.core.tunnel import MAX_ANSWER, answer_status, connect_request, status_line
from dejima.proxy.http_streams import close_writer

IDLE_KEEP = 30.0  # seconds an idle upstream connection is kept
MAX_IDLE_PER_UPSTREAM = 8


class UpstreamError(Exception):
    """Connecting to an upstream failed; ``status`` is 502 or 504 for the client."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(slots=True, eq=False)
class UpstreamConnection:
    upstream: Upstream
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    live: set[UpstreamConnection]  # the pool's open connections; this one leaves it when closed
    reused: bool = False
    idle_since: float = field(default_factory=time.monotonic)

    def close(self) -> None:
        """Drop the connection at once: a graceful TLS close could wait on a stalled upstream."""
        self.live.discard(self)
        self.writer.transport.abort()

    __hash__ = object.__hash__


def tls_context(*extra_ca_files: str | None) -> ssl.SSLContext:
    context = ssl.create_default_context()
    for extra in extra_ca_files:
        if extra:
            context.load_verify_locations(cafile=extra)
    return context


class UpstreamPool:
    def __init__(self, extra_ca_file: str | None = None, connect_timeout: float = 10.0,
                 via: tuple[str, int] | None = None, via_ca_file: str | None = None) -> None:
        """``via``: the upstream proxy (host, port) https upstreams are reached through; ``via_ca_file``:
        the CA it re-signs TLS with, when it inspects (trusted too)."""
        self._tls = tls_context(extra_ca_file, via_ca_file)
        self._connect_timeout = connect_timeout
        self._via = via
        self._idle: dict[Upstream, deque[UpstreamConnection]] = {}
        self._live: set[UpstreamConnection] = set()

    async def acquire(self, upstream: Upstream) -> UpstreamConnection:
        idle = self._idle.get(upstream)
        now = time.monotonic()
        while idle:
            conn = idle.pop()
            if now - conn.idle_since < IDLE_KEEP and not conn.reader.at_eof() and not conn.writer.is_closing():
                conn.reused = True
                return conn
            conn.close()
        return await self.connect(upstream)

    async def connect(self, upstream: Upstream) -> UpstreamConnection:
        tls = self._tls if upstream.scheme == "https" else None
        try:
            async with asyncio.timeout(self._connect_timeout):
                if tls is not None and self._via is not None:
                    reader, writer = await self._tunnel(upstream, tls)
                else:
                    reader, writer = await asyncio.open_connection(
                        upstream.host, upstream.port, ssl=tls, server_hostname=upstream.host if tls else None,
                        limit=64 * 1024)
        except TimeoutError:
            raise UpstreamError(504, f"connecting to {upstream} timed out after {self._connect_timeout:g} s") from None
        except ssl.SSLCertVerificationError as exc:
            raise UpstreamError(502, f"the TLS certificate of {upstream} was not accepted: {exc.verify_message}") \
                from None
        except (OSError, ssl.SSLError) as exc:
            raise UpstreamError(502, f"could not connect to {upstream}: {exc.strerror or exc}") from None
        conn = UpstreamConnection(upstream, reader, writer, self._live)
        self._live.add(conn)
        return conn

    async def _tunnel(self, upstream: Upstream, tls: ssl.SSLContext) -> tuple[asyncio.StreamReader,
                                                                               asyncio.StreamWriter]:
        """A connection to the upstream proxy, CONNECT to ``upstream``, then TLS to it inside the tunnel."""
        assert self._via is not None
        host, port = self._via
        target = f"{upstream.host}:{upstream.port}"
        reader, writer = await asyncio.open_connection(host, port, limit=64 * 1024)
        try:
            writer.write(connect_request(target))
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError):
                raise UpstreamError(502, f"the upstream proxy {host}:{port} gave no answer to CONNECT {target}") \
                    from None
            status = answer_status(head)
            if len(head) > MAX_ANSWER or status is None or not 200 <= status < 300:
                raise UpstreamError(502, f"the upstream proxy {host}:{port} refused CONNECT {target}: "
                                         f"{status_line(head)!r}")
            await writer.start_tls(tls, server_hostname=upstream.host)
        except BaseException:
            writer.transport.abort()
            raise
        return reader, writer

    def release(self, conn: UpstreamConnection) -> None:
        idle = self._idle.setdefault(conn.upstream, deque())
        if len(idle) >= MAX_IDLE_PER_UPSTREAM or conn.writer.is_closing():
            conn.close()
            return
        conn.idle_since = time.monotonic()
        idle.append(conn)

    async def close(self) -> None:
        """Close every upstream connection, idle or in use."""
        conns = list(self._live)
        self._idle.clear()
        for conn in conns:
            conn.close()
            await close_writer(conn.writer, timeout=1.0)
