"""Hostile HTTP through the real proxy on loopback sockets: an upstream that sends control characters in
its status line or malformed chunk trailers, a session that sends malformed, huge or credential-bearing
trailers. Nothing of it may reach the other side, and a refusal is answered and recorded."""

from __future__ import annotations

import re
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from dejima.proxy.records import read_records
from dejima.proxy.routes import RouteSpec
from tests.unit.proxy.fakes import (
    RawUpstream,
    RunningProxy,
    fixed,
    raw_exchange,
    raw_upstream,
    route,
    running_proxy,
)

ROUTE = "anthropic-api-key"
CONTROLS = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")  # C0 (but HTAB) and DEL


@pytest.fixture
def hostile(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[tuple[RawUpstream, RunningProxy]]:
    """A raw upstream answering ``request.param``, and the proxy with one route to it."""
    with raw_upstream(request.param) as upstream, \
            running_proxy(tmp_path, [RouteSpec(route(ROUTE, upstream.url), fixed())]) as proxy:
        yield upstream, proxy


def ok(body: bytes = b"ok", reason: bytes = b"OK") -> bytes:
    return b"HTTP/1.1 200 " + reason + b"\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n" % len(body) + body


def get(proxy: RunningProxy) -> bytes:
    return (b"GET /r/" + ROUTE.encode() + b"/v1/models HTTP/1.1\r\nHost: h\r\nx-api-key: "
            + proxy.routes()[ROUTE].placeholder.encode() + b"\r\n\r\n")


def exchange_until(port: int, data: bytes, end: bytes) -> bytes:
    """Send ``data``; read until the answer ends with ``end`` (or the proxy closes)."""
    answer = b""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(data)
        while not answer.endswith(end) and (chunk := sock.recv(65536)):
            answer += chunk
    return answer


def head_of(answer: bytes) -> bytes:
    return answer.partition(b"\r\n\r\n")[0]


# --- reason phrases and header values from the upstream -----------------------------------------------

HOSTILE_REASONS = [b"OK\x1b[31m red", b"O\x00K", b"OK\x7f", b"\x07", b"OK\x0bx", b"\x1b]0;pwned\x07", b"OK\x1f\x01"]


@pytest.mark.parametrize("hostile", [ok(reason=r) for r in HOSTILE_REASONS], indirect=True,
                         ids=[repr(r) for r in HOSTILE_REASONS])
def test_a_reason_phrase_with_control_characters_reaches_the_session_as_the_standard_one(
        hostile: tuple[RawUpstream, RunningProxy]) -> None:
    upstream, proxy = hostile
    answer = raw_exchange(proxy.port, get(proxy))
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n") and answer.endswith(b"\r\n\r\nok"), answer
    assert not CONTROLS.search(head_of(answer).replace(b"\r\n", b"")), answer
    assert len(upstream.requests) == 1
    proxy.loop.run(proxy.server.close())  # the ledger entry is written once the exchange is over
    entry = read_records(proxy.ledger)[-1]
    assert entry["status"] == 200 and "reason phrase" in str(entry["error"]), entry


@pytest.mark.parametrize("hostile", [ok(reason=b"Fine\tand d\xe9j\xe0 vu")], indirect=True)
def test_a_reason_phrase_the_rfc_allows_passes_as_it_came(hostile: tuple[RawUpstream, RunningProxy]) -> None:
    _, proxy = hostile
    assert raw_exchange(proxy.port, get(proxy)).startswith(b"HTTP/1.1 200 Fine\tand d\xe9j\xe0 vu\r\n")


@pytest.mark.parametrize("hostile", [b"HTTP/1.1 103 Early\x1b[2J\r\nLink: </a>; rel=preload\r\n\r\n" + ok()],
                         indirect=True)
def test_an_informational_response_is_cleaned_the_same_way(hostile: tuple[RawUpstream, RunningProxy]) -> None:
    _, proxy = hostile
    answer = exchange_until(proxy.port, get(proxy), b"\r\n\r\nok")
    assert answer.startswith(b"HTTP/1.1 103 Early Hints\r\nLink: </a>; rel=preload\r\n\r\nHTTP/1.1 200 OK\r\n"), answer
    assert b"\x1b" not in answer


HOSTILE_VALUES = [b"a\x1b[31mb", b"a\x00b", b"a\x7fb", b"a\x0bb", b"a\rb"]


@pytest.mark.parametrize("hostile", [b"HTTP/1.1 200 OK\r\nX-Evil: " + v + b"\r\nContent-Length: 2\r\n\r\nok"
                                   for v in HOSTILE_VALUES], indirect=True, ids=[repr(v) for v in HOSTILE_VALUES])
def test_a_response_header_value_with_control_characters_is_a_502(hostile: tuple[RawUpstream, RunningProxy]) -> None:
    _, proxy = hostile
    answer = raw_exchange(proxy.port, get(proxy))
    assert answer.startswith(b"HTTP/1.1 502 Bad Gateway\r\n") and b"X-Evil" not in answer, answer
    assert b"control character" in answer or b"bare CR" in answer, answer
