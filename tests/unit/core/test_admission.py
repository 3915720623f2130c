"""Admission, pure: which headers go upstream, and which requests are refused with which violation."""

from dejima.core.admission import Admission, Refusal, admit
from dejima.core.credentials import Route, parse_upstream
from dejima.core.httpwire import parse_request_head
from dejima.core.placeholders import SecretScanner

ROUTES = {"a": Route("a", parse_upstream("https://api.example.com/base", "a"), "x-api-key", "raw", "ph-a"),
          "b": Route("b", parse_upstream("https://other.example.com", "b"), "authorization", "Bearer", "ph-b")}
SCANNER = SecretScanner({n: r.placeholders for n, r in ROUTES.items()}, {"AWS_ACCESS_KEY_ID": "AKIADECOY1"})


def decide(head: bytes) -> Admission | Refusal:
    if b"\r\nHost:" not in head:  # an HTTP/1.1 request must carry one (httpwire); admission replaces it
        head = head.replace(b"\r\n", b"\r\nHost: h\r\n", 1)
    return admit(parse_request_head(head), ROUTES, SCANNER, {"a": "real-a", "b": "real-b"})


def test_forwarded_headers() -> None:
    got = decide(b"GET /r/a/v1/x?y=1 HTTP/1.1\r\nHost: 127.0.0.1:9\r\nx-api-key: ph-a\r\n"
                 b"Connection: keep-alive, X-H\r\nX-H: 1\r\nExpect: 100-continue\r\nAnthropic-Beta: b1\r\n\r\n")
    assert isinstance(got, Admission) and got.target == "/base/v1/x?y=1" and not got.upgrade
    assert got.headers == [(b"Host", b"api.example.com"), (b"Anthropic-Beta", b"b1")]


def test_websocket_upgrade_is_kept() -> None:
    got = decide(b"GET /r/b/ws HTTP/1.1\r\nAuthorization: Bearer ph-b\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
                 b"Sec-WebSocket-Key: k\r\n\r\n")
    assert isinstance(got, Admission) and got.upgrade
    assert (b"Upgrade", b"websocket") in got.headers and (b"Sec-WebSocket-Key", b"k") in got.headers


def test_refusals_and_their_violations() -> None:
    cases = {
        b"GET /r/a/x HTTP/1.1\r\nx-api-key: ph-b\r\n\r\n": "placeholder-cross-route",
        b"GET /r/a/ph-a HTTP/1.1\r\nx-api-key: ph-a\r\n\r\n": "placeholder-misplaced",
        b"GET /r/a/x HTTP/1.1\r\nx-api-key: ph-a\r\nCookie: s=AKIADECOY1\r\n\r\n": "decoy-used",
        b"GET /r/a/x HTTP/1.1\r\nx-api-key: real-a\r\n\r\n": "real-secret-in-request",
        b"GET /r/a/x HTTP/1.1\r\nx-api-key: ph-a\r\nX: real-b\r\n\r\n": "real-secret-in-request",
        b"GET /r/a/x HTTP/1.1\r\nx-api-key: ph-a\r\nx-api-key: ph-a\r\n\r\n": "malformed-request",
        b"GET /r/a/x HTTP/1.1\r\nx-api-key: guess\r\n\r\n": "foreign-credential",
    }
    for head, kind in cases.items():
        got = decide(head)
        assert isinstance(got, Refusal) and got.violation == kind, (head, got)
    missing = decide(b"GET /r/a/x HTTP/1.1\r\n\r\n")
    assert isinstance(missing, Refusal) and missing.status == 401 and missing.violation is None
    unknown = decide(b"GET /r/zz/x HTTP/1.1\r\n\r\n")
    assert isinstance(unknown, Refusal) and unknown.status == 404 and unknown.violation is None


def test_a_tunnel_or_an_echo_is_not_served_even_on_a_route() -> None:
    for method in (b"CONNECT", b"TRACE"):
        got = decide(method + b" /r/a/x HTTP/1.1\r\nx-api-key: ph-a\r\n\r\n")
        assert isinstance(got, Refusal) and got.status == 405 and got.violation == "malformed-request", got
    assert isinstance(decide(b"OPTIONS /r/a/x HTTP/1.1\r\nx-api-key: ph-a\r\n\r\n"), Admission)
