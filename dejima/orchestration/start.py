"""Starting a session: read the facts, plan (orchestration/start_plan.py), apply the plan's
preparation, then run it (filter and session containers, the exit audit around it, the records
kept after it).

    read_facts        what the host and the engine say (the credential sources read, kept apart)
    prepare_session   facts, plan_start, apply_start: nothing started yet
    render_start      the same facts read dry and the same plan_start: the plan ``--render`` prints
    run_session       session.run with the audit's start in the time the filter's start leaves free
                      and its end once the session's container is gone; summaries at the end
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dejima.adapters import host
from dejima.adapters.session_dirs import (
    ViolationStore,
    clear_run_dir,
    discard_unstarted,
    ledger_path,
    live_sessions_on,
    new_session_id,
    run_dir,
    sessions_dir,
)
from dejima.core.images import ImageNeeds
from dejima.core.limits import describe
from dejima.core.plan import (
    GATE_ENTRYPOINT,
    PROXY_SOCKET,
    RESOLV_CONF,
    SESSION_HOME,
    TLS_SOCKET,
    SessionPlan,
    describe_command,
)
from dejima.core.resolve import Resolved
from dejima.core.settings import Settings
from dejima.errors import EngineError, ExitStatus, SessionError
from dejima.orchestration.manage_sessions import record_stale_violations
from dejima.orchestration.session_reporter import SessionReporter
from dejima.orchestration.start_plan import (
    FACT_STEPS,
    PREPARATION,
    StartFacts,
    StartPlan,
    check_policy,
    declared,
    plan_start,
)
from dejima.orchestration.start_request import Options, network_facts, session_request
from dejima.orchestration.steps import Applied, Done, apply, with_actions

if TYPE_CHECKING:  # the audit rules and the proxy are imported by the functions that use them
    from dejima.adapters.runtime import Runtime
    from dejima.orchestration import exit_audit, session
    from dejima.orchestration.prestart import Prestarted
    from dejima.proxy.runner import SessionProxy
    from dejima.proxy.sources import CredentialError, CredentialSource


@dataclass(frozen=True, slots=True)
class Prepared:
    runtime: Runtime
    start: StartPlan  # what the start decided (orchestration/start_plan.py)
    settings: Settings
    proxy: SessionProxy | None = None  # the credential routes with their sources, served while the session runs
    prestarted: Prestarted | None = None  # the filter started before the plan (adopted if it is the plan's)
    # Undoes the start's steps (run directory, gate, record) for a caller that does not run the session after all
    unwind: Callable[[], None] | None = None

    @property
    def plan(self) -> SessionPlan:
        return self.start.session


def prepare_session(
    workspace: Path, command: tuple[str, ...] | None, resolved: Resolved, settings: Settings,
    runtime: Runtime, ui: SessionReporter, options: Options | None = None, prestarted: Prestarted | None = None,
) -> Prepared:
    """Read the facts, plan the start, apply the plan's preparation; a failing step undoes what the others did."""
    options = options or Options()
    session_id = prestarted.session_id if prestarted is not None else new_session_id()
    try:
        plan, sources = _planned(workspace, command, resolved, settings, options, ui, runtime, session_id)
        applied = apply_start(plan, sources, runtime, ui, prestarted)
    except BaseException:
        if prestarted is None:  # else the prestart's, removed with it (cli/launch.py)
            discard_unstarted(session_id)
        raise
    return Prepared(runtime, plan, settings, applied.results["credentials"], prestarted, applied.unwind)


def render_start(workspace: Path, command: tuple[str, ...] | None, resolved: Resolved, settings: Settings,
                 options: Options, ui: SessionReporter, session_id: str = "render") -> StartPlan:
    """The plan a start would apply, made by the same ``plan_start`` from facts read dry: nothing is
    changed and the engine is not asked (image names are placeholders; there is no engine gateway, and
    limits given as a share are taken of this host's memory). Credential sources are named, never read:
    the plan holds every route the manifests declare, with its placeholder; a start leaves out a route
    whose source is missing (and says so), or stops when the harness's agent needs it."""
    return _planned(workspace, command, resolved, settings, options, ui, None, session_id)[0]


def _planned(workspace: Path, command: tuple[str, ...] | None, resolved: Resolved, settings: Settings,
             options: Options, ui: SessionReporter, runtime: Runtime | None,
             session_id: str) -> tuple[StartPlan, Mapping[str, CredentialSource]]:
    """The facts read (dry without ``runtime``), the plan made from them and its notes shown; with the
    credential sources read, for the apply."""
    facts, sources = read_facts(workspace, command, resolved, settings, options, ui, runtime, session_id)
    plan = plan_start(command, resolved, settings, options, facts)
    for note in plan.notes:
        ui.warn(note)
    return plan, sources


def read_facts(workspace: Path, command: tuple[str, ...] | None, resolved: Resolved, settings: Settings,
               options: Options, ui: SessionReporter, runtime: Runtime | None,
               session_id: str) -> tuple[StartFacts, Mapping[str, CredentialSource]]:
    """What the host and the engine say (start_plan.FACT_STEPS), and the credential sources read, kept
    apart from the facts. Without ``runtime`` (``--render``) nothing is changed and no secret read: the
    engine's facts are left out, the images named only, every credential source named."""
    identity = host.session_identity(workspace, options.as_root)
    source = str(host.settings_path())
    request = session_request(workspace, command, resolved, settings, options, session_id,
                              "render" if runtime is None else host.launcher_token())

    def images(_: Done) -> ImageNeeds:
        from dejima.adapters.image_builds import image_needs

        assert runtime is not None
        return image_needs(runtime, settings, identity, ui, resolved.image_layers())

    def credential_sources(_: Done) -> tuple[Mapping[str, CredentialSource], tuple[CredentialError, ...]] | None:
        if not resolved.has_credentials:
            return {}, ()
        from dejima.proxy.runner import read_session_sources

        return read_session_sources(resolved, command)

    def remove_stale(_: Done) -> None:
        from dejima.orchestration import session as pair

        assert runtime is not None
        with host.locked(sessions_dir()):  # launchers starting at once: one of them removes a leftover
            pair.remove_stale(runtime, host.scope(), ui, record_stale_violations)

    def git_config(_: Done) -> str:
        from dejima.adapters.repo import git_config_text

        return git_config_text(workspace) if resolved.has_credentials else ""

    actions: dict[str, Callable[[Done], Any]] = {
        "engine-memory": lambda _: runtime.memory() if runtime is not None else host.memory_total(),
        "network": lambda _: network_facts(settings, runtime, options.upstream_dns),
        "policy": lambda done: check_policy(settings, options, done["network"], source, resolved),
        "findings": lambda _: review_findings(workspace, options.accept_findings, ui, session_id),
        "images": images,
        "credential-sources": credential_sources,
        "git-config": git_config,
        "other-sessions": lambda _: live_sessions_on(str(request.workspace), but=session_id),
        "stale-sessions": remove_stale,
    }
    previews: dict[str, Callable[[Done], Any]] = {
        "images": lambda _: ImageNeeds(("<filter image>", "<session image>")),
        "credential-sources": lambda _: None,
    }
    done = apply(with_actions(FACT_STEPS, actions, previews), dry=runtime is None).results
    read = done["credential-sources"]
    facts = StartFacts(request, identity, source, sessions_dir() / session_id, done["engine-memory"], done["network"],
                       done["images"], done["git-config"],
                       frozenset(read[0]) if read is not None else None, read[1] if read is not None else (),
                       done["other-sessions"])
    return facts, read[0] if read is not None else {}


def apply_start(plan: StartPlan, sources: Mapping[str, CredentialSource], runtime: Runtime, ui: SessionReporter,
                prestarted: Prestarted | None) -> Applied:
    """Apply the plan's preparation (start_plan.PREPARATION_STEPS); ``sources``: the credential sources
    ``read_facts`` read. A failing step undoes what the others applied."""
    from dejima.adapters.fifo import make_gate, make_run_dir

    session, request = plan.session, plan.request
    owner = (plan.identity.uid, plan.identity.gid)
    home = plan.private_dirs[0]
    record_file, record_text = plan.record

    def images(_: Done) -> None:
        from dejima.adapters.image_builds import build_needed

        build_needed(runtime, plan.images, ui)

    def directories(_: Done) -> None:
        for directory in plan.private_dirs:
            host.ensure_private_dir(directory, plan.identity)
        host.resolv_conf_file(RESOLV_CONF)

    def credentials(_: Done) -> SessionProxy | None:
        if plan.proxy is None:
            return None
        from dejima.proxy.runner import serve_session_proxy

        return serve_session_proxy(plan.proxy, sources)

    def credential_files(done: Done) -> None:
        if done["credentials"] is not None:
            from dejima.proxy.runner import write_home_files

            for note in write_home_files(done["credentials"], home, owner):
                ui.warn(note)

    def harness_settings(_: Done) -> None:
        if plan.connection.files:
            from dejima.adapters.home_settings import merge_settings

            for note in merge_settings(str(home), plan.connection.files, owner):
                ui.warn(note)

    def run_directory(_: Done) -> None:
        if prestarted is None:  # else the prestart made it, its FIFO open to the prestarted filter
            make_run_dir(Path(request.run_dir or ""))

    def remember_filter(_: Done) -> None:
        from dejima.adapters.runtime import create_body
        from dejima.orchestration.prestart import remember

        remember(Path(session.workspace), session.filter.name, create_body(session.filter), session.session_id,
                 request.launcher)

    actions: dict[str, Callable[[Done], Any]] = {
        "images": images, "directories": directories, "credentials": credentials,
        "credential-files": credential_files, "harness-settings": harness_settings, "run-directory": run_directory,
        "start-gate": lambda _: make_gate(Path(request.gate_dir or "")),
        "record": lambda _: host.record(record_file.parent, record_file.name, record_text),
        "remember-filter": remember_filter,
    }
    undos: dict[str, Callable[[Any], None]] = {
        "run-directory": lambda _: clear_run_dir(session.session_id) if prestarted is None else None,
        "start-gate": lambda _: shutil.rmtree(request.gate_dir or "", ignore_errors=True),
        "record": lambda _: record_file.unlink(missing_ok=True),
    }
    return apply(with_actions(declared(plan.steps, PREPARATION), actions, undos=undos))


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
    inbound = "".join(f" | inbound: {p.shown}" + ("" if p.local_only else " (WARNING: other machines too)")
                      for p in plan.filter.ports)
    proxy = plan.upstream_proxy
    inbound += f" | via proxy {proxy.url} (from {proxy.origin})" if proxy is not None else ""
    return (
        f"session {plan.session_id}: {harness}{command} "
        f"in {plan.workspace} | network: {network} (nftables default-deny, verified; DNS only through "
        f"dejima; no IPv6){overrides}{inbound} | user {plan.session.user}, no capabilities | mounts: workspace, "
        f"home{limits}"
    )


def review_findings(workspace: Path, accept: bool, ui: SessionReporter, session_id: str = "") -> None:
    """Before anything starts: finish the audits of sessions whose launcher died (importing the audit, ~0.1 s),
    then refuse the start on unreviewed critical findings unless accepted (``check_findings``)."""
    from dejima.orchestration import exit_audit

    exit_audit.recover(ui)
    check_findings(workspace, accept, ui, session_id)


def check_findings(workspace: Path, accept: bool, ui: SessionReporter, session_id: str = "") -> None:
    """Warn about unreviewed findings; refuse to start on unreviewed critical ones unless accepted. A finding
    whose cause is gone from disk is closed first (``session_id``: the session starting, not one that runs)."""
    from dejima.adapters.finding_causes import settle
    from dejima.adapters.findings import FindingStore

    store = FindingStore()
    try:
        settle(store, str(workspace), but=session_id)
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
            exit_code=ExitStatus.UNREVIEWED_FINDINGS,
        )


def audited_mounts(plan: SessionPlan) -> list[exit_audit.Mount]:
    """Every directory the session can write that outlives it: the workspace (with the paths the
    session's manifests ask the audit to watch), the per-project home, the manifest caches."""
    from dejima.core.audit.manifest_watch import watch_of
    from dejima.orchestration import exit_audit

    watch = watch_of(plan.resolved.manifests if plan.resolved is not None else ())
    mounts = []
    for bind in plan.session.binds:
        if bind.read_only:
            continue
        kind = "workspace" if bind.source == plan.workspace else "home" if bind.target == SESSION_HOME else "cache"
        mounts.append(exit_audit.Mount(kind, Path(bind.source), watch if kind == "workspace" else ()))
    return mounts


def before_session_actions(plan: SessionPlan, ui: SessionReporter,
                           audit: SessionAudit | None) -> dict[str, Callable[[Done], object]]:
    """The start's actions for the pair's ``boundary`` and ``audit-start`` steps, while the filter starts:
    the boundary line, the audit's start snapshot."""
    def show_boundary(_: object) -> None:  # rich is imported here, where it costs nothing
        if plan.interactive:
            ui.boundary(plan)
        else:
            ui.info(boundary_line(plan))
        for port in plan.filter.ports:  # said even with -q, which hides the card and the line
            if not port.local_only:
                ui.warn(f"the session's port {port.session_port} is published on {port.host_address}:"
                        f"{port.host_port} ({port.origin}): other machines can reach it, not only this one")

    return {"boundary": show_boundary, "audit-start": lambda _: audit.start() if audit is not None else None}


class SessionAudit:
    """The exit audit around one session: its start before the session starts, its end once no
    process of the session is left (whichever of the two places that call ``finish`` comes first)."""

    def __init__(self, prepared: Prepared, ui: SessionReporter) -> None:
        self.prepared, self.ui = prepared, ui
        self.states: list[exit_audit.MountState] = []
        self.started = self.finished = False

    def start(self) -> None:
        """While the filter starts (the time is free then): take the start snapshot. The audits of sessions
        whose launcher died and the unreviewed findings were the facts' (``read_facts``), before anything started."""
        from dejima.orchestration import exit_audit

        plan = self.prepared.plan
        self.started = True
        self.states.extend(exit_audit.start(plan.session_id, audited_mounts(plan)))

    def finish(self) -> None:
        if not self.started or self.finished:  # no snapshot: the session never started, nothing to audit
            return
        from dejima.orchestration import exit_audit

        self.finished = True
        exit_audit.finish(self.prepared.plan.session_id, self.ui, states=self.states or None)


def run_session(prepared: Prepared, ui: SessionReporter, streams: session.Streams | None = None) -> int:
    """Run the prepared session to its end; ``streams``: a non-interactive command's input and where its output
    goes (none, and the launcher's own stdout and stderr, by default)."""
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
                before_session=before_session_actions(prepared.plan, ui, audit),
                once_session_removed=audit.finish,
                prestarted=prepared.prestarted,
                streams=streams or session.Streams(),
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


