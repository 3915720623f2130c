"""The TLS fallback on real loopback sockets: the SNI picks the route, a real TLS client trusting only the
session CA gets through, the fake upstream sees the real token; unknown names and misplaced placeholders
are refused and recorded."""

from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from dejima.proxy.authority import SessionAuthority
from dejima.proxy.intercept import Interception
from dejima.proxy.records import read_records
from dejima.proxy.routes import RouteSpec
from tests.unit.proxy.fakes import FakeAPI, RunningProxy, fake_api, fixed, make_test_ca, route, running_proxy

GH_REAL = "ghp_REALrealREALrealREALrealREALrealREAL12"


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    return make_test_ca(tmp_path_factory.mktemp("ca"))


@pytest.fixture(scope="module")
def authority() -> SessionAuthority:
    return SessionAuthority.create(["api.github.com"])


@pytest.fixture
def api(ca: tuple[Path, Path, Path]) -> Iterator[FakeAPI]:
    with fake_api((ca[1], ca[2])) as fake:
        yield fake


@pytest.fixture
def proxy(tmp_path: Path, api: FakeAPI, ca: tuple[Path, Path, Path],
          authority: SessionAuthority) -> Iterator[RunningProxy]:
    specs = [RouteSpec(route("github-api", api.url, "authorization", "Bearer", manifest_host="api.github.com"),
                       fixed(GH_REAL)),
             RouteSpec(route("anthropic-api-key", api.url), fixed())]
    interception = Interception(authority, {"api.github.com": "github-api"})
    with running_proxy(tmp_path, specs, extra_ca_file=str(ca[0]), interception=interception,
                       tls_tcp_port=0) as running:
        yield running


def tls_request(proxy: RunningProxy, authority: SessionAuthority, sni: str | None, request: bytes) -> bytes:
    """One request over TLS to the fallback listener, as a client trusting the session CA alone."""
    context = ssl.create_default_context(cadata=authority.ca_pem)
    if sni is None:
        context.check_hostname = False
    assert proxy.server.tls_port
    with socket.create_connection(("127.0.0.1", proxy.server.tls_port), timeout=10) as raw, \
            context.wrap_socket(raw, server_hostname=sni) as sock:
        sock.sendall(request)
        data = b""
        # Until the proxy closes (Connection: close): it writes its ledger entry before that.
        for _ in range(1000):
            if not (chunk := sock.recv(65536)):
                break
            data += chunk
        return data


def get(path: str, token: str, host: str = "api.github.com") -> bytes:
    return (f"GET {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: token {token}\r\n"
            f"User-Agent: test\r\nConnection: close\r\n\r\n").encode()


def test_sni_routes_to_the_marked_route_and_the_upstream_sees_the_real_token(
        proxy: RunningProxy, api: FakeAPI, authority: SessionAuthority) -> None:
    placeholder = proxy.routes()["github-api"].placeholder
    answer = tls_request(proxy, authority, "api.github.com", get("/user?per_page=1", placeholder))
    assert answer.startswith(b"HTTP/1.1 200"), answer
    assert api.seen[-1].path == "/user?per_page=1"
    assert api.seen[-1].headers["authorization"] == f"Bearer {GH_REAL}"
    assert api.seen[-1].headers["host"] == api.url.removeprefix("https://")
    ledger = read_records(proxy.ledger)
    assert ledger[-1]["route"] == "github-api" and ledger[-1]["status"] == 200
    assert placeholder not in proxy.ledger.read_text() and GH_REAL not in proxy.ledger.read_text()


@pytest.mark.parametrize("sni", ["evil.example", "github.com", None])
def test_a_handshake_for_an_unmarked_name_is_refused_and_recorded(
        proxy: RunningProxy, api: FakeAPI, authority: SessionAuthority, sni: str | None) -> None:
    with pytest.raises((ssl.SSLError, ConnectionError)):
        tls_request(proxy, authority, sni, get("/user", proxy.routes()["github-api"].placeholder))
    assert api.seen == []
    records = read_records(proxy.violations)
    assert [r["kind"] for r in records] == ["tls-name-refused"]
    assert (repr(sni) if sni else "no SNI") in str(records[0]["detail"])


def test_another_routes_placeholder_toward_the_intercepted_host_is_refused(
        proxy: RunningProxy, api: FakeAPI, authority: SessionAuthority) -> None:
    foreign = proxy.routes()["anthropic-api-key"].placeholder
    answer = tls_request(proxy, authority, "api.github.com", get("/user", foreign))
    assert answer.startswith(b"HTTP/1.1 403"), answer
    assert api.seen == []
    assert [r["kind"] for r in read_records(proxy.violations)] == ["placeholder-cross-route"]


def test_a_host_header_for_another_host_is_refused(proxy: RunningProxy, api: FakeAPI,
                                                   authority: SessionAuthority) -> None:
    placeholder = proxy.routes()["github-api"].placeholder
    answer = tls_request(proxy, authority, "api.github.com", get("/user", placeholder, host="evil.example"))
    assert answer.startswith(b"HTTP/1.1 421"), answer
    assert api.seen == []


def test_an_intercepted_stream_arrives_chunk_by_chunk(proxy: RunningProxy, api: FakeAPI,
                                                      authority: SessionAuthority) -> None:
    context = ssl.create_default_context(cadata=authority.ca_pem)
    placeholder = proxy.routes()["github-api"].placeholder
    assert proxy.server.tls_port
    arrived: list[float] = []
    with socket.create_connection(("127.0.0.1", proxy.server.tls_port), timeout=10) as raw, \
            context.wrap_socket(raw, server_hostname="api.github.com") as sock:
        sock.sendall(get("/drip/4", placeholder))
        data = b""
        while not data.endswith(b"0\r\n\r\n") and len(arrived) < 50 and (chunk := sock.recv(65536)):
            data += chunk
            arrived.append(time.monotonic())
    assert data.count(b"data: ") == 4
    assert arrived[-1] - arrived[0] > 0.3  # the chunks came as the upstream sent them (0.15 s apart), not at once
