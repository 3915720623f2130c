"""The filter's relay to an upstream proxy (filter/relay.py), on loopback: a real listening "corporate
proxy" records every CONNECT it is sent and then echoes. An allowed name goes as CONNECT name:port; a name
the policy no longer allows, a port it is not allowed on, or an address nothing allows is cut before the
proxy hears anything (the proxy's listener sees no connection at all); a proxy's refusal is recorded.
The original destination is handed in here (the kernel's SO_ORIGINAL_DST needs the nat chain: the
integration test tests/integration/test_upstream_proxy.py runs that)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from dejima.core.egress import parse_policy
from dejima.core.tunnel import answer_status, connect_request
from dejima.filter.relay import Relay, UpstreamProxyAddress, connect_target

ADDRESS = "203.0.113.7"


class CorporateProxy:
    """A CONNECT proxy on loopback: records each connection's request head, answers ``status``, echoes."""

    def __init__(self, status: bytes = b"200 Connection established") -> None:
        self.status, self.connections = status, 0
        self.heads: list[str] = []
        self.server: asyncio.Server | None = None
        self.done = asyncio.Event()

    async def __call__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.heads.append((await reader.readuntil(b"\r\n\r\n")).decode())
        writer.write(b"HTTP/1.1 " + self.status + b"\r\n\r\n")
        if self.status.startswith(b"200"):
            while data := await reader.read(1024):
                writer.write(data)
        writer.close()
        await writer.wait_closed()
        self.done.set()

    async def start(self) -> int:
        self.server = await asyncio.start_server(self, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])


async def through_relay(proxy: CorporateProxy, allow: list[str], name: str | None, port: int,
                        records: list[dict[str, Any]], deny: list[tuple[str, str]] | None = None) -> bytes:
    """Connect through a relay whose connection "meant" ADDRESS:port, which the resolver gave ``name``;
    send a line and return what came back (b"" when the relay cut the connection)."""
    policy = parse_policy(allow, deny or [])
    proxy_port = await proxy.start()
    names: Callable[[str], str | None] = {ADDRESS: name}.get if name else (lambda _a: None)
    relay = Relay(UpstreamProxyAddress("127.0.0.1", proxy_port), lambda: policy, names, records.append,
                  destination=lambda _sock: (ADDRESS, port))
    relayed = asyncio.Event()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await relay(reader, writer)
        relayed.set()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    reader, writer = await asyncio.open_connection("127.0.0.1", server.sockets[0].getsockname()[1])
    writer.write(b"hello\n")
    try:
        got = await asyncio.wait_for(reader.read(100), 5)
    except ConnectionResetError:
        got = b""
    writer.close()
    await asyncio.wait_for(relayed.wait(), 5)  # every socket of the relay closed before the loop ends
    if proxy.connections:
        await asyncio.wait_for(proxy.done.wait(), 5)
    for listener in (server, proxy.server):
        assert listener is not None
        listener.close()
        await listener.wait_closed()
    return got


def test_an_allowed_name_goes_through_the_proxy_as_connect_name_port() -> None:
    records: list[dict[str, Any]] = []
    proxy = CorporateProxy()
    got = asyncio.run(through_relay(proxy, ["api.example.com:443"], "api.example.com", 443, records))
    assert got == b"hello\n"
    assert proxy.heads == ["CONNECT api.example.com:443 HTTP/1.1\r\nHost: api.example.com:443\r\n\r\n"]
    assert records == []


@pytest.mark.parametrize(("allow", "name", "port"), [
    pytest.param(["other.example.com"], "api.example.com", 443, id="name-not-allowed-now"),
    pytest.param(["api.example.com:443"], "api.example.com", 22, id="port-not-allowed"),
    pytest.param(["api.example.com"], None, 443, id="address-no-name-no-entry"),
])
def test_what_the_policy_refuses_never_reaches_the_proxy(allow: list[str], name: str | None, port: int) -> None:
    records: list[dict[str, Any]] = []
    proxy = CorporateProxy()
    got = asyncio.run(through_relay(proxy, allow, name, port, records))
    assert got == b""
    assert proxy.connections == 0  # not even a connection, let alone a CONNECT
    assert [r["kind"] for r in records] == ["connection"]
    assert records[0]["address"] == ADDRESS and records[0]["port"] == port
    assert "not allowed" in records[0]["reason"]


def test_a_denied_name_is_refused_though_a_wildcard_allows_it() -> None:
    records: list[dict[str, Any]] = []
    proxy = CorporateProxy()
    got = asyncio.run(through_relay(proxy, ["*.example.com"], "evil.example.com", 443, records,
                                    deny=[("evil.example.com", "exfiltration host")]))
    assert got == b"" and proxy.connections == 0


def test_an_allowed_address_literal_goes_as_connect_address_port() -> None:
    records: list[dict[str, Any]] = []
    proxy = CorporateProxy()
    got = asyncio.run(through_relay(proxy, [f"{ADDRESS}:8443"], None, 8443, records))
    assert got == b"hello\n"
    assert proxy.heads[0].startswith(f"CONNECT {ADDRESS}:8443 HTTP/1.1\r\n")


def test_the_proxys_refusal_is_recorded_and_never_reaches_the_session() -> None:
    records: list[dict[str, Any]] = []
    proxy = CorporateProxy(b"403 Forbidden")
    got = asyncio.run(through_relay(proxy, ["api.example.com"], "api.example.com", 443, records))
    assert got == b""  # not the proxy's 403: the session sees a connection cut
    assert proxy.connections == 1
    assert records[0]["kind"] == "upstream-proxy" and "403 Forbidden" in records[0]["reason"]
    assert records[0]["domain"] == "api.example.com"


def test_connect_target_and_answer_status() -> None:
    policy = parse_policy(["a.example", "b.example:443", "10.1.0.0/16"], [("10.1.2.3", "no")])
    assert connect_target(policy, "a.example", ADDRESS, 8080) == "a.example:8080"
    assert connect_target(policy, "b.example", ADDRESS, 443) == "b.example:443"
    assert connect_target(policy, "b.example", ADDRESS, 80) is None
    assert connect_target(policy, None, "10.1.9.9", 22) == "10.1.9.9:22"
    assert connect_target(policy, None, "10.1.2.3", 22) is None  # the deny entry beats the network
    assert connect_request("a.example:443") == b"CONNECT a.example:443 HTTP/1.1\r\nHost: a.example:443\r\n\r\n"
    assert answer_status(b"HTTP/1.0 200 Connection established\r\n\r\n") == 200
    assert answer_status(b"SSH-2.0-x\r\n\r\n") is None
