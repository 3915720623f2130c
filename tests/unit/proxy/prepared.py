"""The proxy's three preparation steps in one call, for the tests that want a ready proxy from routes: the
product calls them apart (the start reads the sources in its facts, plans with no I/O, serves at apply)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from dejima.core.manifest import CredentialRoute
from dejima.core.pushrules import PushPolicy
from dejima.proxy.setup import PreparedProxy, plan_routes, read_sources_of, served


def prepare(routes: Iterable[tuple[CredentialRoute, str]], directory: Path, overrides: Mapping[str, str] = {},
            push: Mapping[str, PushPolicy] = {}, required: Iterable[str] = (), environ: Mapping[str, str] | None = None,
            home: Path | None = None, extra_ca_file: str | None = None, read_sources: bool = True) -> PreparedProxy:
    """``read_sources_of``, ``plan_routes`` then ``served``: the routes ready to serve, their sources read on the
    host now. ``read_sources=False`` (as ``--render``): the plan alone, every source named, none read."""
    routes = list(routes)
    if not read_sources:
        return plan_routes(routes, directory, overrides, push, None, extra_ca_file)
    sources, skipped = read_sources_of(routes, required, environ, home)
    return served(plan_routes(routes, directory, overrides, push, sources, extra_ca_file, skipped), sources)
