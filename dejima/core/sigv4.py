"""AWS Signature Version 4, as pure code (hmac, hashlib): how the proxy signs a Bedrock request.

    keys = AwsKeys("AKIA…", Secret("…"), Secret("token") or None)
    added = sign(SigningScope("us-east-1", "bedrock"), keys, "POST", "/model/x/invoke",
                 [("Host", "bedrock-runtime.us-east-1.amazonaws.com"), ("Content-Type", "application/json")],
                 payload_sha256(body), now)
    # -> [("X-Amz-Date", …), ("X-Amz-Security-Token", …)?, ("Authorization", "AWS4-HMAC-SHA256 Credential=…")]

The steps follow AWS's documentation (canonical request, string to sign, signing key, signature)
and are checked against AWS's published SigV4 test suite and against botocore in the tests.
Paths are canonicalised as for every service but S3: dot segments and repeated slashes removed,
then each character outside RFC 3986's unreserved set percent-encoded, so a path already
percent-encoded on the wire (``v1%3A0``) is encoded again (``v1%253A0``), as AWS expects.
"""

from __future__ import annotations

import hashlib
import hmac
import posixpath
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from urllib.parse import quote, unquote

from dejima.core.secret import Secret

ALGORITHM = "AWS4-HMAC-SHA256"
# What a session's SDK wrote for its own (placeholder) signature: dropped before the proxy signs.
SIGNATURE_HEADERS = frozenset({"authorization", "x-amz-date", "x-amz-security-token", "x-amz-content-sha256"})
_SPACES = re.compile(r"\s+")
_AUTHORIZATION = re.compile(
    r"^AWS4-HMAC-SHA256\s+Credential=([^/,\s]+)/(\d{8})/([a-z0-9-]+)/([a-z0-9-]+)/aws4_request\s*,"
    r"\s*SignedHeaders=([a-z0-9;-]+)\s*,\s*Signature=([0-9a-f]{64})\Z")


@dataclass(frozen=True, slots=True)
class AwsKeys:
    """One set of AWS credentials; ``expires_at`` (epoch seconds) only for temporary ones."""

    access_key_id: str
    secret_access_key: Secret
    session_token: Secret | None = None
    expires_at: float | None = None


@dataclass(frozen=True, slots=True)
class SigningScope:
    region: str
    service: str

    def credential_scope(self, date: str) -> str:
        return f"{date}/{self.region}/{self.service}/aws4_request"


@dataclass(frozen=True, slots=True)
class AwsSigning:
    """How a route signs: its scope, and the placeholder secret key the session signs with instead."""

    scope: SigningScope
    secret_placeholder: str


_REGION = re.compile(r"^[a-z]{2}(-[a-z]+)+-[0-9]+\Z")


def region_of(host: str) -> str | None:
    """The region a regional AWS endpoint names (``bedrock-runtime.eu-west-3.amazonaws.com``), or None."""
    labels = host.lower().split(".")
    if len(labels) >= 4 and labels[-2:] == ["amazonaws", "com"] and _REGION.match(labels[-3]):
        return labels[-3]
    return None


@dataclass(frozen=True, slots=True)
class PresentedSignature:
    """The parts of an ``Authorization: AWS4-HMAC-SHA256 …`` header a client sent."""

    access_key_id: str
    date: str
    region: str
    service: str
    signed_headers: tuple[str, ...]
    signature: str


def parse_authorization(value: str) -> PresentedSignature | None:
    """The parts of a SigV4 Authorization header, or None when it is not one."""
    match = _AUTHORIZATION.match(value.strip())
    if match is None:
        return None
    key, date, region, service, signed, signature = match.groups()
    return PresentedSignature(key, date, region, service, tuple(signed.split(";")), signature)


def payload_sha256(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()


def amz_date(now: datetime) -> str:
    return now.astimezone(timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def _encode(text: str, safe: str = "") -> str:
    """RFC 3986 percent-encoding of UTF-8: everything but A-Z a-z 0-9 - _ . ~ (and ``safe``)."""
    return quote(text, safe=safe + "~")


def canonical_path(path: str) -> str:
    """The canonical URI of a non-S3 request path, as it was sent on the wire."""
    if not path:
        return "/"
    normalized = posixpath.normpath(path)
    if normalized.startswith("//"):  # normpath keeps a leading double slash (POSIX allows it to mean something)
        normalized = "/" + normalized.lstrip("/")
    if path.endswith("/") and normalized != "/":
        normalized += "/"
    return _encode(normalized, safe="/")


def canonical_query(query: str) -> str:
    """Parameters decoded, then each name and value encoded and the pairs sorted (by name, then value)."""
    pairs = []
    for part in query.split("&"):
        if part:
            name, _, value = part.partition("=")
            pairs.append((_encode(unquote(name)), _encode(unquote(value))))
    return "&".join(f"{name}={value}" for name, value in sorted(pairs))


def canonical_headers(headers: Iterable[tuple[str, str]], signed: Sequence[str]) -> str:
    """``name:value`` lines for the signed names: values trimmed, inner whitespace runs collapsed,
    repeated fields joined with commas in the order they came."""
    values: dict[str, list[str]] = {name: [] for name in signed}
    for name, value in headers:
        lower = name.lower()
        if lower in values:
            values[lower].append(_SPACES.sub(" ", value.strip()))
    return "".join(f"{name}:{','.join(values[name])}\n" for name in signed)


def canonical_request(method: str, target: str, headers: Sequence[tuple[str, str]], signed: Sequence[str],
                      payload_hash: str) -> str:
    path, _, query = target.partition("?")
    return "\n".join((method, canonical_path(path), canonical_query(query),
                      canonical_headers(headers, signed), ";".join(signed), payload_hash))


def string_to_sign(timestamp: str, scope: SigningScope, canonical: str) -> str:
    return "\n".join((ALGORITHM, timestamp, scope.credential_scope(timestamp[:8]),
                      hashlib.sha256(canonical.encode("utf-8")).hexdigest()))


def _hmac(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode("utf-8"), hashlib.sha256).digest()


def signing_key(secret: Secret, date: str, scope: SigningScope) -> bytes:
    key = _hmac(("AWS4" + secret.reveal()).encode("utf-8"), date)
    for part in (scope.region, scope.service, "aws4_request"):
        key = _hmac(key, part)
    return key


def signature(secret: Secret, scope: SigningScope, timestamp: str, canonical: str) -> str:
    key = signing_key(secret, timestamp[:8], scope)
    return hmac.new(key, string_to_sign(timestamp, scope, canonical).encode("utf-8"), hashlib.sha256).hexdigest()


def signed_names(headers: Iterable[tuple[str, str]], sign_all: bool = False) -> list[str]:
    """The header names to sign, sorted: host, content-type and every x-amz-* (or all, ``sign_all``)."""
    names = {name.lower() for name, _ in headers}
    if not sign_all:
        names = {n for n in names if n in ("host", "content-type") or n.startswith("x-amz-")}
    return sorted(names)


def sign(scope: SigningScope, keys: AwsKeys, method: str, target: str, headers: Sequence[tuple[str, str]],
         payload_hash: str, now: datetime, sign_all: bool = False) -> list[tuple[str, str]]:
    """The headers that sign a request: X-Amz-Date, X-Amz-Security-Token (temporary keys) and
    Authorization. ``headers`` must hold Host and none of SIGNATURE_HEADERS; ``target`` is the
    path and query as sent upstream."""
    if any(name.lower() in SIGNATURE_HEADERS for name, _ in headers):
        raise ValueError("the request still carries a signature header; drop SIGNATURE_HEADERS first")
    timestamp = amz_date(now)
    added = [("X-Amz-Date", timestamp)]
    if keys.session_token is not None:
        added.append(("X-Amz-Security-Token", keys.session_token.reveal()))
    every = [*headers, *added]
    names = signed_names(every, sign_all)
    canonical = canonical_request(method, target, every, names, payload_hash)
    value = signature(keys.secret_access_key, scope, timestamp, canonical)
    authorization = (f"{ALGORITHM} Credential={keys.access_key_id}/{scope.credential_scope(timestamp[:8])}, "
                     f"SignedHeaders={';'.join(names)}, Signature={value}")
    return [*added, ("Authorization", authorization)]
