"""With an upstream (corporate) proxy: the session's allowed TCP connections, sent on as ``CONNECT name:port``.

    session --TCP to 203.0.113.7:443--> nft chain relay (an allowed destination) --redirect--> 127.0.0.1:RELAY_PORT
        [this relay] its original destination, 203.0.113.7:443 -> the name the resolver answered with that
        address (api.example.com) -> does the policy allow api.example.com on port 443 now?
        --CONNECT api.example.com:443--> the corporate proxy (only the relay's marked sockets reach it)
        --> bytes both ways, unchanged

An address no allowed name was answered with goes as ``CONNECT address:port`` only when an allowed
address entry covers it and the port. Anything else (a grant revoked since, a port the name is not
allowed on, a direct connection to the relay's own port) is cut before the proxy hears of it, and
recorded; so is a proxy that refuses the CONNECT. The proxy's answer is read up to its blank line and
never passed to the session, which sees a connection that opened and was closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import socket
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dejima.core.egress import EgressPolicy
from dejima.core.tunnel import MAX_ANSWER, answer_status, connect_request, status_line
from dejima.filter.bridge import MAX_CLIENTS, pipe
from dejima.filter.dns_upstream import SO_MARK
from dejima.filter.resolver import Recorder

SO_ORIGINAL_DST = 80  # linux/netfilter_ipv4.h: the destination before the nat chain's redirect
CONNECT_TIMEOUT = 15.0  # seconds the proxy has to connect and answer the CONNECT

Destination = tuple[str, int]



@dataclass(frozen=True, slots=True)
class UpstreamProxyAddress:
    address: str
    port: int
    mark: int = 0  # on the relay's sockets: only they may reach the proxy (the ruleset's rule)


def original_destination(sock: socket.socket) -> Destination:
    """Where the session meant to connect, from the connection's conntrack entry (sockaddr_in)."""
    raw = sock.getsockopt(socket.SOL_IP, SO_ORIGINAL_DST, 16)
    port, packed = struct.unpack_from("!2xH4s", raw)
    return socket.inet_ntoa(packed), port


def connect_target(policy: EgressPolicy, name: str | None, address: str, port: int) -> str | None:
    """``host:port`` to ask the proxy for, or None when the policy allows neither the name the resolver
    gave this address nor the address itself on ``port``."""
    if name is not None:
        verdict = policy.name_verdict(name)
        if verdict.allowed and (verdict.ports is None or port in verdict.ports):
            return f"{name}:{port}"
    try:
        ip = ipaddress.IPv4Address(address)
    except ValueError:
        return None
    if any(entry.matches_address(ip) for entry, _ in policy.denied):
        return None
    if any(e.kind == "network" and e.matches_address(ip) and e.port in (None, port) for e in policy.allowed):
        return f"{address}:{port}"
    return None


class Relay:
    """The relay's listener: ``name_of`` is the resolver's address -> name memory, ``policy`` the
    policy now (grants replace it), ``destination`` reads a connection's original destination."""

    def __init__(self, proxy: UpstreamProxyAddress, policy: Callable[[], EgressPolicy],
                 name_of: Callable[[str], str | None], record: Recorder,
                 destination: Callable[[socket.socket], Destination] = original_destination) -> None:
        self.proxy, self.policy, self.name_of, self.record = proxy, policy, name_of, record
        self.destination = destination
        self.clients = 0

    async def __call__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.clients >= MAX_CLIENTS:
            _reset(writer)
            return
        self.clients += 1
        try:
            await self._serve(reader, writer)
        finally:
            self.clients -= 1

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            address, port = self.destination(writer.get_extra_info("socket"))
        except OSError as exc:
            self._refused({"reason": f"no original destination: {exc}"})
            _reset(writer)
            return
        name = self.name_of(address)
        target = connect_target(self.policy(), name, address, port)
        seen = {"address": address, "protocol": "tcp", "port": port, **({"domain": name} if name else {})}
        if target is None:
            self._refused({**seen, "reason": f"{name or address} is not allowed on port {port} (through the "
                                             "upstream proxy)"})
            _reset(writer)
            return
        upstream = await self._open(target, seen)
        if upstream is None:
            _reset(writer)
            return
        proxy_reader, proxy_writer = upstream
        try:
            await asyncio.gather(pipe(reader, proxy_writer), pipe(proxy_reader, writer))
        finally:
            proxy_writer.close()
            with contextlib.suppress(Exception):
                writer.close()

    async def _open(self, target: str, seen: dict[str, Any]) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] \
            | None:
        """A connection through the proxy to ``target``, its CONNECT answered 2xx; None (recorded) otherwise."""
        writer = None
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT):
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                if self.proxy.mark:
                    sock.setsockopt(socket.SOL_SOCKET, SO_MARK, self.proxy.mark)
                sock.setblocking(False)
                await asyncio.get_running_loop().sock_connect(sock, (self.proxy.address, self.proxy.port))
                reader, writer = await asyncio.open_connection(sock=sock, limit=MAX_ANSWER)
                writer.write(connect_request(target))
                head = await reader.readuntil(b"\r\n\r\n")
        except (OSError, TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as exc:
            if writer is not None:
                writer.close()
            why = "timed out" if isinstance(exc, TimeoutError) else f"failed: {exc}"
            self.record({"kind": "upstream-proxy", **seen, "reason": f"CONNECT {target} through the upstream "
                                                                     f"proxy {why}"})
            return None
        status = answer_status(head)
        if status is None or not 200 <= status < 300:
            writer.close()
            self.record({"kind": "upstream-proxy", **seen, "reason": f"the upstream proxy refused CONNECT {target}: "
                                                                     f"{status_line(head)!r}"})
            return None
        return reader, writer

    def _refused(self, record: dict[str, Any]) -> None:
        self.record({"kind": "connection", **record})


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with a reset, as the ruleset's refusals do: the client fails at once."""
    sock = writer.get_extra_info("socket")
    with contextlib.suppress(OSError):
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


async def start_relay(relay: Relay, port: int, address: str = "127.0.0.1") -> asyncio.Server:
    return await asyncio.start_server(relay, address, port, reuse_address=True)
