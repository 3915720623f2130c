"""The proxy's preparation in one call, for the tests that want a ready proxy from routes: the product calls
the steps apart (the start reads the sources in its facts, plans the routes with no I/O, serves at apply)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from dejima.adapters.session_dirs import new_draws
from dejima.core.manifest import CredentialRoute
from dejima.core.placeholders import Decoys
from dejima.core.pushrules import PushPolicy
from dejima.core.route_plan import ORIGIN, RoutesPlan, plan_routes
from dejima.proxy.intercept import Interception
from dejima.proxy.server import ProxyConfig
from dejima.proxy.setup import read_sources_of, served_config
from dejima.proxy.sources import CredentialError


@dataclass(frozen=True)
class Prepared:
    plan: RoutesPlan  # what the start plans: the routes, the decoys, the session's variables
    config: ProxyConfig  # what the proxy serves: the same routes with their sources read
    skipped: tuple[CredentialError, ...] = ()

    @property
    def interception(self) -> Interception | None:
        return self.config.interception

    @property
    def decoys(self) -> Decoys:
        return self.plan.decoys

    @property
    def env(self) -> dict[str, str]:
        return dict(self.plan.environment)


def plan(routes: Iterable[tuple[CredentialRoute, str]], directory: Path, overrides: Mapping[str, str] = {},
         push: Mapping[str, PushPolicy] = {}, present: Iterable[str] | None = None, extra_ca_file: str | None = None,
         origin: str = ORIGIN) -> RoutesPlan:
    """The routes plan as a start makes it (``present`` None: as ``--render``, every route, no source read)."""
    planned = plan_routes(routes, new_draws(), overrides, push, None if present is None else set(present),
                          origin=origin)
    return replace(planned, records=str(directory), extra_ca_file=extra_ca_file)


def prepare(routes: Iterable[tuple[CredentialRoute, str]], directory: Path, overrides: Mapping[str, str] = {},
            push: Mapping[str, PushPolicy] = {}, required: Iterable[str] = (), environ: Mapping[str, str] | None = None,
            home: Path | None = None, extra_ca_file: str | None = None, origin: str = ORIGIN) -> Prepared:
    """``read_sources_of``, ``plan_routes`` then ``served_config``: the routes ready to serve, their sources read
    on the host now."""
    routes = list(routes)
    sources, skipped = read_sources_of(routes, required, environ, home)
    planned = plan(routes, directory, overrides, push, sources, extra_ca_file, origin)
    return Prepared(planned, served_config(planned, sources), skipped)
