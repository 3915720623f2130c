"""Whether a request from the session may go to a route's upstream, and with which headers.

The decision reads only the request head:
- the target names a route of this session (``/r/<route>/...``);
- no placeholder or decoy appears anywhere but in the route's own credential header, and that
  header holds this route's placeholder (not another route's, not a decoy, not a real-looking key);
- no real secret the proxy holds appears anywhere in the head.
Refusals that mean something (not a plain 404 or a missing credential) carry a violation kind.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from dataclasses import dataclass, replace

from dejima.core.credentials import (
    ROUTE_PREFIX,
    Route,
    looks_like_real_secret,
    presented_token,
    split_route_target,
    upstream_target,
)
from dejima.core.httpwire import Headers, HttpError, RequestHead, end_to_end, is_websocket_upgrade
from dejima.core.placeholders import Marker, SecretScanner

_DROPPED = frozenset({b"host", b"expect"})  # the proxy writes Host; it answers Expect itself


@dataclass(frozen=True, slots=True)
class Admission:
    route: Route
    target: str  # toward the upstream
    headers: Headers  # to forward, without the credential header (the adapter adds the real one)
    upgrade: bool  # a websocket upgrade


_NOT_SERVED = frozenset({"CONNECT", "TRACE"})


@dataclass(frozen=True, slots=True)
class Refusal:
    status: int
    reason: str  # for the response body and the record; names, never values
    route: str = ""
    violation: str | None = None  # a VIOLATION_KINDS key, or None for an ordinary refusal
    challenge: bool = False  # answer WWW-Authenticate: Basic (git asks for credentials after a 401)


def _marker_refusal(marker: Marker, route: str, where: str) -> Refusal:
    if marker.kind == "decoy":
        return Refusal(403, f"decoy credential {marker.name} used in {where}", route, "decoy-used")
    if marker.belongs_to(route):
        return Refusal(403, f"this route's placeholder appeared in {where}, outside its credential header",
                       route, "placeholder-misplaced")
    return Refusal(403, f"the placeholder of route {marker.name!r} was sent toward route {route!r} ({where})",
                   route, "placeholder-cross-route")


def _scan(text: str, route: str, where: str, scanner: SecretScanner, reals: Mapping[str, str]) -> Refusal | None:
    marker = scanner.find(text)
    if marker is not None:
        return _marker_refusal(marker, route, where)
    for owner, value in reals.items():
        if value and value in text:
            return Refusal(403, f"the real secret of route {owner!r} appeared in {where}", route,
                           "real-secret-in-request")
    if looks_like_real_secret(text):
        return Refusal(403, f"a real-looking credential appeared in {where}; the session only holds placeholders",
                       route, "foreign-credential")
    return None


def _check_credential(route: Route, value: str, scanner: SecretScanner, reals: Mapping[str, str]) -> Refusal | None:
    token = presented_token(route.scheme, value)
    if token is not None and hmac.compare_digest(token.encode(), route.placeholder.encode()):
        return None
    where = f"the {route.header} header"
    for text in (token or "", value):
        found = _scan(text, route.name, where, scanner, reals)
        if found is not None:
            return found
    return Refusal(403, f"{where} does not hold this session's placeholder for route {route.name!r}",
                   route.name, "foreign-credential")


def admit(head: RequestHead, routes: Mapping[str, Route], scanner: SecretScanner,
          reals: Mapping[str, str]) -> Admission | Refusal:
    """Decide one request. ``reals``: route name -> the real secret value it currently holds."""
    if head.method in _NOT_SERVED:  # a tunnel or an echo of the request would carry the credential elsewhere
        return Refusal(405, f"{head.method} is not served: requests go to /r/<route>/... and the proxy makes the "
                            "connection", "", "malformed-request")
    split = split_route_target(head.target)
    if split is None:
        return Refusal(404, "not a route: requests go to /r/<route>/...")
    name, tail = split
    route = routes.get(name)
    if route is None:
        return Refusal(404, f"this session has no route named {name!r}", name)
    found = _scan(head.target, name, "the request path", scanner, reals)
    if found is not None:
        return found
    credentials = [value for key, value in head.headers if key.lower() == route.header.encode()]
    for key, value in head.headers:
        if key.lower() != route.header.encode():
            found = _scan(key.decode("latin-1") + ": " + value.decode("latin-1"), name,
                          f"the {key.decode('latin-1')} header", scanner, reals)
            if found is not None:
                return found
    if len(credentials) > 1:
        return Refusal(400, f"the {route.header} header appears more than once", name, "malformed-request")
    if not credentials:
        return Refusal(401, f"route {name!r} needs this session's placeholder in the {route.header} header", name,
                       challenge=route.scheme == "Basic")
    found = _check_credential(route, credentials[0].decode("latin-1"), scanner, reals)
    if found is not None:
        return found
    upgrade = is_websocket_upgrade(head)
    forwarded = [(k, v) for k, v in end_to_end(head.headers)
                 if k.lower() not in _DROPPED and k.lower() != route.header.encode()]
    forwarded.insert(0, (b"Host", route.upstream.host_header.encode("ascii")))
    if upgrade:
        forwarded += [(b"Connection", b"Upgrade"), (b"Upgrade", head.get(b"upgrade") or b"websocket")]
    return Admission(route, upstream_target(route.upstream, tail), forwarded, upgrade)


def intercepted(head: RequestHead, host: str, route: str) -> RequestHead:
    """A request that arrived over the TLS fallback for ``host`` (its SNI), as a request for its
    route: ``/user`` becomes ``/r/<route>/user``, then ``admit`` decides as for any route. The
    target must be a path, and a Host header must name the host the TLS connection was made for."""
    if not head.target.startswith("/"):
        raise HttpError(400, "an intercepted request's target must be a path")
    named = (head.get(b"host") or host.encode("ascii")).decode("latin-1").lower()
    name, _, port = named.partition(":")
    if name != host or not (port == "" or port.isdigit()):
        raise HttpError(421, f"the Host header names another host than the TLS connection ({host})")
    return replace(head, target=f"{ROUTE_PREFIX}{route}{head.target}")
