"""Git push guard (filled in the push-rules step)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dejima.proxy.exchange import Exchange, Outcome
    from dejima.proxy.server import ProxyServer, RouteSpec


async def guard_push(server: ProxyServer, spec: RouteSpec, exchange: Exchange,
                     headers: list[tuple[bytes, bytes]]) -> Outcome | None:
    return None
