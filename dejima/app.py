"""What each dejima command does, in terms of the core and the adapters.

The CLI parses arguments and calls one function here; everything that touches the engine goes
through a ``Runtime``.
"""

from __future__ import annotations

import ipaddress
import os
import secrets
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from dejima import host, projects
from dejima.core import labels
from dejima.core.limits import describe
from dejima.core.manifest import ManifestError
from dejima.core.plan import (
    PROXY_SOCKET,
    RESOLV_CONF,
    SESSION_HOME,
    Identity,
    NetworkFacts,
    SessionPlan,
    SessionRequest,
    build_policy,
    build_session_plan,
    cache_paths_outside_home,
    describe_command,
    unlock_special,
)
from dejima.core.resolve import REPO_POLICY_FILE, Resolved, resolve
from dejima.core.settings import Settings
from dejima.errors import EngineError, SessionError, UsageError
from dejima.manifests import load_catalog
from dejima.repo import read_repo_policy, workspace_facts
from dejima.ui.console import UI
from dejima.ui.views import boundary_card
from dejima.violations import ViolationStore, ledger_path, run_dir, sessions_dir

if TYPE_CHECKING:  # the docker SDK, the audit rules and jinja2 are imported by the functions that use them
    from dejima import exit_audit
    from dejima.proxy.runner import SessionProxy
    from dejima.runtime import Runtime


def validate_workspace(path: str) -> Path:
    candidate = Path(path).expanduser()
    if not candidate.exists():
        raise UsageError(f"workspace {path!r} does not exist", hint="give the path of a project directory")
    if not candidate.is_dir():
        raise UsageError(f"workspace {path!r} is not a directory", hint="give the path of a project directory")
    resolved = candidate.resolve()
    home = Path.home().resolve()
    if resolved == Path("/") or resolved == home or resolved in home.parents:
        raise UsageError(
            f"refusing to use {resolved} as a workspace: it holds your whole home directory "
            f"(~/.ssh, credentials, other projects)",
            hint="give the path of one project, e.g. ~/repos/project",
        )
    return resolved


@dataclass(frozen=True, slots=True)
class Selection:
    """The manifest choices the user made on the command line."""

    harness: str = "shell"
    backend: str | None = None
    workflows: tuple[str, ...] = ()
    forges: tuple[str, ...] = ()


def resolve_manifests(workspace: Path, selection: Selection, ui: UI) -> Resolved:
    catalog = load_catalog()
    repo_policy = read_repo_policy(workspace)
    for key in repo_policy.ignored:
        ui.warn(f"{workspace / REPO_POLICY_FILE}: '{key}' ignored: the repository may only narrow the policy "
                "(deny entries), never widen it")
    try:
        return resolve(catalog.manifests, workspace_facts(workspace), selection.harness, selection.backend,
                       selection.workflows, selection.forges, repo_policy)
    except ManifestError as exc:
        if exc.reference == "unknown-manifest":  # a command-line name that names nothing
            raise UsageError(exc.message, hint=exc.hint) from exc
        raise


@dataclass(frozen=True, slots=True)
class Prepared:
    runtime: Runtime
    plan: SessionPlan
    settings: Settings
    proxy: SessionProxy | None = None  # the credential routes, served while the session runs
    accept_findings: bool = False  # --accept-findings: unreviewed critical findings do not stop the start


def network_facts(settings: Settings, runtime: Runtime | None, upstream_override: tuple[str, ...]) -> NetworkFacts:
    """Upstream resolvers and the addresses answers may never point at; without an engine
    (render mode) the gateway is left out."""
    upstreams = list(upstream_override or settings.network.upstream_dns) or host.host_resolvers()
    if not upstreams:
        raise SessionError(
            "no upstream DNS resolver for the filter: the host's /etc/resolv.conf lists none that a "
            "container can reach",
            hint="set [network] upstream_dns = [\"IP\"] in the settings, or pass --dns-upstream IP",
            reference="no-upstream-dns",
        )
    local = host.local_addresses()
    gateway = runtime.gateway(settings.session.network) if runtime is not None else None
    denied = [*local, *([gateway] if gateway else [])]
    return NetworkFacts(
        upstreams=tuple(ipaddress.IPv4Address(a) for a in upstreams),
        denied_addresses=tuple(ipaddress.ip_network(a) for a in sorted(set(denied))),
        host_addresses=tuple(ipaddress.ip_network(a) for a in local),
        gateway=ipaddress.ip_network(gateway) if gateway else None,
    )


@dataclass(frozen=True, slots=True)
class Options:
    """What the command line adds to a session, validated by the CLI."""

    allow: tuple[str, ...] = ()
    allow_special: tuple[str, ...] = ()
    upstream_dns: tuple[str, ...] = ()
    as_root: bool = False
    accept_findings: bool = False


def prepare_session(
    workspace: Path, command: tuple[str, ...] | None, resolved: Resolved, settings: Settings,
    runtime: Runtime, ui: UI, options: Options = Options(),
) -> Prepared:
    from dejima import session
    from dejima.background import Background
    from dejima.imaging import ensure_images

    memory = Background(runtime.memory, "engine-memory")  # the engine's slowest answer (~15 ms): meanwhile
    identity = host.session_identity(workspace, options.as_root)
    facts = network_facts(settings, runtime, options.upstream_dns)
    source = str(host.settings_path())
    # The allow list is checked against the host's and the engine's addresses before anything starts.
    unlock_special(build_policy(settings, options.allow, facts, source, resolved), settings, options.allow_special,
                   facts, source)
    scope = host.scope()
    with host.locked(sessions_dir()):  # launchers starting at once: one of them removes a leftover
        session.remove_stale(runtime, scope, ui, record_stale_violations)
    filter_image, session_image = ensure_images(runtime, settings, identity, ui, resolved.image_layers())
    request = session_request(workspace, command, resolved, settings, options, new_session_id(),
                              host.launcher_token())
    host.ensure_private_dir(Path(request.home_dir), identity)
    host.resolv_conf_file(RESOLV_CONF)
    for path in cache_paths_outside_home(resolved):
        host.ensure_private_dir(Path(request.cache_root or "") / path.strip("/").replace("/", "__"), identity)
    proxy = _prepare_proxy(workspace, command, resolved, settings, request, identity, ui)
    if proxy is not None:
        request = replace(request, bridge=True, credential_env=proxy.environment, canaries=proxy.canaries)
    sockets = host.ensure_private_dir(Path(request.run_dir or ""))
    # The filter (root without CAP_DAC_OVERRIDE) makes its control socket here, so the directory is
    # open to it; no one else gets near: its parent is the launcher's own 0700 state directory,
    # and it is mounted into the filter alone, never into the session.
    sockets.chmod(0o777)
    host.record(sockets.parent, "workspace", str(workspace))
    plan = build_session_plan(request, settings, identity, filter_image, session_image, facts, source, resolved,
                              engine_memory=memory.join())
    return Prepared(runtime, plan, settings, proxy, options.accept_findings)


def _prepare_proxy(workspace: Path, command: tuple[str, ...] | None, resolved: Resolved, settings: Settings,
                   request: SessionRequest, identity: Identity, ui: UI) -> SessionProxy | None:
    """The session's credential routes, their sources read now on the host (never in a container)."""
    if not any(m.credentials for m in resolved.manifests):
        return None
    from dejima.proxy.runner import prepare_session_proxy, unserved_routes

    for reason in unserved_routes(resolved):
        ui.warn(reason)
    proxy = prepare_session_proxy(resolved, command, workspace, settings.credentials,
                                  sessions_dir() / request.session_id, Path(request.home_dir),
                                  (identity.uid, identity.gid))
    for skipped in proxy.prepared.skipped if proxy else ():
        ui.warn(f"{skipped.message}; the session starts without that route")
    return proxy if proxy is not None and proxy.routes else None


def new_session_id() -> str:
    """A fresh session id whose state directory this launcher owns from now on: the owner is
    recorded before anything else goes there, so no other launcher takes it for a dead one's."""
    root = sessions_dir()
    with host.locked(root):
        for _ in range(64):
            session_id = secrets.token_hex(4)
            if not (root / session_id).exists():
                host.claim(root / session_id)
                return session_id
    raise SessionError(f"no unused session id in {root}", hint="remove old session directories there")


def protected_paths(workspace: Path, settings: Settings) -> tuple[PurePosixPath, ...]:
    """Workspace paths the session gets read-only: .git/hooks, when it is a real directory."""
    hooks = workspace / ".git" / "hooks"
    if settings.session.protect_git_hooks and hooks.is_dir() and not hooks.is_symlink() \
            and not (workspace / ".git").is_symlink():
        return (PurePosixPath(hooks),)
    return ()


COMMAND_SHOWN = 120  # characters of the command the one-line summary shows


def boundary_line(plan: SessionPlan) -> str:
    allowed = ", ".join(dict.fromkeys(e.canonical for e in plan.policy.allowed))
    network = f"egress only to {allowed}" if allowed else "no egress"
    harness = ""
    if plan.resolved:
        others = ", ".join(f"{c.manifest.name} ({c.why})" for c in plan.resolved.choices[1:])
        harness = f"harness {plan.resolved.harness.name}" + (f" with {others}" if others else "") + " | "
    command = describe_command(plan.session.command if not plan.interactive else None)
    if len(command) > COMMAND_SHOWN:  # a long script must not push the boundary's facts off the line
        command = command[:COMMAND_SHOWN] + f"…[{len(command) - COMMAND_SHOWN} more]"
    overrides = "".join(f" | OVERRIDE {u.entry.canonical} ({u.override_origin}): {u.reason}" for u in plan.unlocked)
    limits = f" | limits: {describe(plan.session.limits)}" if plan.session.limits else ""
    return (
        f"session {plan.session_id}: {harness}{command} "
        f"in {plan.workspace} | network: {network} (nftables default-deny, verified; DNS only through "
        f"dejima; no IPv6){overrides} | user {plan.session.user}, no capabilities | mounts: workspace, home{limits}"
    )


def check_findings(workspace: Path, accept: bool, ui: UI) -> None:
    """Warn about unreviewed findings; refuse to start on unreviewed critical ones unless accepted."""
    from dejima.findings import FindingStore

    store = FindingStore()
    try:
        open_findings = store.findings(str(workspace))
    finally:
        store.close()
    if not open_findings:
        return
    critical = [s for s in open_findings if s.finding.severity == "critical"]
    ui.warn(f"{len(open_findings)} unreviewed audit finding(s) in {workspace} ({len(critical)} critical): "
            "dejima-audit lists them")
    if critical and not accept:
        raise SessionError(
            f"{workspace} has {len(critical)} unreviewed critical finding(s) from earlier sessions "
            "(e.g. a git hook or an IDE task that would run on the host)",
            hint="review them with `dejima-audit` and `dejima-audit ack`, or start anyway with --accept-findings",
            reference="unreviewed-findings",
        )


def audited_mounts(plan: SessionPlan) -> list[exit_audit.Mount]:
    """Every directory the session can write that outlives it: the workspace, the per-project home,
    the manifest caches."""
    from dejima import exit_audit

    mounts = []
    for bind in plan.session.binds:
        if bind.read_only:
            continue
        kind = "workspace" if bind.source == plan.workspace else "home" if bind.target == SESSION_HOME else "cache"
        mounts.append(exit_audit.Mount(kind, Path(bind.source)))
    return mounts


class SessionAudit:
    """The exit audit around one session: its start before the session starts, its end once no
    process of the session is left (whichever of the two places that call ``finish`` comes first)."""

    def __init__(self, prepared: Prepared, ui: UI) -> None:
        self.prepared, self.ui = prepared, ui
        self.states: list[exit_audit.MountState] = []
        self.started = self.finished = False

    def start(self) -> None:
        """While the filter starts (the time is free then): import the audit (~0.1 s), finish the
        audits of sessions whose launcher died, check unreviewed findings (a critical one stops
        this start), take the start snapshot."""
        from dejima import exit_audit

        plan = self.prepared.plan
        exit_audit.recover(self.ui)
        check_findings(Path(plan.workspace), self.prepared.accept_findings, self.ui)
        self.started = True
        self.states.extend(exit_audit.start(plan.session_id, audited_mounts(plan)))

    def finish(self) -> None:
        if not self.started or self.finished:  # no snapshot: the session never started, nothing to audit
            return
        from dejima import exit_audit

        self.finished = True
        exit_audit.finish(self.prepared.plan.session_id, self.ui, states=self.states or None)


def run_session(prepared: Prepared, ui: UI) -> int:
    from dejima import session

    settings = prepared.settings
    audit = SessionAudit(prepared, ui)

    def while_filter_starts() -> None:  # rich and the audit are imported here, where it costs nothing
        if prepared.plan.interactive:
            ui.card("dejima boundary", boundary_card(prepared.plan))
        else:
            ui.info(boundary_line(prepared.plan))
        audit.start()

    store = ViolationStore(prepared.plan.session_id)
    try:
        with _serving(prepared):
            return session.run(
                prepared.runtime, prepared.plan, ui,
                ready_timeout=settings.session.ready_timeout,
                stop_timeout=settings.session.stop_timeout,
                on_filter_output=store.append_output,
                on_refusal=_notifier(ui) if prepared.plan.interactive and settings.session.notify_denials else None,
                while_filter_starts=while_filter_starts,
                once_session_removed=audit.finish,
            )
    except EngineError as exc:
        if "executable file not found" in exc.message or "no such file or directory" in exc.message:
            raise SessionError(
                f"the command {describe_command(prepared.plan.session.command)!r} was not found in the session image",
                hint="check its name; the session image has bash, coreutils, git, curl and python3",
                reference="command-not-found",
                exit_code=127,
            ) from exc
        raise
    finally:
        audit.finish()  # done already unless the session's container could not be removed
        summary = store.summary()
        if summary:
            ui.warn(f"session {prepared.plan.session_id}: {summary}; "
                    f"details: dejima violations {prepared.plan.session_id}")
        if prepared.proxy is not None:
            ui.info(ledger_summary(prepared.plan.session_id))


def _notifier(ui: UI) -> Callable[[dict[str, object]], None]:
    """Tell the user, once per name, that the session was refused a name it could be granted."""
    told: set[str] = set()

    def notify(record: dict[str, object]) -> None:
        name = str(record.get("domain", ""))
        if record.get("kind") == "dns" and name and name not in told and "not on the allow list" in str(
                record.get("reason", "")):
            told.add(name)
            ui.notice(f"dejima: {name} was refused; dejima-allow {name} grants it")

    return notify


def _serving(prepared: Prepared) -> AbstractContextManager[object]:
    """The credential proxy, serving on the session's run directory while the block runs."""
    if prepared.proxy is None:
        return nullcontext()
    from dejima.proxy.runner import ProxyThread

    return ProxyThread(prepared.proxy.prepared.config, run_dir(prepared.plan.session_id) / PROXY_SOCKET)


def ledger_summary(session_id: str) -> str:
    """One line of totals from the session's ledger (requests the proxy carried)."""
    from dejima.proxy.records import read_records

    entries = read_records(ledger_path(session_id))
    if not entries:
        return f"session {session_id}: no request went through the credential proxy"
    def total(key: str) -> int:
        return sum(int(str(e.get(key) or 0)) for e in entries)

    refused = sum(1 for e in entries if int(str(e.get("status") or 0)) >= 400)
    return (f"session {session_id}: {len(entries)} request(s) through the credential proxy ({refused} answered "
            f"with an error), {total('bytes_in')} bytes in, {total('bytes_out')} bytes out; "
            f"details: dejima ledger {session_id}")


# --- management --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SessionInfo:
    session_id: str
    workspace: str
    status: str  # running / stale / partial
    containers: tuple[str, ...]
    launcher_pid: str

    def to_json(self) -> dict[str, object]:
        return {
            "session": self.session_id, "workspace": self.workspace, "status": self.status,
            "containers": list(self.containers), "launcher_pid": self.launcher_pid,
        }


def list_sessions(runtime: Runtime, scope: str) -> list[SessionInfo]:
    grouped: dict[str, list[tuple[str, str, dict[str, str]]]] = {}
    for c in runtime.containers({labels.SCOPE: scope}):
        if c.labels.get(labels.ROLE) not in (labels.ROLE_FILTER, labels.ROLE_SESSION):
            continue
        grouped.setdefault(c.labels.get(labels.SESSION, "?"), []).append((c.id, c.status, c.labels))
    found = []
    for session_id, members in sorted(grouped.items()):
        first = members[0][2]
        token = first.get(labels.LAUNCHER, "")
        alive = host.launcher_alive(token)
        roles = {m[2].get(labels.ROLE) for m in members}
        status = "running" if alive and roles == {labels.ROLE_FILTER, labels.ROLE_SESSION} else (
            "starting" if alive else "stale")
        launcher = host.Launcher.parse(token)
        found.append(SessionInfo(
            session_id, first.get(labels.WORKSPACE, "?"), status,
            tuple(m[0][:12] for m in members), str(launcher.pid) if launcher else "?",
        ))
    return found


def stop_session(runtime: Runtime, scope: str, session_id: str) -> list[str]:
    members = [c.id for c in runtime.containers({labels.SCOPE: scope, labels.SESSION: session_id})]
    if not members:
        raise UsageError(f"no session {session_id!r}", hint="`dejima sessions` lists the running ones")
    from dejima import session

    session.teardown(runtime, members)
    return members


def record_stale_violations(session_id: str, output: str) -> None:
    """A crashed launcher could not record its session's refusals: take them from the filter."""
    if not output:
        return  # the filter is gone (another launcher took it): keep what was recorded
    store = ViolationStore(session_id)
    if store.path.exists():
        store.path.unlink()  # the filter's log holds every record; start over rather than double
    store.append_output(output)


def clean(runtime: Runtime, scope: str, ui: UI, everything: bool) -> int:
    if everything:
        sessions = list_sessions(runtime, scope)
        for info in sessions:
            stop_session(runtime, scope, info.session_id)
            ui.info(f"removed session {info.session_id} ({info.status})")
        return len(sessions)
    from dejima import session

    with host.locked(sessions_dir()):
        return len(session.remove_stale(runtime, scope, ui, record_stale_violations))


def validate_allow(text: str, flag: str = "--allow") -> None:
    from dejima.core.egress import PolicyError, parse_entry

    try:
        parse_entry(text, flag)
    except PolicyError as exc:
        raise UsageError(exc.message, hint=exc.hint) from exc


def validate_upstream(text: str) -> None:
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        raise UsageError(f"--dns-upstream {text!r} is not an IP address",
                         hint="give the resolver's IPv4 address, e.g. --dns-upstream 10.0.0.2") from None
    if address.version != 4 or address.is_loopback:
        raise UsageError(f"--dns-upstream {text!r} cannot be reached from a container",
                         hint="give a non-loopback IPv4 resolver")


def session_request(workspace: Path, command: tuple[str, ...] | None, resolved: Resolved, settings: Settings,
                    options: Options, session_id: str, launcher: str) -> SessionRequest:
    """What a session on ``workspace`` asks for: the same for a real start and for ``--render``,
    so that render shows what runs (paths are computed here, made by the caller)."""
    home = host.home_dir_for(workspace)
    project_allow, project_source = projects.read_allow(workspace)
    return SessionRequest(
        session_id=session_id,
        scope=host.scope(),
        workspace=PurePosixPath(workspace),
        home_dir=PurePosixPath(home),
        command=command,
        launcher=launcher,
        harness=resolved.harness.name,
        allow=options.allow,
        allow_special=options.allow_special,
        resolv_conf=PurePosixPath(host.state_dir() / "resolv.conf"),
        cache_root=PurePosixPath(host.data_dir() / "caches" / home.name),
        read_only=protected_paths(workspace, settings),
        run_dir=PurePosixPath(run_dir(session_id)),
        control_owner=os.getuid(),
        project_allow=project_allow,
        project_source=project_source,
    )


def render_plan(workspace: Path, command: tuple[str, ...] | None, resolved: Resolved, settings: Settings,
                options: Options) -> SessionPlan:
    """The plan a session would run, built without touching Docker (image names are placeholders;
    there is no engine gateway, and limits given as a share are taken of this host's memory)."""
    request = session_request(workspace, command, resolved, settings, options, "render", "render")
    source = str(host.settings_path())
    facts = network_facts(settings, None, options.upstream_dns)
    identity = host.session_identity(workspace, options.as_root)
    return build_session_plan(request, settings, identity, "<filter image>", "<session image>", facts, source,
                              resolved, engine_memory=host.memory_total())
