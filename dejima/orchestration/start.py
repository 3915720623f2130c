"""Starting a session: prepare it (stale sessions, images, the plan, the credential routes), then
run it (filter and session containers, the exit audit around it, the records kept after it).

    start_steps       what a start does before its containers, as steps with what each needs
    prepare_session   those steps applied (dejima.orchestration.steps); nothing started yet
    render_plan       the same steps, dry: the plan ``--render`` prints
    run_session       session.run with the audit's start in the time the filter's start leaves free
                      and its end once the session's container is gone; summaries at the end
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from dejima.adapters import host
from dejima.adapters.session_dirs import (
    ViolationStore,
    clear_run_dir,
    ledger_path,
    new_session_id,
    run_dir,
    sessions_dir,
)
from dejima.core.limits import describe
from dejima.core.plan import (
    GATE_ENTRYPOINT,
    PROXY_SOCKET,
    RESOLV_CONF,
    SESSION_HOME,
    TLS_SOCKET,
    SessionPlan,
    SessionRequest,
    build_policy,
    build_session_plan,
    cache_paths_outside_home,
    describe_command,
    unlock_special,
)
from dejima.core.resolve import Resolved
from dejima.core.settings import Settings
from dejima.errors import EngineError, ExitStatus, SessionError
from dejima.orchestration.manage_sessions import record_stale_violations
from dejima.orchestration.session_reporter import SessionReporter
from dejima.orchestration.start_request import Options, network_facts, session_request
from dejima.orchestration.steps import Done, Step, apply, ordered

if TYPE_CHECKING:  # the audit rules and the proxy are imported by the functions that use them
    from dejima.adapters.runtime import Runtime
    from dejima.core.connect import Connection
    from dejima.orchestration import exit_audit, session
    from dejima.orchestration.prestart import Prestarted
    from dejima.proxy.runner import SessionProxy


@dataclass(frozen=True, slots=True)
class Prepared:
    runtime: Runtime
    plan: SessionPlan
    settings: Settings
    proxy: SessionProxy | None = None  # the credential routes, served while the session runs
    accept_findings: bool = False  # --accept-findings: unreviewed critical findings do not stop the start
    prestarted: Prestarted | None = None  # the filter started before the plan (adopted if it is the plan's)
    # Undoes the start's steps (run directory, gate, record) for a caller that does not run the session after all
    unwind: Callable[[], None] | None = None


def prepare_session(
    workspace: Path, command: tuple[str, ...] | None, resolved: Resolved, settings: Settings,
    runtime: Runtime, ui: SessionReporter, options: Options | None = None, prestarted: Prestarted | None = None,
) -> Prepared:
    """Apply the start's steps (``start_steps``); a failing step undoes what the others did."""
    options = options or Options()
    applied = apply(start_steps(workspace, command, resolved, settings, runtime, ui, options, prestarted))
    done = applied.results
    return Prepared(runtime, done["plan"], settings, done["credentials"], options.accept_findings, prestarted,
                    applied.unwind)


def render_plan(workspace: Path, command: tuple[str, ...] | None, resolved: Resolved, settings: Settings,
                options: Options, ui: SessionReporter, session_id: str = "render") -> SessionPlan:
    """The plan a start would run, made by the same steps as a start, dry: nothing is changed and the
    engine is not asked (image names are placeholders; there is no engine gateway, and limits given
    as a share are taken of this host's memory). Credential sources are named, never read: the plan
    holds every route the manifests declare, with its placeholder; a start drops a route whose source
    is missing (and says so), or stops when the harness's agent needs it."""
    return render_start(workspace, command, resolved, settings, options, ui, session_id)[0]


StepOutline = tuple[str, str, tuple[str, ...], bool]  # (part of the start, step, what it needs, it changes something)


def render_start(workspace: Path, command: tuple[str, ...] | None, resolved: Resolved, settings: Settings,
                 options: Options, ui: SessionReporter,
                 session_id: str = "render") -> tuple[SessionPlan, tuple[StepOutline, ...]]:
    """``render_plan``'s plan, and the steps a start applies (both parts), in an order they may run."""
    from dejima.orchestration.session import pair_steps

    steps = start_steps(workspace, command, resolved, settings, None, ui, options, None, session_id)
    planned: SessionPlan = apply(steps, dry=True).results["plan"]
    # The pair's steps are only listed, never run here: no engine is needed to name them.
    pair = pair_steps(cast("Runtime", None), planned, [], [], cast(Any, object()) if planned.gate else None, 0.0,
                      before_session_steps(planned, ui, None))
    outline = tuple(("preparation", s.name, s.needs, s.effect) for s in ordered(steps)) + tuple(
        ("the container pair", s.name, s.needs, s.effect) for s in ordered(pair))
    return planned, outline


def start_steps(workspace: Path, command: tuple[str, ...] | None, resolved: Resolved, settings: Settings,
                runtime: Runtime | None, ui: SessionReporter, options: Options,
                prestarted: Prestarted | None, render_id: str = "render") -> list[Step]:
    """What a start does before its containers, as steps and what each needs (dejima.orchestration.steps).
    Without ``runtime`` (``--render``) the engine's facts are left out, its images named only, and the
    session is called ``render_id``."""
    from dejima.adapters.fifo import make_gate, make_run_dir

    identity = host.session_identity(workspace, options.as_root)
    source = str(host.settings_path())
    session_id = render_id if runtime is None else prestarted.session_id if prestarted is not None else new_session_id()
    request = session_request(workspace, command, resolved, settings, options, session_id,
                              "render" if runtime is None else host.launcher_token())
    owner = (identity.uid, identity.gid)

    def checked_policy(done: Done) -> None:
        # The allow list is checked against the host's and the engine's addresses before anything starts.
        facts = done["facts"]
        unlock_special(build_policy(settings, options.allow, facts, source, resolved), settings, options.allow_special,
                       facts, source)

    def remove_stale(_: Done) -> None:
        from dejima.orchestration import session

        assert runtime is not None
        with host.locked(sessions_dir()):  # launchers starting at once: one of them removes a leftover
            session.remove_stale(runtime, host.scope(), ui, record_stale_violations)

    def images(_: Done) -> tuple[str, str]:
        from dejima.adapters.image_builds import ensure_images

        assert runtime is not None
        return ensure_images(runtime, settings, identity, ui, resolved.image_layers())

    def directories(_: Done) -> None:
        host.ensure_private_dir(Path(request.home_dir), identity)
        host.resolv_conf_file(RESOLV_CONF)
        for path in cache_paths_outside_home(resolved):
            host.ensure_private_dir(Path(request.cache_root or "") / path.strip("/").replace("/", "__"), identity)

    def credentials(_: Done) -> SessionProxy | None:
        return _plan_proxy(workspace, command, resolved, settings, request, ui)

    def credentials_named(_: Done) -> SessionProxy | None:
        return _plan_proxy(workspace, command, resolved, settings, request, ui, read_sources=False)

    def credential_files(done: Done) -> None:
        if done["credentials"] is not None:
            from dejima.proxy.runner import write_home_files

            write_home_files(done["credentials"], Path(request.home_dir), owner)

    def harness_settings(done: Done) -> None:
        if done["connection"].files:
            from dejima.adapters.home_settings import merge_settings

            for note in merge_settings(str(request.home_dir), done["connection"].files, owner):
                ui.warn(note)

    def run_directory(_: Done) -> None:
        if prestarted is None:  # else the prestart made it, its FIFO open to the prestarted filter
            make_run_dir(Path(request.run_dir or ""))

    def plan(done: Done) -> SessionPlan:
        proxy: SessionProxy | None = done["credentials"]
        connection: Connection = done["connection"]
        planned = request
        if proxy is not None:
            planned = replace(planned, bridge=True, credential_env=proxy.environment, canaries=proxy.canaries,
                              intercept=proxy.intercepted)
        if connection.env:  # after the routes' variables: the harness's own reading of them wins
            planned = replace(planned, credential_env=(*planned.credential_env, *sorted(connection.env.items())))
        filter_image, session_image = done["images"]
        return build_session_plan(planned, settings, identity, filter_image, session_image, done["facts"], source,
                                  resolved, engine_memory=done["engine-memory"])

    def remember_filter(done: Done) -> None:
        from dejima.adapters.runtime import create_body
        from dejima.orchestration.prestart import remember

        planned: SessionPlan = done["plan"]
        remember(workspace, planned.filter.name, create_body(planned.filter), planned.session_id, request.launcher)

    session_dir = sessions_dir() / request.session_id
    return [
        # Facts: the engine's slowest answer (~15 ms) first, so that it overlaps the rest.
        Step("engine-memory", lambda _: runtime.memory() if runtime is not None else host.memory_total(),
             effect=False),
        Step("facts", lambda _: network_facts(settings, runtime, options.upstream_dns), effect=False),
        Step("policy", checked_policy, needs=("facts",), effect=False),
        # Changes, once the policy is known to be one that may start.
        Step("stale-sessions", remove_stale, needs=("policy",), preview=lambda _: None),
        Step("images", images, needs=("stale-sessions",), preview=lambda _: ("<filter image>", "<session image>")),
        Step("directories", directories, needs=("policy",)),
        # Reading the secrets is applying: a render names each route's source and reads none.
        Step("credentials", credentials, needs=("policy",), preview=credentials_named),
        Step("credential-files", credential_files, needs=("credentials", "directories")),
        Step("connection", lambda done: _harness_connection(resolved, done["credentials"], ui), needs=("credentials",),
             effect=False),
        Step("harness-settings", harness_settings, needs=("connection", "directories", "credential-files")),
        Step("run-directory", run_directory, needs=("policy",),
             undo=lambda _: clear_run_dir(request.session_id) if prestarted is None else None),
        Step("start-gate", lambda _: make_gate(Path(request.gate_dir or "")), needs=("policy",),
             undo=lambda _: shutil.rmtree(request.gate_dir or "", ignore_errors=True)),
        Step("record", lambda _: host.record(session_dir, "workspace", str(workspace)), needs=("policy",),
             undo=lambda _: (session_dir / "workspace").unlink(missing_ok=True)),
        Step("plan", plan, needs=("images", "facts", "engine-memory", "credentials", "connection"), effect=False),
        Step("remember-filter", remember_filter, needs=("plan",)),
    ]


def _plan_proxy(workspace: Path, command: tuple[str, ...] | None, resolved: Resolved, settings: Settings,
                request: SessionRequest, ui: SessionReporter, read_sources: bool = True) -> SessionProxy | None:
    """The session's credential routes, their sources read now on the host (never in a container);
    ``read_sources=False`` (``--render``): named, not read, so every declared route is shown."""
    if not any(m.credentials for m in resolved.manifests):
        return None
    from dejima.proxy.runner import plan_session_proxy

    proxy = plan_session_proxy(resolved, command, workspace, settings, sessions_dir() / request.session_id,
                               read_sources)
    for skipped in proxy.prepared.skipped if proxy else ():
        ui.warn(f"{skipped.message}; the session starts without that route")
    return proxy if proxy is not None and proxy.routes else None


def _harness_connection(resolved: Resolved, proxy: SessionProxy | None, ui: SessionReporter) -> Connection:
    """The harness's settings and variables for this session's backend (core/connect.py)."""
    from dejima.core.connect import connection, uses_route

    harness, backend, connect = resolved.harness, resolved.backend, resolved.harness_connect()
    route = backend.credentials[0].name if backend is not None and backend.credentials else None
    access = proxy.access(route) if proxy is not None and route is not None else None
    if connect is not None and access is None and uses_route(connect):
        ui.warn(f"harness {harness.name} reaches backend {backend.name if backend else '?'} through its credential "
                "route, which this session does not have: its connection settings are left out")
    return connection(harness.files, connect, *(access or (None, None)))


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


def check_findings(workspace: Path, accept: bool, ui: SessionReporter) -> None:
    """Warn about unreviewed findings; refuse to start on unreviewed critical ones unless accepted."""
    from dejima.adapters.findings import FindingStore

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
    from dejima.orchestration import exit_audit

    mounts = []
    for bind in plan.session.binds:
        if bind.read_only:
            continue
        kind = "workspace" if bind.source == plan.workspace else "home" if bind.target == SESSION_HOME else "cache"
        mounts.append(exit_audit.Mount(kind, Path(bind.source)))
    return mounts


def before_session_steps(plan: SessionPlan, ui: SessionReporter, audit: SessionAudit | None) -> list[Step]:
    """What a start does before the session's container starts, while the filter starts: the boundary
    line, the audit's start snapshot (none in a render)."""
    def show_boundary(_: object) -> None:  # rich is imported here, where it costs nothing
        if plan.interactive:
            ui.boundary(plan)
        else:
            ui.info(boundary_line(plan))

    return [Step("boundary", show_boundary, effect=False),
            Step("audit-start", lambda _: audit.start() if audit is not None else None, needs=("boundary",))]


class SessionAudit:
    """The exit audit around one session: its start before the session starts, its end once no
    process of the session is left (whichever of the two places that call ``finish`` comes first)."""

    def __init__(self, prepared: Prepared, ui: SessionReporter) -> None:
        self.prepared, self.ui = prepared, ui
        self.states: list[exit_audit.MountState] = []
        self.started = self.finished = False

    def start(self) -> None:
        """While the filter starts (the time is free then): import the audit (~0.1 s), finish the
        audits of sessions whose launcher died, check unreviewed findings (a critical one stops
        this start), take the start snapshot."""
        from dejima.orchestration import exit_audit

        plan = self.prepared.plan
        exit_audit.recover(self.ui)
        check_findings(Path(plan.workspace), self.prepared.accept_findings, self.ui)
        self.started = True
        self.states.extend(exit_audit.start(plan.session_id, audited_mounts(plan)))

    def finish(self) -> None:
        if not self.started or self.finished:  # no snapshot: the session never started, nothing to audit
            return
        from dejima.orchestration import exit_audit

        self.finished = True
        exit_audit.finish(self.prepared.plan.session_id, self.ui, states=self.states or None)


def run_session(prepared: Prepared, ui: SessionReporter, output: session.Output | None = None) -> int:
    """Run the prepared session to its end; ``output``: where a non-interactive command's output goes (the
    launcher's own stdout and stderr by default)."""
    from dejima.orchestration import session

    settings = prepared.settings
    audit = SessionAudit(prepared, ui)

    store = ViolationStore(prepared.plan.session_id)
    try:
        with _serving(prepared):
            return session.run(
                prepared.runtime, prepared.plan, ui,
                ready_timeout=settings.session.ready_timeout,
                stop_timeout=settings.session.stop_timeout,
                on_filter_output=store.append_output,
                on_refusal=_notifier(ui) if prepared.plan.interactive and settings.session.notify_denials else None,
                before_session=before_session_steps(prepared.plan, ui, audit),
                once_session_removed=audit.finish,
                prestarted=prepared.prestarted,
                output=output or session.Output(),
            )
    except EngineError as exc:
        if "executable file not found" in exc.message or "no such file or directory" in exc.message:
            raise SessionError(  # the gate names a missing command itself; this is its own shell
                f"the session image cannot run {GATE_ENTRYPOINT[0]}, which holds the session's command "
                "until the filter is verified",
                hint="a session image needs a POSIX shell at /bin/sh",
                reference="command-not-found",
                exit_code=ExitStatus.COMMAND_NOT_FOUND,
            ) from exc
        raise
    finally:
        clear_run_dir(prepared.plan.session_id)  # its containers and its proxy are gone: so go their sockets
        audit.finish()  # done already unless the session's container could not be removed
        summary = store.summary()
        if summary:
            ui.warn(f"session {prepared.plan.session_id}: {summary}; "
                    f"details: dejima violations {prepared.plan.session_id}")
        if prepared.proxy is not None:
            ui.info(ledger_summary(prepared.plan.session_id))


def _notifier(ui: SessionReporter) -> Callable[[dict[str, object]], None]:
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

    sockets = run_dir(prepared.plan.session_id)
    return ProxyThread(prepared.proxy.prepared.config, sockets / PROXY_SOCKET,
                       sockets / TLS_SOCKET if prepared.proxy.intercepted else None)


def ledger_summary(session_id: str) -> str:
    """One line of totals from the session's ledger (requests the proxy carried)."""
    from dejima.core.floods import total
    from dejima.proxy.records import read_records

    entries = read_records(ledger_path(session_id))
    if not entries:
        return f"session {session_id}: no request went through the credential proxy"

    def summed(key: str) -> int:
        return sum(int(str(e.get(key) or 0)) for e in entries)

    refused = total(entries, lambda e: int(str(e.get("status") or 0)) >= 400)
    return (f"session {session_id}: {total(entries)} request(s) through the credential proxy ({refused} answered "
            f"with an error), {summed('bytes_in')} bytes in, {summed('bytes_out')} bytes out; "
            f"details: dejima ledger {session_id}")


