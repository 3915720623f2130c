"""The proxy's TLS fallback: a second listener that terminates TLS for the hosts manifests mark.

    session --TLS to api.github.com--> 127.0.0.1:443 (filter) --unix socket--> [this listener]
        SNI api.github.com -> leaf of the session CA -> the request, as /r/github-api/<path>,
        handled like any plain route (placeholder swap, ledger, refusals, streaming)
        --> route's upstream over TLS, verified against the real trust store

The filter's resolver answers a marked host with 127.0.0.1 and relays that port to this socket.
A handshake without SNI, or for a host no route intercepts, ends in an alert and a violation.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from dejima.core.httpwire import MAX_HEAD_BYTES
from dejima.proxy.authority import SessionAuthority
from dejima.proxy.http_streams import close_writer
from dejima.proxy.services import ProxyServices, Via

HANDSHAKE_TIMEOUT = 10.0
MAX_NAME = 253


@dataclass(frozen=True, slots=True)
class Interception:
    """The session CA (its key in this process's memory only) and which route serves each host."""

    authority: SessionAuthority
    routes: Mapping[str, str]  # intercepted host (the manifest's upstream host) -> route name


class TlsListener:
    def __init__(self, server: ProxyServices, interception: Interception) -> None:
        self.server, self.interception = server, interception
        self.context = interception.authority.server_context(self._refused)

    def _refused(self, name: str | None) -> None:
        shown = "no name (no SNI)" if name is None else repr(name[:MAX_NAME])
        self.server.violation("tls-name-refused", "", f"TLS handshake for {shown}: no route intercepts it")

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        ssl_object = writer.get_extra_info("ssl_object")
        host = self.interception.authority.host_of(ssl_object.context) if ssl_object is not None else None
        route = self.interception.routes.get(host or "")
        if host is None or route is None:  # cannot happen after the SNI callback; fail closed all the same
            await close_writer(writer)
            return
        await self.server.serve_connection(reader, writer, Via(host, route))

    async def start(self, unix_path: Path | None, tcp_host: str | None, tcp_port: int) -> list[asyncio.Server]:
        servers = []
        if unix_path is not None:
            servers.append(await asyncio.start_unix_server(
                self._client, path=str(unix_path), limit=MAX_HEAD_BYTES, ssl=self.context,
                ssl_handshake_timeout=HANDSHAKE_TIMEOUT))
            os.chmod(unix_path, 0o600)
        if tcp_host is not None:
            servers.append(await asyncio.start_server(
                self._client, tcp_host, tcp_port, limit=MAX_HEAD_BYTES, ssl=self.context,
                ssl_handshake_timeout=HANDSHAKE_TIMEOUT))
        return servers
