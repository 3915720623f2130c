"""What the proxy records: one ledger entry per request, one violation per refusal that means something.

Records never hold a secret: query values are dropped (only their names stay), and any
placeholder, decoy or real secret found in a recorded text is replaced by a label naming it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from urllib.parse import parse_qsl

from dejima.core.placeholders import SecretScanner

MAX_PATH = 512
_KEPT_QUERY_VALUES = frozenset({"service"})  # git's info/refs?service=git-upload-pack says what the request is


def scrub(text: str, scanner: SecretScanner, secrets: Iterable[str]) -> str:
    """``text`` with real secrets (any case) replaced, or cut whole if it holds a placeholder or decoy."""
    for value in secrets:
        if value and value.lower() in text.lower():
            text = re.sub(re.escape(value), "<real secret>", text, flags=re.IGNORECASE)
    for marker in scanner.find_all(text):
        # Cut the record at the first marker rather than risk leaving part of a value behind.
        text = f"<{marker} removed>"
    return text


def redact_target(target: str, scanner: SecretScanner, secrets: Iterable[str] = ()) -> str:
    """The path with query values removed (names kept), scrubbed of secrets, bounded in length."""
    path, question, query = target.partition("?")
    if question:
        names = [f"{k}={v}" if k in _KEPT_QUERY_VALUES and len(v) < 40 else k
                 for k, v in parse_qsl(query, keep_blank_values=True)]
        path = f"{path}?{'&'.join(names)}" if names else path
    path = scrub(path, scanner, secrets)
    return path if len(path) <= MAX_PATH else path[:MAX_PATH] + "…"


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    time: float  # seconds since the epoch, when the request head arrived
    route: str
    method: str
    path: str  # redacted
    status: int
    bytes_in: int  # request body bytes from the session
    bytes_out: int  # response body bytes to the session
    duration_ms: float
    error: str = ""  # what went wrong after the status was sent (a cut stream), or why the proxy answered

    def record(self) -> dict[str, object]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class Violation:
    time: float
    kind: str  # see VIOLATION_KINDS
    route: str  # the route asked for ("" when none)
    detail: str  # what was wrong, with names only

    def record(self) -> dict[str, object]:
        return {"source": "proxy", **asdict(self)}


VIOLATION_KINDS = {
    "malformed-request": "the request could not be read unambiguously (smuggling, header injection, size)",
    "placeholder-misplaced": "a placeholder appeared outside its own route's credential header",
    "placeholder-cross-route": "a placeholder was sent toward another route's upstream",
    "decoy-used": "a decoy credential was used",
    "foreign-credential": "the client sent a credential that is not this session's placeholder",
    "real-secret-in-request": "the request carried a real secret held by the proxy",
    "push-refused": "a git push broke a push rule (or went through a route without push rules)",
    "ambiguous-request": "a request on a git route that a forge could read another way than the proxy (encoded "
                         "slashes, double encodings, WebDAV methods...)",
    "budget-exceeded": "the session went past the credential proxy's memory or connection budget",
    "tls-name-refused": "a TLS connection to the proxy named no host a route intercepts (or no host at all)",
}
