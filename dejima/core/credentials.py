"""Credential routes as the proxy sees them: where a secret may go, how it is written, how a session asks.

A session reaches a route through one URL prefix on the proxy:

    http://127.0.0.1:PORT/r/<route-name>/<rest>   ->   <upstream base URL>/<rest>

so ``ANTHROPIC_BASE_URL=http://127.0.0.1:PORT/r/anthropic-api-key`` and git's
``url.http://127.0.0.1:PORT/r/github-git/.insteadOf=https://github.com/`` both work unchanged.
The session holds a per-session placeholder in the route's header; the proxy checks it and writes
the real secret in its place, toward that route's upstream only.

Real secret values are held in :class:`dejima.core.secret.Secret`, whose text forms never show the value.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from dejima.core.secret import Secret
from dejima.core.sigv4 import AwsSigning, parse_authorization

ROUTE_PREFIX = "/r/"
SCHEMES = ("Bearer", "token", "Basic", "raw", "aws-sigv4")
_ROUTE_NAME = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*\Z")
_LOOPBACK_NAMES = ("localhost",)


@dataclass(frozen=True, slots=True)
class Upstream:
    scheme: str  # "https", or "http" toward loopback only (test worlds, local gateways)
    host: str
    port: int
    base_path: str  # without a trailing slash; "" for the root

    @property
    def host_header(self) -> str:
        default = 443 if self.scheme == "https" else 80
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port == default else f"{host}:{self.port}"

    def __str__(self) -> str:
        return f"{self.scheme}://{self.host_header}{self.base_path}"


class RouteError(ValueError):
    """A route or upstream that cannot be used; the message names the route and the fix."""


def _is_loopback(host: str) -> bool:
    if host in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def parse_upstream(url: str, route: str) -> Upstream:
    """An upstream URL: https anywhere, plain http only to a loopback address; no query, no user info."""
    parts = urlsplit(url)
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise RouteError(f"route {route!r}: upstream {url!r} is not an https:// URL")
    if parts.scheme == "http" and not _is_loopback(parts.hostname):
        raise RouteError(f"route {route!r}: upstream {url!r} is plain http to a non-loopback host; "
                         "secrets only travel over TLS")
    if parts.username or parts.password or parts.query or parts.fragment:
        raise RouteError(f"route {route!r}: upstream {url!r} must not carry user info, a query or a fragment")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as exc:
        raise RouteError(f"route {route!r}: upstream {url!r} has a bad port") from exc
    return Upstream(parts.scheme, parts.hostname.lower(), port, parts.path.rstrip("/"))


@dataclass(frozen=True, slots=True)
class Route:
    """One credential route of a session: its upstream, its header, and the placeholder that stands for it."""

    name: str
    upstream: Upstream
    header: str  # lower-case header name
    scheme: str  # one of SCHEMES
    placeholder: str
    username: str | None = None  # Basic only: the user name the forge expects with a token
    signing: AwsSigning | None = None  # aws-sigv4 only: the proxy signs each request (placeholder: a key id)

    @property
    def placeholders(self) -> tuple[str, ...]:
        """Every value the session holds for this route: its placeholder and, for a signed route,
        the secret key's (the scanner and the resolver's canaries look for each)."""
        return (self.placeholder, self.signing.secret_placeholder) if self.signing else (self.placeholder,)

    def __post_init__(self) -> None:
        if not _ROUTE_NAME.match(self.name):
            raise RouteError(f"route name {self.name!r} is not kebab-case")
        if self.scheme not in SCHEMES:
            raise RouteError(f"route {self.name!r}: scheme {self.scheme!r} is not one of {', '.join(SCHEMES)}")
        if (self.scheme == "aws-sigv4") != (self.signing is not None):
            raise RouteError(f"route {self.name!r}: scheme aws-sigv4 goes with a signing scope, and only it")
        if self.header != self.header.lower() or not re.fullmatch(r"[a-z0-9!#$%&'*+.^_`|~-]+", self.header):
            raise RouteError(f"route {self.name!r}: header {self.header!r} is not a lower-case header name")


def route_base_url(origin: str, route: str) -> str:
    """The base URL a session uses for a route, e.g. ``http://127.0.0.1:8080/r/anthropic-api-key``."""
    return f"{origin.rstrip('/')}{ROUTE_PREFIX}{route}"


def split_route_target(target: str) -> tuple[str, str] | None:
    """``/r/<name>/rest?q`` -> (name, ``/rest?q``); None when the target is not under a route."""
    if not target.startswith(ROUTE_PREFIX):
        return None
    rest = target[len(ROUTE_PREFIX):]
    cut = min((i for i in (rest.find("/"), rest.find("?")) if i >= 0), default=len(rest))
    name, tail = rest[:cut], rest[cut:]
    if not _ROUTE_NAME.match(name):
        return None
    if not tail.startswith("/"):
        tail = "/" + tail
    return name, tail


def upstream_target(upstream: Upstream, tail: str) -> str:
    """The request target toward the upstream: its base path, then what followed the route prefix."""
    return f"{upstream.base_path}{tail}"


def credential_value(route: Route, secret: Secret) -> str:
    """The header value that carries the real secret, in the route's scheme (not aws-sigv4: it signs)."""
    if route.scheme == "aws-sigv4":
        raise ValueError(f"route {route.name!r} is signed per request (dejima.core.sigv4), not given a header")
    value = secret.reveal()
    if route.scheme == "raw":
        return value
    if route.scheme == "Basic":
        user = route.username or "dejima"
        return "Basic " + base64.b64encode(f"{user}:{value}".encode()).decode("ascii")
    return f"{route.scheme} {value}"


def presented_token(scheme: str, header_value: str) -> str | None:
    """What the client put where the secret goes: the raw value, a Bearer/token word, or a Basic password.

    Basic accepts the token as either the password or the user name (tools differ); the caller
    compares the result with the placeholder.
    """
    value = header_value.strip()
    if scheme == "raw":
        return value
    if scheme == "aws-sigv4":  # the key id the client signed with (its signature, made with a placeholder, is dropped)

        presented = parse_authorization(value)
        return presented.access_key_id if presented else None
    word, _, rest = value.partition(" ")
    rest = rest.strip()
    if scheme == "Basic":
        if word.lower() != "basic":
            return None
        try:
            user, _, password = base64.b64decode(rest, validate=True).decode("utf-8").partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return None
        return password or user
    if word.lower() in ("bearer", "token") and rest:
        return rest
    return None


# Shapes of real credentials, so that a client presenting one it found somewhere is refused, not forwarded.
REAL_SECRET_SHAPES = re.compile(
    r"(sk-ant-(api|oat|ort|admin)\d\d-[A-Za-z0-9_-]{20,}"
    r"|sk-(proj-|svcacct-)?[A-Za-z0-9_-]{32,}"
    r"|gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{40,}"
    r"|glpat-[A-Za-z0-9_-]{20,}"
    r"|(AKIA|ASIA)[A-Z0-9]{16}"
    r"|AIza[A-Za-z0-9_-]{35}"
    r"|xox[abposr]-[A-Za-z0-9-]{10,}"
    r"|ya29\.[A-Za-z0-9_-]{20,})"
)


def looks_like_real_secret(text: str) -> bool:
    return REAL_SECRET_SHAPES.search(text) is not None
