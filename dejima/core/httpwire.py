"""HTTP/1.1 message heads, parsed strictly, and how their bodies are framed.

Strict on purpose: the proxy stands between an untrusted client and an upstream that may parse
differently, so anything two parsers could read two ways (both Content-Length and
Transfer-Encoding, two Content-Lengths, two Hosts (or none, in HTTP/1.1), folded or space-padded
header names, bare CR or LF, control characters, absolute-form targets) is refused rather than
guessed at.
No I/O here; the proxy's adapter reads the bytes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from http import HTTPStatus

MAX_HEAD_BYTES = 64 * 1024
MAX_HEADERS = 128
MAX_CHUNK_LINE = 4096
MAX_TRAILER_BYTES = 16 * 1024  # a chunked body's trailer section, its lines and the empty one together

_TOKEN = re.compile(rb"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
_VALUE_BAD = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")
_REASON = re.compile(rb"[\x09\x20-\x7e\x80-\xff]*")  # RFC 9112 section 4: HTAB, SP, VCHAR, obs-text
_TARGET = re.compile(rb"^/[\x21-\x7e]*$")
_DIGITS = re.compile(rb"^[0-9]{1,18}$")
_CHUNK_SIZE = re.compile(rb"^([0-9A-Fa-f]{1,15})(;[\x09\x20-\x7e]*)?$")

# Hop-by-hop: meaningful for one connection only, never forwarded as they are.
HOP_BY_HOP = frozenset({
    b"connection", b"keep-alive", b"proxy-connection", b"te", b"trailer", b"transfer-encoding",
    b"upgrade", b"proxy-authorization", b"proxy-authenticate",
})

Headers = list[tuple[bytes, bytes]]  # (name as sent, value), in order; names compare case-insensitively


class HttpError(Exception):
    """A message the proxy refuses: ``status`` to answer with, ``reason`` for the body and the record."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


@dataclass(frozen=True, slots=True)
class RequestHead:
    method: str
    target: str
    version: str  # "HTTP/1.1" or "HTTP/1.0"
    headers: Headers

    def get(self, name: bytes) -> bytes | None:
        return header(self.headers, name)


@dataclass(frozen=True, slots=True)
class ResponseHead:
    version: str
    status: int
    reason: str  # as sent, or the standard one when the upstream's held control characters
    headers: Headers
    reason_replaced: bool = False  # the upstream's reason phrase held control characters

    def get(self, name: bytes) -> bytes | None:
        return header(self.headers, name)


@dataclass(frozen=True, slots=True)
class Framing:
    kind: str  # "none", "length", "chunked" or "close" (until the connection ends; responses only)
    length: int = 0


def header(headers: Headers, name: bytes) -> bytes | None:
    """The first value of a header; ``name`` in lower case."""
    for key, value in headers:
        if key.lower() == name:
            return value
    return None


def header_all(headers: Headers, name: bytes) -> list[bytes]:
    return [value for key, value in headers if key.lower() == name]


def _lines(head: bytes) -> list[bytes]:
    if len(head) > MAX_HEAD_BYTES:
        raise HttpError(431, f"message head larger than {MAX_HEAD_BYTES} bytes")
    if not head.endswith(b"\r\n\r\n"):
        raise HttpError(400, "message head does not end with CRLF CRLF")
    lines = head[:-4].split(b"\r\n")
    if any(b"\r" in line or b"\n" in line for line in lines):
        raise HttpError(400, "bare CR or LF in the message head")
    if len(lines) - 1 > MAX_HEADERS:
        raise HttpError(431, f"more than {MAX_HEADERS} header fields")
    return lines


def _headers(lines: list[bytes]) -> Headers:
    headers: Headers = []
    for line in lines:
        if line[:1] in (b" ", b"\t"):
            raise HttpError(400, "folded header line (obs-fold) refused")
        name, colon, value = line.partition(b":")
        if not colon or not _TOKEN.match(name):
            raise HttpError(400, "malformed header field name")
        value = value.strip(b" \t")
        if _VALUE_BAD.search(value):
            raise HttpError(400, "control character in a header value")
        headers.append((name, value))
    return headers


def parse_request_head(head: bytes) -> RequestHead:
    """A request head, origin-form target only (``/path?query``); raises HttpError."""
    lines = _lines(head)
    parts = lines[0].split(b" ")
    if len(parts) != 3 or not _TOKEN.match(parts[0]):
        raise HttpError(400, "malformed request line")
    method, target, version = parts
    if version not in (b"HTTP/1.1", b"HTTP/1.0"):
        raise HttpError(505 if version.startswith(b"HTTP/") else 400, "only HTTP/1.0 and HTTP/1.1 are served")
    if not _TARGET.match(target):
        raise HttpError(400, "the request target must be a path (origin-form), without spaces or controls")
    headers = _headers(lines[1:])
    hosts = header_all(headers, b"host")
    if len(hosts) > 1:
        raise HttpError(400, "more than one Host header (RFC 9112 section 3.2)")
    # RFC 9112 section 3.2: a server MUST answer 400 to an HTTP/1.1 request without Host. The proxy
    # routes by the target's path and writes the route's own Host (core/admission.py), so a missing
    # Host misleads nothing here; but every HTTP/1.1 client sends one (the session's tools do), and
    # the rule costs nothing to keep, so the proxy keeps it (as h11 does). HTTP/1.0 has no Host
    # requirement: such a request is still served without one.
    if not hosts and version == b"HTTP/1.1":
        raise HttpError(400, "an HTTP/1.1 request without a Host header (RFC 9112 section 3.2)")
    return RequestHead(method.decode("ascii"), target.decode("ascii"), version.decode("ascii"), headers)


def parse_response_head(head: bytes) -> ResponseHead:
    """A response head from an upstream; raises HttpError(502)."""
    try:
        lines = _lines(head)
        headers = _headers(lines[1:])
    except HttpError as exc:
        raise HttpError(502, f"the upstream sent a malformed head: {exc.reason}") from exc
    version, _, rest = lines[0].partition(b" ")
    status, _, reason = rest.partition(b" ")
    if version not in (b"HTTP/1.1", b"HTTP/1.0") or not re.fullmatch(rb"[1-5][0-9][0-9]", status):
        raise HttpError(502, "the upstream sent a malformed status line")
    # A reason phrase carries no meaning (RFC 9112 section 4: a client SHOULD ignore it), but clients
    # print it (git's and curl's errors, a tool's log on the session's terminal). One with a control
    # character (an escape sequence, NUL, DEL, a C0 control; a bare CR or LF was refused above with
    # the whole head) is replaced by the standard phrase for its status: the response still works,
    # and the characters never reach the session. Header values mean something, so a control
    # character there is refused instead (502, above).
    if _REASON.fullmatch(reason):
        return ResponseHead(version.decode("ascii"), int(status), reason.decode("latin-1"), headers)
    return ResponseHead(version.decode("ascii"), int(status), standard_reason(int(status)), headers, True)


def standard_reason(status: int) -> str:
    """The reason phrase RFC 9110 gives ``status``; empty for a code it does not define."""
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return ""


def _content_length(headers: Headers, status: int) -> int | None:
    values = header_all(headers, b"content-length")
    if not values:
        return None
    if len(values) > 1 or not _DIGITS.match(values[0]):
        raise HttpError(status, "Content-Length repeated or not a number")
    return int(values[0])


def request_framing(request: RequestHead) -> Framing:
    """How the request body is delimited; smuggling-prone combinations raise HttpError(400)."""
    encodings = header_all(request.headers, b"transfer-encoding")
    length = _content_length(request.headers, 400)
    if encodings:
        if length is not None:
            raise HttpError(400, "both Transfer-Encoding and Content-Length (request smuggling) refused")
        if request.version == "HTTP/1.0":
            raise HttpError(400, "Transfer-Encoding in an HTTP/1.0 request refused")
        if len(encodings) != 1 or encodings[0].lower() != b"chunked":
            raise HttpError(501, "only Transfer-Encoding: chunked is accepted")
        return Framing("chunked")
    if length:
        return Framing("length", length)
    return Framing("none")


def response_framing(request_method: str, response: ResponseHead) -> Framing:
    """How the response body is delimited (RFC 9112 section 6.3)."""
    if request_method == "HEAD" or response.status in (204, 304) or 100 <= response.status < 200:
        return Framing("none")
    encodings = header_all(response.headers, b"transfer-encoding")
    if encodings:
        last = encodings[-1].split(b",")[-1].strip().lower()
        return Framing("chunked") if last == b"chunked" else Framing("close")
    length = _content_length(response.headers, 502)
    if length is not None:
        return Framing("length", length) if length else Framing("none")
    return Framing("close")


def parse_chunk_size(line: bytes) -> int:
    """The size on a chunk-size line (extensions dropped); raises HttpError(400)."""
    # Only the one CRLF ends the line: a bare CR or LF before it is refused, not stripped (and
    # fullmatch, as ``$`` would also match before a trailing LF).
    match = _CHUNK_SIZE.fullmatch(line[:-2]) if line.endswith(b"\r\n") else None
    if match is None or len(line) > MAX_CHUNK_LINE:
        raise HttpError(400, "malformed chunk size line")
    return int(match.group(1), 16)


# Framing fields describe the body before it is read: never a trailer (RFC 9110 section 6.5.1).
_NOT_TRAILERS = frozenset({b"content-length", b"transfer-encoding"})


def parse_trailers(section: bytes) -> Headers:
    """The trailer section of a chunked body, as it follows the last chunk's size line: field lines,
    each ending with CRLF, then an empty line (``b"\\r\\n"`` alone when there are none). A head's field
    rules hold (token names, no control characters, no obs-fold, no bare CR or LF), within
    MAX_TRAILER_BYTES and MAX_HEADERS, and framing fields are refused; raises HttpError(400).
    The proxy reads and checks trailers this way on both sides, and drops them."""
    if len(section) > MAX_TRAILER_BYTES:
        raise HttpError(400, f"trailer section larger than {MAX_TRAILER_BYTES} bytes")
    if section == b"\r\n":
        return []
    if not section.endswith(b"\r\n\r\n"):
        raise HttpError(400, "trailer section does not end with an empty line")
    lines = section[:-4].split(b"\r\n")
    if any(b"\r" in line or b"\n" in line for line in lines):
        raise HttpError(400, "bare CR or LF in the trailer section")
    if len(lines) > MAX_HEADERS:
        raise HttpError(400, f"more than {MAX_HEADERS} trailer fields")
    try:
        fields = _headers(lines)
    except HttpError as exc:
        raise HttpError(400, f"malformed trailer field: {exc.reason}") from None
    for name, _ in fields:
        if name.lower() in _NOT_TRAILERS:
            raise HttpError(400, f"{name.decode()} in a trailer section (a framing field is never a trailer)")
    return fields


def connection_tokens(headers: Headers) -> set[bytes]:
    tokens: set[bytes] = set()
    for value in header_all(headers, b"connection"):
        tokens.update(t.strip().lower() for t in value.split(b",") if t.strip())
    return tokens


def end_to_end(headers: Headers) -> Headers:
    """Headers without the hop-by-hop ones (including those the Connection header names)."""
    named = connection_tokens(headers)
    return [(k, v) for k, v in headers if k.lower() not in HOP_BY_HOP and k.lower() not in named]


def wants_keep_alive(version: str, headers: Headers) -> bool:
    tokens = connection_tokens(headers)
    if version == "HTTP/1.0":
        return b"keep-alive" in tokens
    return b"close" not in tokens


def is_websocket_upgrade(request: RequestHead) -> bool:
    upgrade = request.get(b"upgrade")
    return (b"upgrade" in connection_tokens(request.headers) and upgrade is not None
            and upgrade.strip().lower() == b"websocket")


def serialize_request(method: str, target: str, headers: Headers) -> bytes:
    lines = [f"{method} {target} HTTP/1.1".encode("ascii")]
    lines += [name + b": " + value for name, value in headers]
    return b"\r\n".join(lines) + b"\r\n\r\n"


def serialize_response(status: int, reason: str, headers: Headers) -> bytes:
    if not _REASON.fullmatch(reason.encode("latin-1")):
        raise ValueError(f"a reason phrase with control characters: {reason!r}")
    lines = [f"HTTP/1.1 {status} {reason}".encode("latin-1")]
    lines += [name + b": " + value for name, value in headers]
    return b"\r\n".join(lines) + b"\r\n\r\n"
