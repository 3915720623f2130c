"""Forwarding on aws-sigv4 routes (Bedrock): the request is signed again with the host's AWS keys.

The session's SDK signed the request with this session's placeholder keys (admission checked the
key id); that signature and its companions (SIGNATURE_HEADERS) are dropped, the body is read whole
(SigV4 signs its SHA-256; bounded by ``max_signed_body``, 413 past it), and the request is signed
for the route's upstream, region and service, then sent with the body. The response streams back
as on every route (Bedrock's invoke-with-response-stream answers with an event stream).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import ClassVar

from dejima.core.httpwire import HttpError
from dejima.core.sigv4 import SIGNATURE_HEADERS, payload_sha256, sign
from dejima.proxy.aws_source import AwsSource
from dejima.proxy.budget import Hold
from dejima.proxy.exchange import Exchange, Outcome
from dejima.proxy.http_streams import BodyCut, OverBudget, read_body
from dejima.proxy.routes import RouteSpec
from dejima.proxy.services import ProxyServices
from dejima.proxy.sources import SourceUnavailable

_DROPPED = SIGNATURE_HEADERS | {"content-length", "transfer-encoding"}  # signed anew, framed anew


@dataclass(frozen=True, slots=True)
class SigV4Signing:
    """The behaviour of aws-sigv4 routes (dejima.proxy.routes.RouteBehaviour)."""

    guards_pushes: ClassVar[bool] = False
    signs: ClassVar[bool] = True

    async def forward(self, services: ProxyServices, spec: RouteSpec, exchange: Exchange) -> Outcome:
        route = spec.route
        source = spec.source
        if route.signing is None or not isinstance(source, AwsSource):  # resolve_source gives them an AwsSource
            return await exchange.fail(502, f"route {route.name!r} signs with AWS keys and has none configured")
        exchange.continue_if_expected()
        with Hold(services.budget) as hold:
            return await _read_and_sign(services, spec, exchange, source, hold)


async def _read_and_sign(server: ProxyServices, spec: RouteSpec, exchange: Exchange, source: AwsSource,
                         hold: Hold) -> Outcome:
    route = spec.route
    assert route.signing is not None
    limit = server.config.max_signed_body
    try:
        body = await read_body(exchange.reader, exchange.framing, server.idle, limit, hold)
    except OverBudget as exc:
        server.violation("budget-exceeded", route.name, exc.reason)
        return await exchange.fail(413, f"{exc.reason}: route {route.name!r} signs each request body whole "
                                        "(AWS SigV4); retry when the session's other requests are done, or raise "
                                        "[credentials] proxy_memory in the settings", False)
    except HttpError as exc:
        if exc.status != 413:  # a malformed body (its chunks or trailers): recorded like a malformed head
            server.violation("malformed-request", route.name, exc.reason)
        reason = exc.reason if exc.status != 413 else (
            f"{exc.reason}: route {route.name!r} signs each request body whole (AWS SigV4), so the proxy "
            f"reads at most {limit} bytes of it")
        return await exchange.fail(exc.status, reason, False)
    except (BodyCut, TimeoutError, asyncio.IncompleteReadError, ConnectionError, OSError) as exc:
        return await exchange.fail(400, f"request body not fully received: {exc or type(exc).__name__}",
                             False)
    try:
        keys = await source.keys()
    except SourceUnavailable as exc:
        return await exchange.fail(502, f"the AWS keys of route {route.name!r} are unavailable: {exc}",
                             True)
    server.reals[route.name] = keys.secret_access_key.reveal()
    if keys.session_token is not None:
        server.reals[f"{route.name} (session token)"] = keys.session_token.reveal()
    headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in exchange.admission.headers
               if k.lower().decode("latin-1") not in _DROPPED]
    headers += sign(route.signing.scope, keys, exchange.head.method, exchange.target, headers,
                    payload_sha256(body), datetime.now(timezone.utc))
    return await exchange.run_whole([(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers], body,
                                    length=exchange.head.method in ("POST", "PUT", "PATCH"))
