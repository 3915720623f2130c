"""From a session's routes plan (core/route_plan.py) to the routes the proxy serves, each with its secret's source.

    sources, skipped = read_sources_of(routes)          # on the host: the secrets' sources (helpers run)
    plan = plan_routes(routes, draws, present=sources)   # core/route_plan.py: no I/O, no secret
    config = served_config(plan, sources)                # the sources handed in, the session CA made

    server = ProxyServer(config); await server.start(unix_path=directory / "proxy.sock")

A route whose source is missing is left out and its error kept in ``skipped`` (the caller decides
whether the session can start without it); ``required`` routes raise instead.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from dejima.adapters.session_dirs import (  # the session's own files: `dejima violations`/`ledger` read them
    LEDGER,
    RECORDS,
)
from dejima.core.manifest import CredentialRoute
from dejima.core.pushrules import PushPolicy
from dejima.core.route_plan import GUARDS_PUSHES, SIGNS, PlannedRoute, RoutesPlan
from dejima.proxy.gitpush import GitPushGuard
from dejima.proxy.routes import Forwarding, RouteBehaviour, RouteSpec
from dejima.proxy.server import ProxyConfig
from dejima.proxy.signing import SigV4Signing
from dejima.proxy.source_kinds import resolve_source
from dejima.proxy.sources import CredentialError, CredentialSource

if TYPE_CHECKING:
    from dejima.proxy.intercept import Interception


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


def served_config(plan: RoutesPlan, sources: Mapping[str, CredentialSource]) -> ProxyConfig:
    """The planned routes as the proxy serves them: each with its source as read on the host (by route
    name), its behaviour, and the session CA made for the intercepted hosts (its key in this process's
    memory only). The only place a planned route meets its secret."""
    missing = [planned.name for planned in plan.routes if planned.name not in sources]
    if missing:  # a plan made without reading the sources (a render's) is never served
        raise CredentialError(f"no source was read for route(s) {', '.join(missing)}",
                              hint="a start reads the sources before it plans; this is a bug in dejima")
    specs = tuple(RouteSpec(planned.route, sources[planned.name], behaviour_of(planned)) for planned in plan.routes)
    return ProxyConfig(specs, Path(plan.records) / LEDGER, Path(plan.records) / RECORDS, plan.decoys.values(),
                       plan.extra_ca_file, memory_budget=plan.limits.memory, max_connections=plan.limits.connections,
                       interception=session_interception(plan.intercepted), upstream_proxy=plan.upstream_proxy,
                       upstream_proxy_ca_file=plan.upstream_proxy_ca_file)


def session_interception(hosts: Mapping[str, str]) -> Interception | None:
    """The TLS fallback for ``hosts`` (host -> route): a session CA made now, its key in this process's
    memory only; None without a host."""
    if not hosts:
        return None
    from dejima.proxy.authority import SessionAuthority  # cryptography: imported only when a CA is made
    from dejima.proxy.intercept import Interception

    return Interception(SessionAuthority.create(hosts), dict(hosts))


def behaviour_of(planned: PlannedRoute) -> RouteBehaviour:
    """How the route's requests go upstream, as planned: signed (aws-sigv4), guarded (git routes with push
    rules), forwarded."""
    return behaviour_for(planned.behaviour, planned.push)


def behaviour_for(kind: str, push: PushPolicy | None) -> RouteBehaviour:
    if kind == SIGNS:
        return SigV4Signing()
    if kind == GUARDS_PUSHES:
        if push is None:
            raise ValueError("a route that guards pushes needs its push policy")
        return GitPushGuard(push)
    return Forwarding()


__all__ = ["behaviour_for", "behaviour_of", "read_sources_of", "served_config", "session_interception"]
