"""Strict HTTP/1.1 heads: anything two parsers could read two ways is refused."""

import pytest

from dejima.core.httpwire import (
    MAX_TRAILER_BYTES,
    HttpError,
    end_to_end,
    parse_chunk_size,
    parse_request_head,
    parse_response_head,
    parse_trailers,
    request_framing,
    response_framing,
    serialize_response,
    wants_keep_alive,
)


def req(extra: bytes = b"", line: bytes = b"POST /r/x/y HTTP/1.1") -> bytes:
    return line + b"\r\nHost: h\r\n" + extra + b"\r\n"


def test_a_plain_request() -> None:
    head = parse_request_head(req(b"Content-Length: 5\r\nX-Case: Kept\r\n"))
    assert (head.method, head.target, head.version) == ("POST", "/r/x/y", "HTTP/1.1")
    assert head.get(b"x-case") == b"Kept" and (b"X-Case", b"Kept") in head.headers
    assert request_framing(head).kind == "length" and request_framing(head).length == 5


@pytest.mark.parametrize("extra,status", [
    (b"Content-Length: 1\r\nTransfer-Encoding: chunked\r\n", 400),
    (b"Content-Length: 1\r\nContent-Length: 1\r\n", 400),
    (b"Content-Length: +1\r\n", 400),
    (b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n", 501),
    (b"Transfer-Encoding: identity\r\n", 501),
])
def test_smuggling_framings(extra: bytes, status: int) -> None:
    with pytest.raises(HttpError) as err:
        request_framing(parse_request_head(req(extra)))
    assert err.value.status == status


@pytest.mark.parametrize("raw", [
    req(b"X: a\r\n b\r\n"), req(b"X : a\r\n"), req(b"X: a\rb\r\n"), req(b"X: a\x01\r\n"),
    req(line=b"GET http://h/ HTTP/1.1"), req(line=b"GET /a b HTTP/1.1"), req(line=b"GET  /a HTTP/1.1"),
    b"GET / HTTP/1.1\r\nHost: h\r\n", req(line=b"GET /\x7f HTTP/1.1"),
])
def test_malformed_heads(raw: bytes) -> None:
    with pytest.raises(HttpError):
        parse_request_head(raw)


def test_limits() -> None:
    with pytest.raises(HttpError) as err:
        parse_request_head(req(b"".join(b"X-%d: 1\r\n" % i for i in range(200))))
    assert err.value.status == 431
    with pytest.raises(HttpError) as err:
        parse_request_head(req(line=b"GET / HTTP/2.0"))
    assert err.value.status == 505


def test_response_framing() -> None:
    resp = parse_response_head(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n")
    assert response_framing("GET", resp).kind == "chunked"
    assert response_framing("HEAD", resp).kind == "none"
    resp = parse_response_head(b"HTTP/1.1 200 OK\r\n\r\n")
    assert response_framing("GET", resp).kind == "close"
    resp = parse_response_head(b"HTTP/1.1 304 Not Modified\r\nContent-Length: 9\r\n\r\n")
    assert response_framing("GET", resp).kind == "none"
    with pytest.raises(HttpError) as err:
        parse_response_head(b"HTTP/1.1 2000 OK\r\n\r\n")
    assert err.value.status == 502


def test_hop_by_hop_headers_are_dropped() -> None:
    head = parse_request_head(req(b"Connection: close, X-Hop\r\nX-Hop: 1\r\nKeep-Alive: 5\r\nX-End: 2\r\n"))
    assert [k for k, _ in end_to_end(head.headers)] == [b"Host", b"X-End"]
    assert not wants_keep_alive("HTTP/1.1", head.headers) and not wants_keep_alive("HTTP/1.0", [])


def test_chunk_sizes() -> None:
    assert parse_chunk_size(b"1a;ext=1\r\n") == 26
    for bad in (b"\r\n", b"-1\r\n", b"1 \r\n", b"0x1\r\n", b"1"):
        with pytest.raises(HttpError):
            parse_chunk_size(bad)


def test_an_http11_request_without_host_is_refused_and_http10_is_served() -> None:
    """RFC 9112 section 3.2: a server MUST answer 400 to an HTTP/1.1 request lacking Host. HTTP/1.0
    has no Host requirement, and is still served without one."""
    with pytest.raises(HttpError) as err:
        parse_request_head(b"GET /r/x/y HTTP/1.1\r\nX-A: 1\r\n\r\n")
    assert err.value.status == 400 and "Host" in err.value.reason
    assert parse_request_head(b"GET /r/x/y HTTP/1.0\r\nX-A: 1\r\n\r\n").get(b"host") is None
    assert parse_request_head(b"GET /r/x/y HTTP/1.1\r\nHost:\r\n\r\n").get(b"host") == b""  # empty is allowed


@pytest.mark.parametrize("reason", [b"OK\x1b[31m", b"O\x00K", b"OK\x7f", b"\x07", b"a\x0bb", b"\x1b]0;t\x07",
                                    b"\x01\x1f"])
def test_a_reason_phrase_with_control_characters_becomes_the_standard_one(reason: bytes) -> None:
    for status, standard in ((200, "OK"), (404, "Not Found"), (299, "")):  # 299: no standard phrase
        response = parse_response_head(b"HTTP/1.1 %d %s\r\nX: 1\r\n\r\n" % (status, reason))
        assert (response.status, response.reason, response.reason_replaced) == (status, standard, True)
        assert response.headers == [(b"X", b"1")]


@pytest.mark.parametrize("reason,read", [(b" OK", "OK"), (b" A\tB  c ", "A\tB  c "), (b" d\xe9j\xe0", "d\xe9j\xe0"),
                                         (b" ", ""), (b"", "")])
def test_a_reason_phrase_the_rfc_allows_is_kept(reason: bytes, read: str) -> None:
    response = parse_response_head(b"HTTP/1.1 200" + reason + b"\r\n\r\n")
    assert (response.reason, response.reason_replaced) == (read, False)


@pytest.mark.parametrize("head", [b"HTTP/1.1 200 O\rK\r\n\r\n", b"HTTP/1.1 200 O\nK\r\n\r\n",
                                  b"HTTP/1.1 200 OK\r\nX: a\x1bb\r\n\r\n", b"HTTP/1.1 200 OK\r\nX: a\x00\r\n\r\n",
                                  b"HTTP/1.1 200 OK\r\nX: \x7f\r\n\r\n", b"HTTP/1.1 200 OK\r\nX: a\r\n b\r\n\r\n"])
def test_a_response_head_with_a_bare_cr_or_lf_or_a_control_in_a_value_is_502(head: bytes) -> None:
    """Those concern what the head means (where a line ends, what a field says): refused whole."""
    with pytest.raises(HttpError) as err:
        parse_response_head(head)
    assert err.value.status == 502


def test_no_reason_phrase_with_control_characters_is_ever_written() -> None:
    assert serialize_response(200, "Fine\tthanks", []).startswith(b"HTTP/1.1 200 Fine\tthanks\r\n")
    with pytest.raises(ValueError):
        serialize_response(200, "OK\x1b[2J", [])


def test_a_trailer_section_is_read_with_the_rules_of_a_head() -> None:
    assert parse_trailers(b"\r\n") == []
    assert parse_trailers(b"X-Checksum: abc\r\nx-api-key:\t v \r\n\r\n") == [(b"X-Checksum", b"abc"),
                                                                             (b"x-api-key", b"v")]
    fits = b"X: " + b"v" * (MAX_TRAILER_BYTES - 7) + b"\r\n\r\n"
    assert len(fits) == MAX_TRAILER_BYTES and parse_trailers(fits)[0][1] == b"v" * (MAX_TRAILER_BYTES - 7)


@pytest.mark.parametrize("section", [
    b"X: a\r\n b\r\n\r\n", b" X: a\r\n\r\n", b"X: a\x1bb\r\n\r\n", b"X: a\x00\r\n\r\n", b"X: \x7f\r\n\r\n",
    b"X: a\nY: b\r\n\r\n", b"X: a\rY: b\r\n\r\n", b"X Y: a\r\n\r\n", b"X : a\r\n\r\n", b"X\r\n\r\n", b": a\r\n\r\n",
    b"Content-Length: 5\r\n\r\n", b"transfer-encoding: chunked\r\n\r\n", b"X: a\r\n", b"X: a\r\n\n", b"",
    b"".join(b"X-%d: v\r\n" % i for i in range(129)) + b"\r\n",
    b"X: " + b"v" * (MAX_TRAILER_BYTES - 6) + b"\r\n\r\n",
])
def test_a_malformed_or_oversized_trailer_section_is_refused(section: bytes) -> None:
    with pytest.raises(HttpError) as err:
        parse_trailers(section)
    assert err.value.status == 400 and "trailer" in err.value.reason
