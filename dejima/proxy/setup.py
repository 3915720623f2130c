"""From a session's manifest routes to a ProxyConfig and the environment the session needs.

    sources, skipped = read_sources_of(routes)      # on the host: the secrets' sources (helpers run)
    planned = plan_routes(routes, directory, present=sources, skipped=skipped)   # no I/O, no secret
    ready = served(planned, sources)                 # the sources handed in, the session CA made

    server = ProxyServer(ready.config); await server.start(unix_path=directory / "proxy.sock")
    env = session_env(ready, "http://127.0.0.1:PORT", {"anthropic-api-key": "ANTHROPIC_BASE_URL"})

A route whose source is missing is left out and its error kept in ``skipped`` (the caller decides
whether the session can start without it); ``required`` routes raise instead.
"""

from __future__ import annotations

import base64
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from dejima.adapters.session_dirs import (  # the session's own files: `dejima violations`/`ledger` read them
    LEDGER,
    RECORDS,
)
from dejima.core.credentials import ROUTE_PREFIX, Route, RouteError, parse_upstream, route_base_url
from dejima.core.manifest import CredentialRoute
from dejima.core.placeholders import AWS_PLACEHOLDER_ENV, Decoys, make_aws_placeholders, make_decoys, make_placeholder
from dejima.core.pushrules import PushPolicy
from dejima.core.sigv4 import AwsSigning, SigningScope, region_of
from dejima.proxy.gitpush import GitPushGuard
from dejima.proxy.routes import Forwarding, RouteBehaviour, RouteSpec
from dejima.proxy.server import ProxyConfig
from dejima.proxy.signing import SigV4Signing
from dejima.proxy.source_kinds import resolve_source
from dejima.proxy.sources import CredentialError, CredentialSource, UnreadSource

if TYPE_CHECKING:
    from dejima.proxy.intercept import Interception


@dataclass(frozen=True, slots=True)
class PreparedProxy:
    config: ProxyConfig
    manifest_routes: Mapping[str, CredentialRoute]  # by route name, as the manifests wrote them
    decoys: Decoys
    skipped: tuple[CredentialError, ...] = field(default_factory=tuple)
    intercepted: Mapping[str, str] = field(default_factory=dict)  # the TLS fallback's hosts -> their routes

    @property
    def interception(self) -> Interception | None:
        """The session CA and its hosts: made by ``served``, None in a plan."""
        return self.config.interception


# Where tools look for extra trust: each gets the session's bundle (the system's CAs and the session
# CA), except Node, which adds NODE_EXTRA_CA_CERTS to its own store and gets the session CA alone.
TRUST_VARS = ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO", "PIP_CERT",
              "AWS_CA_BUNDLE", "CARGO_HTTP_CAINFO")
CA_FILE, BUNDLE_FILE = "session-ca.pem", "ca-bundle.pem"


def read_sources_of(routes: Iterable[tuple[CredentialRoute, str]], required: Iterable[str] = (),
                    environ: Mapping[str, str] | None = None,
                    home: Path | None = None) -> tuple[dict[str, CredentialSource], tuple[CredentialError, ...]]:
    """Each route's source read on the host, by route name; a missing one is left out with its error
    (the second item), unless its route is ``required``, which raises that error."""
    sources: dict[str, CredentialSource] = {}
    skipped: list[CredentialError] = []
    must = set(required)
    for declared, origin in routes:
        try:
            sources[declared.name] = resolve_source(declared.source, f"{origin} credentials route {declared.name!r}",
                                                    environ, home)
        except CredentialError as exc:
            if declared.name in must:
                raise
            skipped.append(exc)
    return sources, tuple(skipped)


def plan_routes(routes: Iterable[tuple[CredentialRoute, str]], directory: Path, overrides: Mapping[str, str] = {},
                push: Mapping[str, PushPolicy] = {}, present: Collection[str] | None = None,
                extra_ca_file: str | None = None, skipped: tuple[CredentialError, ...] = ()) -> PreparedProxy:
    """The session's routes with their placeholders and decoys, each source *named* (``UnreadSource``):
    what a start plans, no secret in it. Reads nothing.

    ``routes``: (manifest route, the manifest's path); ``overrides``: route name -> upstream URL
    (gateways, corporate proxies, test worlds); ``directory``: the session's private host directory
    (ledger.jsonl and violations.jsonl go there); ``present``: the routes whose source the host has
    (``read_sources_of``), the others left out; None (``--render``): every route is kept.
    """
    specs: list[RouteSpec] = []
    manifest_routes: dict[str, CredentialRoute] = {}
    aws_key_id, aws_secret = make_aws_placeholders()  # one AWS identity per session, as an SDK has one
    # One placeholder per host secret: routes fed by the same source (gh's GH_TOKEN toward
    # api.github.com and uploads.github.com, git's toward github.com) accept the same placeholder,
    # each toward its own upstream only; it could only ever bring them the same secret.
    shared: dict[tuple[str, tuple[str, ...]], str] = {}
    for declared, origin in routes:
        if present is not None and declared.name not in present:
            continue
        where = f"{origin} credentials route {declared.name!r}"
        try:
            upstream = parse_upstream(overrides.get(declared.name, declared.upstream), declared.name)
        except RouteError as exc:
            raise CredentialError(f"{where}: {exc}", hint="fix the upstream override in settings") from None
        shape_host = parse_upstream(declared.upstream, declared.name).host
        header = declared.header.lower()
        signing = None
        if declared.scheme == "aws-sigv4":
            # The region of the upstream actually used (a regional override), else the manifest's.
            region = region_of(upstream.host) or region_of(shape_host) or ""
            signing = AwsSigning(SigningScope(region, declared.aws_service or ""), aws_secret)
        placeholder = aws_key_id if signing else shared.setdefault(declared.source,
                                                                   make_placeholder(shape_host, header))
        route = Route(declared.name, upstream, header, declared.scheme, placeholder, declared.username, signing)
        specs.append(RouteSpec(route, UnreadSource(declared.source), behaviour_for(route, push.get(declared.name))))
        manifest_routes[declared.name] = declared
    taken = [r.placeholder_env for r in manifest_routes.values() if r.placeholder_env]
    if any(spec.route.signing for spec in specs):
        taken += AWS_PLACEHOLDER_ENV
    decoys = make_decoys(taken)
    config = ProxyConfig(tuple(specs), directory / LEDGER, directory / RECORDS, decoys.values(), extra_ca_file)
    return PreparedProxy(config, manifest_routes, decoys, skipped, intercepted_hosts(manifest_routes.values()))


def served(prepared: PreparedProxy, sources: Mapping[str, CredentialSource]) -> PreparedProxy:
    """The planned routes with their sources as read on the host (by route name), and the session CA
    made for the intercepted hosts (its key in this process's memory only): ready to serve."""
    specs = tuple(replace(spec, source=sources[spec.route.name]) for spec in prepared.config.routes)
    return replace(prepared, config=replace(prepared.config, routes=specs,
                                            interception=session_interception(prepared.intercepted)))


def session_interception(hosts: Mapping[str, str]) -> Interception | None:
    """The TLS fallback for ``hosts`` (host -> route): a session CA made now, its key in this process's
    memory only; None without a host."""
    if not hosts:
        return None
    from dejima.proxy.authority import SessionAuthority  # cryptography: imported only when a CA is made
    from dejima.proxy.intercept import Interception

    return Interception(SessionAuthority.create(hosts), dict(hosts))


def behaviour_for(route: Route, push: PushPolicy | None) -> RouteBehaviour:
    """How the route's requests go upstream: signed (aws-sigv4), guarded (git routes with push rules), forwarded."""
    if route.signing is not None:
        return SigV4Signing()
    return GitPushGuard(push) if push is not None else Forwarding()


def intercepted_hosts(routes: Iterable[CredentialRoute]) -> dict[str, str]:
    """Host -> route for the routes marked ``intercept`` (the manifest's upstream host: where the tool
    connects, whatever upstream override the proxy then uses)."""
    hosts: dict[str, str] = {}
    for declared in routes:
        if declared.intercept:
            hosts.setdefault(parse_upstream(declared.upstream, declared.name).host, declared.name)
    return hosts


def trust_env(trust_dir: str) -> dict[str, str]:
    """The variables that make the session's tools trust the session CA (``trust_dir`` as the session sees it)."""
    env = {name: f"{trust_dir}/{BUNDLE_FILE}" for name in TRUST_VARS}
    env["NODE_EXTRA_CA_CERTS"] = f"{trust_dir}/{CA_FILE}"
    return env


def session_env(prepared: PreparedProxy, origin: str, base_url_env: Mapping[str, str] = {},
                trust_dir: str | None = None) -> dict[str, str]:
    """The session's environment for its routes: placeholders, base URLs, git rewrites, decoys.

    ``origin``: the proxy as the session reaches it (``http://127.0.0.1:PORT``); ``base_url_env``:
    route name -> the variable that takes its base URL (e.g. ANTHROPIC_BASE_URL). Basic routes
    (git smart-HTTP) get ``url.<proxy route>.insteadOf=<upstream>/`` and the placeholder as an
    ``http.<proxy route>.extraHeader``, through GIT_CONFIG_* (no file in the workspace). With
    intercepted routes, ``trust_dir`` (where the session reads the CA files) goes into TRUST_VARS.
    """
    env: dict[str, str] = dict(prepared.decoys.env)
    if prepared.intercepted and trust_dir is not None:
        env.update(trust_env(trust_dir))
    git: list[tuple[str, str]] = []
    for spec in prepared.config.routes:
        route, declared = spec.route, prepared.manifest_routes[spec.route.name]
        base = route_base_url(origin, route.name)
        if declared.placeholder_env:
            env[declared.placeholder_env] = route.placeholder
        if route.signing:
            env.update(zip(AWS_PLACEHOLDER_ENV, route.placeholders, strict=True))
        if route.name in base_url_env:
            env[base_url_env[route.name]] = base
        if route.scheme == "Basic":
            auth = base64.b64encode(f"{route.username or 'dejima'}:{route.placeholder}".encode()).decode()
            git.append((f"url.{base}/.insteadOf", declared.upstream.rstrip("/") + "/"))
            git.append((f"http.{base}/.extraHeader", f"Authorization: Basic {auth}"))
    if git:
        env["GIT_CONFIG_COUNT"] = str(len(git))
        for index, (key, value) in enumerate(git):
            env[f"GIT_CONFIG_KEY_{index}"], env[f"GIT_CONFIG_VALUE_{index}"] = key, value
        env["GIT_TERMINAL_PROMPT"] = "0"
    return env


__all__ = ["ROUTE_PREFIX", "PreparedProxy", "plan_routes", "read_sources_of", "served", "session_env",
           "session_interception", "trust_env"]
