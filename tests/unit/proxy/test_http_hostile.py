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
    REAL_KEY,
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


# --- chunk trailers from the session ----------------------------------------------------------------

def chunked_post(proxy: RunningProxy, trailer: bytes, close: bool = False) -> bytes:
    """A chunked POST whose body ends with ``trailer`` (its field lines) and the empty line."""
    return (b"POST /r/" + ROUTE.encode() + b"/v1/messages HTTP/1.1\r\nHost: h\r\nx-api-key: "
            + proxy.routes()[ROUTE].placeholder.encode() + b"\r\nTransfer-Encoding: chunked\r\n"
            + (b"Connection: close\r\n" if close else b"") + b"\r\n5\r\nhello\r\n0\r\n" + trailer + b"\r\n")


MALFORMED_TRAILERS = {
    "obs-fold": b"X-A: b\r\n c\r\n",
    "escape-in-value": b"X-A: a\x1b[31mb\r\n",
    "nul-in-value": b"X-A: a\x00b\r\n",
    "del-in-value": b"X-A: a\x7f\r\n",
    "bare-lf": b"X-A: a\nX-B: b\r\n",
    "bare-cr": b"X-A: a\rX-B: b\r\n",
    "space-in-name": b"X A: b\r\n",
    "space-before-colon": b"X-A : b\r\n",
    "no-colon": b"X-A\r\n",
    "content-length": b"Content-Length: 5\r\n",
    "transfer-encoding": b"Transfer-Encoding: chunked\r\n",
    "many-fields": b"".join(b"X-%d: v\r\n" % i for i in range(200)),
    "huge-section": b"".join(b"X-%d: %s\r\n" % (i, b"v" * 100) for i in range(200)),  # about 22 KiB
    "huge-line": b"X-A: " + b"v" * 20000 + b"\r\n",
    "line-past-the-read-limit": b"X-A: " + b"v" * 70000 + b"\r\n",
}


@pytest.mark.parametrize("hostile", [ok()], indirect=True, ids=["ok"])
@pytest.mark.parametrize("case", sorted(MALFORMED_TRAILERS))
def test_a_request_with_a_malformed_or_huge_trailer_is_400_and_never_completes_upstream(
        hostile: tuple[RawUpstream, RunningProxy], case: str) -> None:
    upstream, proxy = hostile
    answer = raw_exchange(proxy.port, chunked_post(proxy, MALFORMED_TRAILERS[case]))
    assert answer.startswith(b"HTTP/1.1 400 Bad Request\r\n") and b"Connection: close" in answer, answer[:300]
    assert b"trailer" in answer or b"line too long" in answer, answer
    assert upstream.requests == []  # the last chunk never went on: the upstream has no whole request
    assert [v["kind"] for v in read_records(proxy.violations)] == ["malformed-request"]


CREDENTIAL_TRAILERS = [b"x-api-key: {placeholder}\r\n", b"Authorization: Bearer {placeholder}\r\n",
                       b"X-Api-Key: {placeholder}\r\nX-Leak: {real}\r\n", b"Host: evil.example\r\n"]


@pytest.mark.parametrize("hostile", [ok()], indirect=True, ids=["ok"])
@pytest.mark.parametrize("trailer", CREDENTIAL_TRAILERS)
def test_a_trailer_never_carries_a_credential_or_anything_else_upstream(hostile: tuple[RawUpstream, RunningProxy],
                                                                        trailer: bytes) -> None:
    """Well-formed trailers are read, checked and dropped: the upstream gets the body, the route's real key
    in the head (from the proxy), and an empty trailer section; the connection carries the next request."""
    upstream, proxy = hostile
    key = proxy.routes()[ROUTE].placeholder.encode()
    trailer = trailer.replace(b"{placeholder}", key).replace(b"{real}", REAL_KEY.encode())
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as sock:
        for _ in range(2):
            sock.sendall(chunked_post(proxy, trailer))
            answer = b""
            while not answer.endswith(b"\r\n\r\nok"):
                answer += sock.recv(65536)
            assert answer.startswith(b"HTTP/1.1 200 OK\r\n") and b"Connection: keep-alive" in answer
    assert len(upstream.requests) == 2
    for request in upstream.requests:
        head, _, body = request.partition(b"\r\n\r\n")
        assert b"x-api-key: " + REAL_KEY.encode() in head
        assert body == b"5\r\nhello\r\n0\r\n\r\n", body  # no trailer field went on
        assert key not in request and b"evil.example" not in request and b"Bearer" not in request
    assert read_records(proxy.violations) == []


# --- chunk trailers from the upstream --------------------------------------------------------------

def chunked_ok(trailer: bytes) -> bytes:
    return b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n" + trailer + b"\r\n"


UPSTREAM_TRAILERS = {k: MALFORMED_TRAILERS[k] for k in ("obs-fold", "escape-in-value", "bare-lf", "content-length",
                                                         "huge-section", "many-fields")}


@pytest.mark.parametrize("hostile", [chunked_ok(t) for t in UPSTREAM_TRAILERS.values()], indirect=True,
                         ids=list(UPSTREAM_TRAILERS))
def test_a_response_with_a_malformed_or_huge_trailer_is_cut_and_recorded(
        hostile: tuple[RawUpstream, RunningProxy]) -> None:
    """The head and the data went on as they came; the trailer section is where the response turns out
    malformed, so the session's copy ends there, unfinished (no last chunk), and the connection closes."""
    _, proxy = hostile
    answer = exchange_until(proxy.port, get(proxy), b"0\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n") and answer.endswith(b"\r\n\r\n2\r\nok\r\n"), answer[-200:]
    assert b"\x1b" not in answer and b"X-" not in answer.partition(b"\r\n\r\n")[2]
    proxy.loop.run(proxy.server.close())
    entry = read_records(proxy.ledger)[-1]
    assert entry["status"] == 200 and "response cut" in str(entry["error"]) and "trailer" in str(entry["error"])


@pytest.mark.parametrize("hostile", [chunked_ok(b"X-Checksum: abc\r\nX-Other: d\r\n")], indirect=True)
def test_a_well_formed_response_trailer_is_dropped_and_the_response_completes(
        hostile: tuple[RawUpstream, RunningProxy]) -> None:
    _, proxy = hostile
    answer = exchange_until(proxy.port, get(proxy), b"0\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n") and b"Connection: keep-alive" in answer
    assert answer.endswith(b"\r\n\r\n2\r\nok\r\n0\r\n\r\n"), answer
