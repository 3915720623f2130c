"""The proxy on real loopback sockets: swaps placeholders for the real key toward the route's upstream only,
streams answers chunk by chunk, keeps connections alive, refuses hostile requests and records them."""

from __future__ import annotations

import http.client
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from dejima.adapters.session_dirs import new_draws
from dejima.core.placeholders import make_decoys
from dejima.proxy.records import read_records
from dejima.proxy.routes import RouteSpec
from tests.unit.proxy.fakes import (
    REAL_KEY,
    FakeAPI,
    RunningProxy,
    fake_api,
    fixed,
    make_test_ca,
    raw_exchange,
    route,
    running_proxy,
)

GH_REAL = "ghp_REALrealREALrealREALrealREALrealREAL12"


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    return make_test_ca(tmp_path_factory.mktemp("ca"))


@pytest.fixture
def api(ca: tuple[Path, Path, Path]) -> Iterator[FakeAPI]:
    with fake_api((ca[1], ca[2])) as fake:
        yield fake


@pytest.fixture
def proxy(tmp_path: Path, api: FakeAPI, ca: tuple[Path, Path, Path]) -> Iterator[RunningProxy]:
    specs = [RouteSpec(route("anthropic-api-key", api.url), fixed()),
             RouteSpec(route("github-api", api.url, "authorization", "Bearer", manifest_host="api.github.com"),
                       fixed(GH_REAL))]
    decoys = make_decoys(new_draws(), ["ANTHROPIC_API_KEY"]).values()
    with running_proxy(tmp_path, specs, extra_ca_file=str(ca[0]), decoys=decoys, response_timeout=1.0) as running:
        yield running


def placeholder(proxy: RunningProxy, name: str = "anthropic-api-key") -> str:
    return proxy.routes()[name].placeholder


def client(proxy: RunningProxy) -> http.client.HTTPConnection:
    return http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=10)


def post_messages(conn: http.client.HTTPConnection, key: str, extra: dict[str, str] | None = None,
                  path: str = "/r/anthropic-api-key/v1/messages") -> http.client.HTTPResponse:
    body = json.dumps({"model": "claude", "stream": True, "messages": [{"role": "user", "content": "hi"}]})
    headers = {"x-api-key": key, "anthropic-version": "2023-06-01", "anthropic-beta": "oauth-2025-04-20",
               "content-type": "application/json", **(extra or {})}
    conn.request("POST", path, body=body, headers=headers)
    return conn.getresponse()


def violations(proxy: RunningProxy) -> list[dict[str, object]]:
    return read_records(proxy.violations)


def test_the_real_key_reaches_the_upstream_and_the_sse_stream_comes_back(proxy: RunningProxy, api: FakeAPI) -> None:
    response = post_messages(client(proxy), placeholder(proxy))
    text = response.read().decode()
    assert response.status == 200 and response.getheader("content-type") == "text/event-stream"
    assert "event: message_start" in text and '"text": "hello"' in text and "event: message_stop" in text
    seen = api.seen[-1]
    assert seen.headers["x-api-key"] == REAL_KEY
    assert seen.path == "/v1/messages"
    assert seen.headers["host"] == api.url.split("//")[1]
    assert seen.headers["anthropic-beta"] == "oauth-2025-04-20" and seen.headers["anthropic-version"] == "2023-06-01"
    assert json.loads(seen.body)["messages"][0]["content"] == "hi"
    assert violations(proxy) == []


def test_chunks_arrive_one_by_one_not_at_the_end(proxy: RunningProxy, api: FakeAPI) -> None:
    conn = client(proxy)
    conn.request("GET", "/r/anthropic-api-key/drip/5", headers={"x-api-key": placeholder(proxy)})
    response = conn.getresponse()
    received = []
    while True:
        line = response.fp.readline()  # http.client de-chunks; each event ends with a blank line
        if not line:
            break
        if line.startswith(b"data:"):
            received.append(time.monotonic())
        if len(received) == 5:
            break
    assert len(received) == 5 and len(api.sent_at) == 5
    # Each event reached the client before the upstream sent the next one.
    for index in range(4):
        assert received[index] < api.sent_at[index + 1], (index, received, api.sent_at)


def test_keep_alive_on_both_sides(proxy: RunningProxy, api: FakeAPI) -> None:
    conn = client(proxy)
    for _ in range(3):
        conn.request("GET", "/r/anthropic-api-key/ping", headers={"x-api-key": placeholder(proxy)})
        assert conn.getresponse().read() == b'{"path": "/ping"}'
    assert len(api.seen) == 3 and {s.connection for s in api.seen} == {1}


def test_a_chunked_upload_is_forwarded(proxy: RunningProxy, api: FakeAPI) -> None:
    conn = client(proxy)
    conn.request("POST", "/r/anthropic-api-key/upload", body=iter([b"abc", b"defg"]), encode_chunked=True,
                 headers={"x-api-key": placeholder(proxy), "Transfer-Encoding": "chunked"})
    assert conn.getresponse().status == 200
    assert api.seen[-1].body == b"abcdefg"


def test_each_route_gets_its_own_secret_in_its_own_form(proxy: RunningProxy, api: FakeAPI) -> None:
    conn = client(proxy)
    conn.request("GET", "/r/github-api/user", headers={"authorization": f"token {placeholder(proxy, 'github-api')}"})
    assert conn.getresponse().status == 200
    assert api.seen[-1].headers["authorization"] == f"Bearer {GH_REAL}"


@pytest.mark.parametrize("case", ["path", "query", "other-header"])
def test_a_placeholder_outside_its_header_is_refused(proxy: RunningProxy, api: FakeAPI, case: str) -> None:
    key = placeholder(proxy)
    path = {"path": f"/r/anthropic-api-key/v1/{key}", "query": f"/r/anthropic-api-key/v1/messages?k={key}"}.get(
        case, "/r/anthropic-api-key/v1/messages")
    extra = {"x-note": key} if case == "other-header" else {}
    response = post_messages(client(proxy), key, extra, path)
    assert response.status == 403 and b"outside its credential header" in response.read()
    assert api.seen == []
    assert [v["kind"] for v in violations(proxy)] == ["placeholder-misplaced"]


def test_a_placeholder_toward_another_route_is_refused(proxy: RunningProxy, api: FakeAPI) -> None:
    conn = client(proxy)
    conn.request("GET", "/r/github-api/user", headers={"authorization": f"Bearer {placeholder(proxy)}"})
    response = conn.getresponse()
    assert response.status == 403 and b"anthropic-api-key" in response.read()
    assert api.seen == [] and violations(proxy)[0]["kind"] == "placeholder-cross-route"


def test_a_decoy_is_refused_and_flagged(proxy: RunningProxy, api: FakeAPI) -> None:
    decoy = next(iter(proxy.server.config.decoys.values()))
    response = post_messages(client(proxy), placeholder(proxy), {"x-amz-date": decoy})
    assert response.status == 403 and api.seen == []
    assert violations(proxy)[0]["kind"] == "decoy-used"


@pytest.mark.parametrize("key,kind", [
    ("sk-ant-api03-" + "Z" * 90, "foreign-credential"),  # a real-looking key found somewhere
    ("not-my-placeholder", "foreign-credential"),  # e.g. another session's placeholder
    (REAL_KEY, "real-secret-in-request"),
])
def test_a_credential_that_is_not_this_sessions_placeholder_is_refused(proxy: RunningProxy, api: FakeAPI,
                                                                       key: str, kind: str) -> None:
    response = post_messages(client(proxy), key)
    assert response.status == 403 and api.seen == []
    assert [v["kind"] for v in violations(proxy)] == [kind]


def test_a_missing_credential_is_401_without_violation(proxy: RunningProxy, api: FakeAPI) -> None:
    conn = client(proxy)
    conn.request("GET", "/r/anthropic-api-key/v1/models")
    response = conn.getresponse()
    assert response.status == 401 and b"x-api-key" in response.read() and violations(proxy) == []


def test_unknown_routes_are_404(proxy: RunningProxy, api: FakeAPI) -> None:
    for path in ("/v1/messages", "/r/nope/v1/messages"):
        conn = client(proxy)
        conn.request("GET", path, headers={"x-api-key": placeholder(proxy)})
        assert conn.getresponse().status == 404
    assert api.seen == []


SMUGGLING = {
    "cl-and-te": b"Content-Length: 4\r\nTransfer-Encoding: chunked\r\n",
    "two-cl": b"Content-Length: 4\r\nContent-Length: 5\r\n",
    "te-not-chunked": b"Transfer-Encoding: gzip, chunked\r\n",
    "obs-fold": b"X-A: b\r\n c\r\n",
    "space-before-colon": b"Content-Length : 4\r\n",
    "bare-lf": b"X-A: b\nX-B: c\r\n",
    "nul-in-value": b"X-A: b\x00c\r\n",
}


@pytest.mark.parametrize("case", sorted(SMUGGLING))
def test_ambiguous_requests_are_refused(proxy: RunningProxy, api: FakeAPI, case: str) -> None:
    request = (b"POST /r/anthropic-api-key/v1/messages HTTP/1.1\r\nHost: x\r\nx-api-key: "
               + placeholder(proxy).encode() + b"\r\n" + SMUGGLING[case] + b"\r\nabcd")
    answer = raw_exchange(proxy.port, request)
    assert answer.split(b" ")[1] in (b"400", b"501"), answer[:80]
    assert b"Connection: close" in answer and api.seen == []
    assert violations(proxy)[0]["kind"] == "malformed-request"


def test_absolute_form_and_oversized_heads_are_refused(proxy: RunningProxy, api: FakeAPI) -> None:
    answer = raw_exchange(proxy.port, b"GET http://evil.example/ HTTP/1.1\r\nHost: evil.example\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 400")
    padding = b"X-Pad: " + b"a" * 70000 + b"\r\n"
    answer = raw_exchange(proxy.port, b"GET /r/anthropic-api-key/ HTTP/1.1\r\n" + padding + b"\r\n")
    assert answer.startswith(b"HTTP/1.1 431")
    assert api.seen == []


def test_header_injection_through_the_path_is_impossible(proxy: RunningProxy, api: FakeAPI) -> None:
    answer = raw_exchange(proxy.port, b"GET /r/anthropic-api-key/a\rX-Evil: 1 HTTP/1.1\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 400") and api.seen == []


def test_upstream_errors_become_clear_statuses(tmp_path: Path) -> None:
    dead = socket.socket()
    dead.bind(("127.0.0.1", 0))
    port = dead.getsockname()[1]
    dead.close()  # nothing listens there now
    with running_proxy(tmp_path, [RouteSpec(route("anthropic-api-key", f"http://127.0.0.1:{port}"), fixed())]) as p:
        conn = client(p)
        post = post_messages(conn, placeholder(p))
        assert post.status == 502 and b"could not connect to http://127.0.0.1" in post.read()


def test_an_upstream_that_does_not_answer_is_504(proxy: RunningProxy, api: FakeAPI) -> None:
    conn = client(proxy)
    conn.request("GET", "/r/anthropic-api-key/stall", headers={"x-api-key": placeholder(proxy)})
    response = conn.getresponse()
    assert response.status == 504 and b"did not answer within 1 s" in response.read()


def test_an_untrusted_upstream_certificate_is_502(tmp_path: Path, api: FakeAPI) -> None:
    with running_proxy(tmp_path, [RouteSpec(route("anthropic-api-key", api.url), fixed())]) as p:  # no extra CA
        response = post_messages(client(p), placeholder(p))
        assert response.status == 502 and b"certificate" in response.read()
    assert api.seen == []


def test_the_unix_socket_is_private_and_serves(tmp_path: Path, api: FakeAPI, ca: tuple[Path, Path, Path]) -> None:
    sock_path = tmp_path / "proxy.sock"
    with running_proxy(tmp_path, [RouteSpec(route("anthropic-api-key", api.url), fixed())], unix_path=sock_path,
                       extra_ca_file=str(ca[0])) as p:
        assert sock_path.stat().st_mode & 0o777 == 0o600
        with socket.socket(socket.AF_UNIX) as sock:
            sock.connect(str(sock_path))
            sock.sendall(b"GET /r/anthropic-api-key/x HTTP/1.1\r\nHost: h\r\nx-api-key: "
                         + placeholder(p).encode() + b"\r\nConnection: close\r\n\r\n")
            answer = b""
            while chunk := sock.recv(65536):
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b'{"path": "/x"}')


def test_no_secret_reaches_the_ledger_or_the_violations(tmp_path: Path, api: FakeAPI,
                                                       ca: tuple[Path, Path, Path]) -> None:
    decoy = make_decoys(new_draws()).values()["AWS_ACCESS_KEY_ID"]
    with running_proxy(tmp_path, [RouteSpec(route("anthropic-api-key", api.url), fixed())],
                       extra_ca_file=str(ca[0]), decoys={"AWS_ACCESS_KEY_ID": decoy}) as proxy:
        key = placeholder(proxy)
        post_messages(client(proxy), key, path=f"/r/anthropic-api-key/v1/messages?key={REAL_KEY}&beta=true")
        post_messages(client(proxy), key, path=f"/r/anthropic-api-key/{REAL_KEY}")
        post_messages(client(proxy), REAL_KEY)
        post_messages(client(proxy), key, {"x-leak": REAL_KEY})
        post_messages(client(proxy), key, path=f"/r/anthropic-api-key/{key}/{decoy}")
        post_messages(client(proxy), key, path=f"/r/{REAL_KEY.lower()}/x")
        post_messages(client(proxy), key, {"x-aws": decoy.lower()})
        assert post_messages(client(proxy), key).status == 200
    records = proxy.ledger.read_text() + proxy.violations.read_text()
    assert len(read_records(proxy.ledger)) == 8 and len(read_records(proxy.violations)) == 6
    for secret in (REAL_KEY, key, decoy):
        assert secret.lower() not in records.lower()
    assert read_records(proxy.ledger)[0]["path"] == "/r/anthropic-api-key/v1/messages?key&beta"


def test_a_websocket_upgrade_becomes_a_two_way_pipe(tmp_path: Path) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    seen: list[bytes] = []

    def upstream() -> None:
        conn, _ = listener.accept()
        with conn:
            head = b""
            while b"\r\n\r\n" not in head:
                head += conn.recv(4096)
            seen.append(head)
            conn.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
            while data := conn.recv(4096):
                conn.sendall(data.upper())

    import threading

    thread = threading.Thread(target=upstream, daemon=True)
    thread.start()
    spec = RouteSpec(route("openai-api-key", f"http://127.0.0.1:{listener.getsockname()[1]}", "authorization",
                           "Bearer", manifest_host="api.openai.com"), fixed("sk-proj-" + "R" * 40))
    with running_proxy(tmp_path, [spec]) as proxy:
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as sock:
            sock.sendall(b"GET /r/openai-api-key/v1/responses HTTP/1.1\r\nHost: h\r\nConnection: Upgrade\r\n"
                         b"Upgrade: websocket\r\nSec-WebSocket-Key: k\r\nAuthorization: Bearer "
                         + placeholder(proxy, "openai-api-key").encode() + b"\r\n\r\n")
            answer = b""
            while b"\r\n\r\n" not in answer:
                answer += sock.recv(4096)
            assert answer.startswith(b"HTTP/1.1 101")
            sock.sendall(b"frame-one")
            echoed = b""
            while len(echoed) < 9:
                echoed += sock.recv(4096)
            assert echoed == b"FRAME-ONE"
    listener.close()
    assert b"authorization: Bearer sk-proj-RRRR" in seen[0] and b"Upgrade: websocket" in seen[0]


def test_an_http11_request_without_host_is_400_and_recorded_and_http10_is_served(proxy: RunningProxy,
                                                                                  api: FakeAPI) -> None:
    """RFC 9112 section 3.2: an HTTP/1.1 request without Host is answered 400 (a malformed-request record);
    HTTP/1.0 needs no Host, and is still forwarded (with the route's own Host)."""
    key = placeholder(proxy).encode()
    answer = raw_exchange(proxy.port, b"GET /r/anthropic-api-key/ping HTTP/1.1\r\nx-api-key: " + key + b"\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 400 ") and b"Host" in answer and api.seen == []
    assert [v["kind"] for v in violations(proxy)] == ["malformed-request"]
    answer = raw_exchange(proxy.port, b"GET /r/anthropic-api-key/ping HTTP/1.0\r\nx-api-key: " + key + b"\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 200 ") and answer.endswith(b'{"path": "/ping"}')
    assert api.seen[-1].headers["host"] == api.url.split("//")[1]
