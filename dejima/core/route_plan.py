"""A session's credential routes as planned: one value each, read by everything that names a route.

    routes = plan_routes(declared_routes(resolved), draws, present=..., push=...)   # no I/O
    routes.routes      the card and ``--render`` (where each secret comes from, where it may go)
    routes.environment the session's variables: placeholders, base URLs through the proxy, git rewrites, decoys
    routes.canaries    the values the filter's resolver refuses to see in a name
    routes.intercepted the hosts whose TLS the proxy answers (the filter relays them)

Only the proxy turns the plan into routes it serves, each with its source read on the host
(dejima.proxy.runner.served_config); a route whose source the host lacks is not planned at all, so
nothing names a route that will not be served.
"""

from __future__ import annotations

import base64
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from dejima.core.credentials import Route, RouteError, parse_upstream, route_base_url
from dejima.core.limits import ProxyLimits
from dejima.core.manifest import CredentialRoute
from dejima.core.paths import BRIDGE_PORT, SESSION_HOME, SESSION_TRUST_DIR
from dejima.core.placeholders import (
    AWS_PLACEHOLDER_ENV,
    Decoys,
    Draws,
    make_aws_placeholders,
    make_decoys,
    make_placeholder,
)
from dejima.core.pushrules import PushPolicy
from dejima.core.resolve import Resolved
from dejima.core.sigv4 import AwsSigning, SigningScope, region_of

ORIGIN = f"http://127.0.0.1:{BRIDGE_PORT}"  # the proxy, as the session reaches it through the filter
TRUST_DIR = f"{SESSION_HOME}/{SESSION_TRUST_DIR}"  # the session CA and the bundle its tools trust, as it sees them
# Where tools look for extra trust: each gets the session's bundle (the system's CAs and the session
# CA), except Node, which adds NODE_EXTRA_CA_CERTS to its own store and gets the session CA alone.
TRUST_VARS = ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO", "PIP_CERT",
              "AWS_CA_BUNDLE", "CARGO_HTTP_CAINFO")
CA_FILE, BUNDLE_FILE = "session-ca.pem", "ca-bundle.pem"

# How the proxy takes a route's requests upstream (dejima.proxy.runner maps each to its behaviour).
FORWARDS, GUARDS_PUSHES, SIGNS = "forwards", "guards pushes", "signs"


@dataclass(frozen=True, slots=True)
class PlannedRoute:
    """One route of one session: the proxy's route (upstream after any override, header, placeholder),
    where its secret comes from (named, never read), how the proxy forwards it and what the session gets."""

    route: Route
    origin: str  # the manifest that declares it
    source: tuple[str, tuple[str, ...]]  # as the manifest names it: ("env", ("GH_TOKEN",))
    declared_upstream: str  # the manifest's URL: where the session's tools connect (git rewrites, intercepted host)
    behaviour: str  # FORWARDS, GUARDS_PUSHES or SIGNS
    push: PushPolicy | None = None  # GUARDS_PUSHES only: where the session may push
    intercept: str | None = None  # the host whose TLS the proxy answers for this route (the session CA)
    placeholder_env: str | None = None  # the session's variable holding the placeholder
    base_url_env: str | None = None  # the session's variable holding the route's base URL through the proxy

    @property
    def name(self) -> str:
        return self.route.name

    @property
    def source_shown(self) -> str:
        """Where the secret comes from, as the card says it (never the value)."""
        kind, values = self.source
        if self.route.signing is not None:
            scope = self.route.signing.scope
            return f"the host's AWS keys (profile {values[0]} or AWS_PROFILE), SigV4-signed for {scope.service}"
        if kind == "claude_login":
            return f"the host's Claude login ({values[0]})"
        return f"host {kind} {' '.join(values)}"

    @property
    def variables_shown(self) -> str | None:
        """The session's variables holding this route's placeholders."""
        return ", ".join(AWS_PLACEHOLDER_ENV) if self.route.signing is not None else self.placeholder_env


@dataclass(frozen=True, slots=True)
class RoutesPlan:
    """A session's routes, its decoys, the variables they give the session, and the proxy's own settings:
    every value here the session sees anyway, or policy; no secret."""

    routes: tuple[PlannedRoute, ...]
    decoys: Decoys
    environment: tuple[tuple[str, str], ...]  # sorted: placeholders, base URLs, git rewrites, trust, decoys
    records: str = ""  # the session's private host directory: the proxy's ledger and violations go there
    limits: ProxyLimits = ProxyLimits(64 * 1024**2, 128)  # what the proxy may hold and serve at once (settings')
    extra_ca_file: str | None = None  # [credentials] extra_ca_file: trusted toward the upstreams besides the system's
    upstream_proxy: tuple[str, int] | None = None  # https upstreams are reached through it (CONNECT)
    upstream_proxy_ca_file: str | None = None  # [network] extra_ca: a TLS-inspecting proxy's CA

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(planned.name for planned in self.routes)

    @property
    def canaries(self) -> tuple[str, ...]:
        """Every placeholder and decoy value: the resolver refuses a name holding one."""
        return (*(value for planned in self.routes for value in planned.route.placeholders),
                *self.decoys.values().values())

    @property
    def intercepted(self) -> dict[str, str]:
        """Host -> route for the TLS fallback (the first route naming a host wins)."""
        hosts: dict[str, str] = {}
        for planned in self.routes:
            if planned.intercept is not None:
                hosts.setdefault(planned.intercept, planned.name)
        return hosts

    def access(self, name: str, origin: str = ORIGIN) -> tuple[str, str] | None:
        """(base URL as the session reaches it, placeholder) of route ``name``; None if the session lacks it."""
        for planned in self.routes:
            if planned.name == name:
                return route_base_url(origin, name), planned.route.placeholder
        return None


def declared_routes(resolved: Resolved | None) -> list[tuple[CredentialRoute, str]]:
    """(route, the manifest that declares it), each route name once (the first manifest wins)."""
    seen: dict[str, tuple[CredentialRoute, str]] = {}
    for manifest in resolved.manifests if resolved else ():
        for route in manifest.credentials:
            seen.setdefault(route.name, (route, manifest.source))
    return list(seen.values())


def plan_routes(routes: Iterable[tuple[CredentialRoute, str]], draws: Draws, overrides: Mapping[str, str] = {},
                push: Mapping[str, PushPolicy] = {}, present: Collection[str] | None = None, decoys: bool = True,
                origin: str = ORIGIN, trust_dir: str = TRUST_DIR) -> RoutesPlan:
    """The session's routes with their placeholders and decoys (from ``draws``), each source named. No I/O.

    ``routes``: (manifest route, the manifest's path); ``overrides``: route name -> upstream URL (gateways,
    test worlds); ``push``: the push policy of each git route; ``present``: the routes whose source the
    host has, the others left out; None (``--render``): every route is kept. ``origin``: the proxy as the
    session reaches it; ``trust_dir``: where the session finds the session CA's files.
    """
    planned: list[PlannedRoute] = []
    aws_key_id, aws_secret = make_aws_placeholders(draws)  # one AWS identity per session, as an SDK has one
    # One placeholder per host secret: routes fed by the same source (gh's GH_TOKEN toward
    # api.github.com and uploads.github.com, git's toward github.com) accept the same placeholder,
    # each toward its own upstream only; it could only ever bring them the same secret.
    shared: dict[tuple[str, tuple[str, ...]], str] = {}
    for declared, where in routes:
        if present is not None and declared.name not in present:
            continue
        try:
            upstream = parse_upstream(overrides.get(declared.name, declared.upstream), declared.name)
        except RouteError as exc:
            raise RouteError(f"{where} credentials route {declared.name!r}: {exc}") from None
        shape_host = parse_upstream(declared.upstream, declared.name).host
        header = declared.header.lower()
        signing = None
        if declared.scheme == "aws-sigv4":
            # The region of the upstream actually used (a regional override), else the manifest's.
            region = region_of(upstream.host) or region_of(shape_host) or ""
            signing = AwsSigning(SigningScope(region, declared.aws_service or ""), aws_secret)
        kind, values = declared.source
        placeholder = aws_key_id if signing else shared.setdefault(
            declared.source, make_placeholder(shape_host, header, draws, " ".join((kind, *values))))
        route = Route(declared.name, upstream, header, declared.scheme, placeholder, declared.username, signing)
        policy = push.get(declared.name) if signing is None else None
        behaviour = SIGNS if signing is not None else GUARDS_PUSHES if policy is not None else FORWARDS
        planned.append(PlannedRoute(route, where, declared.source, declared.upstream, behaviour, policy,
                                    shape_host if declared.intercept else None, declared.placeholder_env,
                                    declared.base_url_env))
    taken = [p.placeholder_env for p in planned if p.placeholder_env]
    if any(p.route.signing for p in planned):
        taken += AWS_PLACEHOLDER_ENV
    made = make_decoys(draws, taken) if decoys else Decoys({}, "", {})
    return RoutesPlan(tuple(planned), made, tuple(sorted(session_env(planned, made, origin, trust_dir).items())))


def trust_env(trust_dir: str) -> dict[str, str]:
    """The variables that make the session's tools trust the session CA (``trust_dir`` as the session sees it)."""
    env = {name: f"{trust_dir}/{BUNDLE_FILE}" for name in TRUST_VARS}
    env["NODE_EXTRA_CA_CERTS"] = f"{trust_dir}/{CA_FILE}"
    return env


def session_env(routes: Iterable[PlannedRoute], decoys: Decoys, origin: str, trust_dir: str) -> dict[str, str]:
    """The session's environment for its routes: placeholders, base URLs, git rewrites, decoys.

    Basic routes (git smart-HTTP) get ``url.<proxy route>.insteadOf=<upstream>/`` and the placeholder as an
    ``http.<proxy route>.extraHeader``, through GIT_CONFIG_* (no file in the workspace). With intercepted
    routes, ``trust_dir`` goes into TRUST_VARS.
    """
    env: dict[str, str] = dict(decoys.env)
    git: list[tuple[str, str]] = []
    for planned in routes:
        route = planned.route
        base = route_base_url(origin, route.name)
        if planned.intercept is not None:
            env.update(trust_env(trust_dir))
        if planned.placeholder_env:
            env[planned.placeholder_env] = route.placeholder
        if route.signing:
            env.update(zip(AWS_PLACEHOLDER_ENV, route.placeholders, strict=True))
        if planned.base_url_env:
            env[planned.base_url_env] = base
        if route.scheme == "Basic":
            auth = base64.b64encode(f"{route.username or 'dejima'}:{route.placeholder}".encode()).decode()
            git.append((f"url.{base}/.insteadOf", planned.declared_upstream.rstrip("/") + "/"))
            git.append((f"http.{base}/.extraHeader", f"Authorization: Basic {auth}"))
    if git:
        env["GIT_CONFIG_COUNT"] = str(len(git))
        for index, (key, value) in enumerate(git):
            env[f"GIT_CONFIG_KEY_{index}"], env[f"GIT_CONFIG_VALUE_{index}"] = key, value
        env["GIT_TERMINAL_PROMPT"] = "0"
    return env
