"""The HTTP CONNECT exchange with an upstream (corporate) proxy, as both the filter's relay
(filter/relay.py) and the credential proxy (proxy/upstream.py) speak it. Stdlib only: the filter
image holds it (adapters/packaged.py FILTER_SHARED)."""

from __future__ import annotations

MAX_ANSWER = 16 * 1024  # the proxy's answer head to a CONNECT, at most


def connect_request(target: str) -> bytes:
    """``CONNECT host:port``: ``target`` comes from the policy or a route, never from the session."""
    return f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode("ascii")


def answer_status(head: bytes) -> int | None:
    """The status of the proxy's answer head (``HTTP/1.x NNN ...``), or None when it is none."""
    first = head.split(b"\r\n", 1)[0].split(b" ", 2)
    if len(first) < 2 or not first[0].startswith(b"HTTP/1.") or not first[1].isdigit():
        return None
    return int(first[1])


def status_line(head: bytes) -> str:
    """The answer's first line, as text and bounded, for a message."""
    return head.split(b"\r\n", 1)[0][:200].decode("ascii", "replace")
