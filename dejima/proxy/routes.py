"""A route as the proxy serves it: its credential source and its behaviour, how a request goes upstream.

The route declares its behaviour; the server holds it and hands it the proxy's services
(dejima.proxy.services), as mitmproxy hands its addons the flow:

- :class:`Forwarding`: the placeholder's header gives way to the real secret; the request streams.
- ``GitPushGuard`` (dejima.proxy.gitpush): a git route's requests are judged, pushes read as they stream.
- ``SigV4Signing`` (dejima.proxy.signing): the body is read whole and the request signed with AWS keys.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Protocol

from dejima.core.credentials import Route, RouteError, credential_value
from dejima.core.httpwire import Headers, serialize_request
from dejima.proxy.exchange import Exchange, Outcome
from dejima.proxy.services import ProxyServices
from dejima.proxy.sources import CredentialSource, SourceUnavailable


class RouteBehaviour(Protocol):
    guards_pushes: ClassVar[bool]  # it judges git pushes itself (other routes refuse any push path)
    signs: ClassVar[bool]  # it signs each request (routes whose scheme is aws-sigv4, and only they)

    async def forward(self, services: ProxyServices, spec: RouteSpec, exchange: Exchange) -> Outcome:
        """Take the admitted request upstream and its answer back; the Outcome goes to the ledger."""
        ...


@dataclass(frozen=True, slots=True)
class Forwarding:
    """The plain route: the real secret in the route's header, the request and its answer streamed."""

    guards_pushes: ClassVar[bool] = False
    signs: ClassVar[bool] = False

    async def forward(self, services: ProxyServices, spec: RouteSpec, exchange: Exchange) -> Outcome:
        route = spec.route
        try:
            secret = await spec.source.current()
        except SourceUnavailable as exc:
            return await exchange.fail(502, f"the credential of route {route.name!r} is unavailable: {exc}")
        services.reals[route.name] = secret.reveal()
        headers = [*exchange.admission.headers, (route.header.encode(), credential_value(route, secret).encode())]
        if exchange.framing.kind == "chunked":
            headers.append((b"Transfer-Encoding", b"chunked"))
        exchange.continue_if_expected()
        return await self.send(services, spec, exchange, headers)

    async def send(self, services: ProxyServices, spec: RouteSpec, exchange: Exchange, headers: Headers) -> Outcome:
        """Send the request, its credential written in ``headers``."""
        return await exchange.run(serialize_request(exchange.head.method, exchange.target, headers))


@dataclass(frozen=True, slots=True)
class RouteSpec:
    route: Route
    source: CredentialSource
    behaviour: RouteBehaviour = Forwarding()

    def __post_init__(self) -> None:
        if (self.route.signing is not None) != self.behaviour.signs:
            raise RouteError(f"route {self.route.name!r}: a signed route (aws-sigv4) is served by signing, "
                             "and only it")
