"""The start as data: what the host says (``StartFacts``, read first by adapters: start.read_facts),
then one function with no I/O from those facts to a frozen ``StartPlan`` holding everything a start
does (``plan_start``): its actions, each with its undo (orchestration/actions.py). The one executor
applies them (orchestration/executor.py), ``--render`` prints them.

    facts    engine memory, network facts, policy check, unreviewed findings (a refusal), images (tags, or
             recipes to build), credential sources (which the host has; read, never kept here), the
             workspace's git config; and, meanwhile, dead sessions' leftover containers removed
    plan     the SessionPlan (both containers, ruleset, filter configuration), the image recipes,
             the credential routes with placeholders and each source *named*, the harness's
             connection, the private directories, the record, the notes to show, and the actions
    apply    the preparation's actions, then the container pair's, each after what it needs; the
             teardown is the applied log unwound
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from dejima.core.connect import Connection, connection, uses_route
from dejima.core.images import ImageNeeds
from dejima.core.placeholders import Draws
from dejima.core.plan import (
    PROXY_SOCKET,
    RESOLV_CONF,
    TLS_SOCKET,
    Identity,
    NetworkFacts,
    SessionPlan,
    SessionRequest,
    build_policy,
    build_session_plan,
    cache_paths_outside_home,
    unlock_special,
)
from dejima.core.resolve import Resolved
from dejima.core.route_plan import RoutesPlan
from dejima.core.settings import Settings
from dejima.orchestration.actions import (
    PAIR,
    PREPARATION,
    BuildImages,
    MakeGate,
    MakePrivateDir,
    MakeRunDir,
    MergeHarnessSettings,
    Planned,
    RememberFilter,
    ServeCredentials,
    ServeProxy,
    WriteCredentialFiles,
    WriteRecord,
    WriteResolvConf,
    pair_actions,
    planned,
)

if TYPE_CHECKING:
    from dejima.orchestration.start_request import Options
    from dejima.proxy.sources import CredentialError


@dataclass(frozen=True, slots=True)
class StartFacts:
    """What the host and the engine say, read before the plan (start.read_facts). No secret: the
    credential sources read are kept apart; here only which routes have one."""

    request: SessionRequest  # the workspace's paths and choices (orchestration/start_request.py)
    identity: Identity
    settings_source: str  # the settings file, as errors name it
    session_dir: Path  # the session's private records on the host
    engine_memory: int | None  # None: the engine did not say (a limit given as a share is then left out)
    network: NetworkFacts
    images: ImageNeeds
    git_config: str  # the workspace's .git/config: a git route pushes only to its remotes
    draws: Draws  # the session's randomness, drawn first: its placeholders and decoys follow from it
    credentials_present: frozenset[str] | None = None  # routes whose source the host has; None: not read (render)
    credentials_skipped: tuple[CredentialError, ...] = ()  # the missing sources' errors
    other_sessions: tuple[str, ...] = ()  # sessions on the same workspace whose launcher runs
    prestarted: bool = False  # a filter started before the plan (orchestration/prestart.py): its run directory made


@dataclass(frozen=True, slots=True)
class StartPlan:
    """Everything a start does, decided before it does any of it."""

    request: SessionRequest  # what the session asked for (run directory, gate…)
    session: SessionPlan  # both containers, the ruleset, the filter's configuration, the routes, the variables
    identity: Identity
    images: ImageNeeds  # the tags both containers name; the recipes of the ones to build
    connection: Connection  # the harness's variables and home settings for its backend
    private_dirs: tuple[Path, ...]  # the session's home and caches, made private to its user
    record: tuple[Path, str]  # (file, text): the session's workspace, as `dejima sessions` reads it
    notes: tuple[str, ...]  # warnings the start shows (routes left out, settings left out)
    actions: tuple[Planned, ...]  # the preparation's, then the container pair's: each with its undo

    @property
    def routes(self) -> RoutesPlan | None:
        """The credential routes the proxy will serve: placeholders drawn, each source named (never a value)."""
        return self.session.routes

    @property
    def preparation(self) -> tuple[Planned, ...]:
        return tuple(p for p in self.actions if p.part == PREPARATION)

    @property
    def pair(self) -> tuple[Planned, ...]:
        return tuple(p for p in self.actions if p.part == PAIR)


def check_policy(settings: Settings, options: Options, network: NetworkFacts, source: str, resolved: Resolved) -> None:
    """Raise when the allow list reaches special places no override names (core/plan.unlock_special)."""
    unlock_special(build_policy(settings, options.allow, network, source, resolved), settings, options.allow_special,
                   network, source)


def plan_start(command: tuple[str, ...] | None, resolved: Resolved, settings: Settings, options: Options,
               facts: StartFacts) -> StartPlan:
    """The start ``facts`` call for; no I/O, and a function of them (the placeholders follow from the facts'
    draws). A policy that does not pass is refused by ``build_session_plan`` (the facts' ``policy`` step
    refused it first)."""
    notes: list[str] = [_sharing(facts.other_sessions, str(facts.request.workspace))] if facts.other_sessions else []
    routes = None
    if resolved.has_credentials:
        from dejima.proxy.runner import plan_session_routes  # the proxy's modules, only for a session with routes

        routes = plan_session_routes(resolved, settings, facts.session_dir, facts.git_config, facts.draws,
                                     facts.credentials_present, facts.network.upstream_proxy)
        notes += [f"{skipped.message}; the session starts without that route" for skipped in facts.credentials_skipped]
        routes = routes if routes.routes else None
    harness_connection, left_out = _harness_connection(resolved, routes)
    notes += left_out
    request = facts.request
    # One routes plan: the card, the render, the filter's relays and the session's variables read it.
    session = build_session_plan(request, settings, facts.identity, *facts.images.tags, facts.network,
                                 facts.settings_source, resolved, engine_memory=facts.engine_memory, routes=routes,
                                 harness_env=tuple(sorted(harness_connection.env.items())))
    home = Path(request.home_dir)
    caches = tuple(Path(request.cache_root or "") / path.strip("/").replace("/", "__")
                   for path in cache_paths_outside_home(resolved))
    record = (facts.session_dir / "workspace", str(request.workspace))
    actions = (*preparation_actions(session, facts, routes, harness_connection, (home, *caches), record),
               *pair_actions(session, settings.session.ready_timeout, proxy=ServeProxy(
                   Path(request.run_dir or "") / PROXY_SOCKET,
                   Path(request.run_dir or "") / TLS_SOCKET if routes.intercepted else None)
                   if routes is not None else None),
               # Once the session runs behind it: the next start on this workspace prestarts this filter.
               planned("remember-filter", PAIR, RememberFilter(Path(session.workspace), session.filter,
                                                              session.session_id, request.launcher),
                       ("open-gate",) if session.gate is not None else ("filter-ready",)))
    return StartPlan(request, session, facts.identity, facts.images, harness_connection, (home, *caches),
                     record, tuple(notes), actions)


def preparation_actions(session: SessionPlan, facts: StartFacts, routes: RoutesPlan | None, harness: Connection,
                        directories: tuple[Path, ...], record: tuple[Path, str]) -> tuple[Planned, ...]:
    """What is made before the container pair: images, the private directories, the routes served and
    their files in the home, the harness's settings, the run directory (unless the prestart made it),
    the gate, the record."""
    request, owner = facts.request, facts.identity
    home, *caches = directories
    actions = [planned("images", PREPARATION, BuildImages(facts.images)),
               planned("home", PREPARATION, MakePrivateDir(home, owner)),
               *(planned(f"cache-{n}", PREPARATION, MakePrivateDir(cache, owner)) for n, cache in enumerate(caches, 1)),
               planned("resolv-conf", PREPARATION, WriteResolvConf(RESOLV_CONF))]
    written: tuple[str, ...] = ()
    if routes is not None:
        actions += [planned("credentials", PREPARATION, ServeCredentials(routes)),
                    planned("credential-files", PREPARATION, WriteCredentialFiles(home, owner),
                            ("credentials", "home"))]
        written = ("credential-files",)
    if harness.files:
        actions.append(planned("harness-settings", PREPARATION, MergeHarnessSettings(home, owner, harness.files),
                               ("home", *written)))
    if not facts.prestarted:  # else the prestart made it, its FIFO open to the prestarted filter
        actions.append(planned("run-directory", PREPARATION, MakeRunDir(Path(request.run_dir or ""))))
    if request.gate_dir is not None:
        actions.append(planned("start-gate", PREPARATION, MakeGate(Path(request.gate_dir))))
    actions.append(planned("record", PREPARATION, WriteRecord(*record)))
    return tuple(actions)


def _sharing(others: tuple[str, ...], workspace: str) -> str:
    sessions = f"session {others[0]} is" if len(others) == 1 else f"sessions {', '.join(others)} are"
    return (f"{sessions} running on {workspace} too: they write the same files, and a change is reported by the "
            "first exit audit that finds it (each summary lists only the findings its own audit recorded)")


def _harness_connection(resolved: Resolved, routes: RoutesPlan | None) -> tuple[Connection, list[str]]:
    """The harness's settings and variables for this session's backend (core/connect.py), and a note
    when they are left out for want of its route."""
    harness, backend, connect = resolved.harness, resolved.backend, resolved.harness_connect()
    route = backend.credentials[0].name if backend is not None and backend.credentials else None
    access = routes.access(route) if routes is not None and route is not None else None
    notes = []
    if connect is not None and access is None and uses_route(connect):
        notes.append(f"harness {harness.name} reaches backend {backend.name if backend else '?'} through its "
                     "credential route, which this session does not have: its connection settings are left out")
    return connection(harness.files, connect, *(access or (None, None))), notes
