"""What a route's behaviour and the TLS listener may use of the proxy that holds them.

The server (dejima.proxy.server) provides these; a behaviour (dejima.proxy.routes) and the TLS
fallback (dejima.proxy.intercept) are handed them, never the server's class, so no module below
the server imports it back.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Protocol

from dejima.proxy.budget import Budget
from dejima.proxy.http_streams import Idle
from dejima.proxy.upstream import UpstreamPool


class Limits(Protocol):
    """The proxy's limits a behaviour applies (dejima.proxy.server.ProxyConfig has them all)."""

    @property
    def response_timeout(self) -> float: ...

    @property
    def max_push_bytes(self) -> int: ...

    @property
    def max_signed_body(self) -> int: ...


@dataclass(frozen=True, slots=True)
class Via:
    """How a connection reached the proxy: over the TLS fallback, for ``host``, served by ``route``."""

    host: str
    route: str


class ProxyServices(Protocol):
    pool: UpstreamPool  # upstream connections, reused across the session's requests
    idle: Idle  # the longest wait between two reads
    budget: Budget  # what the proxy may hold in memory at once
    reals: dict[str, str]  # route -> last real value seen, so records can scrub it

    @property
    def config(self) -> Limits: ...

    def violation(self, kind: str, route: str, detail: str) -> None:
        """Record a refusal that means something (scrubbed of secrets)."""

    async def answer(self, writer: asyncio.StreamWriter, status: int, message: str, close: bool,
                     extra: list[tuple[bytes, bytes]] | None = None) -> None:
        """Write a whole text/plain response of the proxy's own."""

    async def serve_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                               via: Via | None = None) -> None:
        """Serve a client connection's requests (the TLS fallback hands its decrypted ones here)."""
