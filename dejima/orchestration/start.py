"""Starting a session: read the facts, plan (orchestration/start_plan.py), apply the plan's
preparation, then run it (filter and session containers, the exit audit around it, the records
kept after it). One executor (orchestration/executor.py) applies the plan's actions and unwinds them.

    read_facts        what the host and the engine say (the credential sources read, kept apart)
    prepare_session   facts, plan_start, the preparation's actions applied: no container yet
    render_start      the same facts read dry and the same plan_start: the plan ``--render`` prints
    run_session       the pair's actions by the same executor, the command run, the log unwound;
                      summaries at the end
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from dejima.adapters import host
from dejima.adapters.session_dirs import (
    ViolationStore,
    discard_unstarted,
    ledger_path,
    live_sessions_on,
    new_draws,
    new_session_id,
    sessions_dir,
)
from dejima.core.images import ImageNeeds
from dejima.core.limits import describe
from dejima.core.plan import GATE_ENTRYPOINT, SessionPlan, describe_command
from dejima.core.resolve import Resolved
from dejima.core.settings import Settings
from dejima.errors import EngineError, ExitStatus, SessionError
from dejima.orchestration.actions import base_plan
from dejima.orchestration.background import Background
from dejima.orchestration.executor import Boundary, Event, Executor, FilterOutput, FilterRefusal, Note, Streams
from dejima.orchestration.manage_sessions import record_stale_violations
from dejima.orchestration.session_reporter import SessionReporter
from dejima.orchestration.start_plan import StartFacts, StartPlan, check_policy, plan_start
from dejima.orchestration.start_request import Options, network_facts, session_request

if TYPE_CHECKING:  # the audit rules and the proxy are imported by the functions that use them
    from dejima.adapters.runtime import Runtime
    from dejima.orchestration.prestart import Prestarted
    from dejima.proxy.sources import CredentialSource


T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Prepared:
    runtime: Runtime
    start: StartPlan  # what the start decided (orchestration/start_plan.py)
    settings: Settings
    executor: Executor  # what it applied so far, and how to unwind it (orchestration/executor.py)
    observer: StartObserver
    prestarted: Prestarted | None = None  # the filter started before the plan (adopted if it is the plan's)

    @property
    def plan(self) -> SessionPlan:
        return self.start.session


class StartObserver:
    """The one observer of a start's executor: what it tells goes to the reporter and the session's records."""

    def __init__(self, plan: SessionPlan, ui: SessionReporter, notify_denials: bool) -> None:
        self.plan, self.ui = plan, ui
        self.store = ViolationStore(plan.session_id)
        self.told: set[str] = set()
        self.notify = notify_denials and plan.interactive

    def __call__(self, event: Event) -> None:
        match event:
            case Note(text=text):
                self.ui.warn(text)
            case Boundary(plan=plan):
                show_boundary(plan, self.ui)
            case FilterOutput(text=text):
                self.store.append_output(text)  # its own filter's (a leftover's: session.remove_stale)
            case FilterRefusal(record=record) if self.notify:
                self._notify(record)

    def _notify(self, record: Mapping[str, object]) -> None:
        """Tell the user, once per name, that the session was refused a name it could be granted."""
        name = str(record.get("domain", ""))
        if record.get("kind") == "dns" and name and name not in self.told and "not on the allow list" in str(
                record.get("reason", "")):
            self.told.add(name)
            self.ui.notice(f"dejima: {name} was refused; dejima-allow {name} grants it")


def prepare_session(
    workspace: Path, command: tuple[str, ...] | None, resolved: Resolved, settings: Settings,
    runtime: Runtime, ui: SessionReporter, options: Options | None = None, prestarted: Prestarted | None = None,
) -> Prepared:
    """Read the facts, plan the start, apply the plan's preparation; a failing action undoes what the others did."""
    options = options or Options()
    session_id = prestarted.session_id if prestarted is not None else new_session_id()
    try:
        plan, sources = _planned(workspace, command, resolved, settings, options, ui, runtime, session_id,
                                 prestarted is not None)
        observer = StartObserver(plan.session, ui, settings.session.notify_denials)
        executor = Executor(runtime, ui, observer, sources=sources, prestarted=prestarted)
        executor.run(plan.preparation)
    except BaseException:
        if prestarted is None:  # else the prestart's, removed with it (cli/launch.py)
            discard_unstarted(session_id)
        raise
    return Prepared(runtime, plan, settings, executor, observer, prestarted)


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
             session_id: str, prestarted: bool = False) -> tuple[StartPlan, Mapping[str, CredentialSource]]:
    """The facts read (dry without ``runtime``), the plan made from them and its notes shown; with the
    credential sources read, for the apply."""
    facts, sources = read_facts(workspace, command, resolved, settings, options, ui, runtime, session_id)
    facts = replace(facts, prestarted=prestarted)
    plan = plan_start(command, resolved, settings, options, facts)
    for note in plan.notes:
        ui.warn(note)
    return plan, sources


def read_facts(workspace: Path, command: tuple[str, ...] | None, resolved: Resolved, settings: Settings,
               options: Options, ui: SessionReporter, runtime: Runtime | None,
               session_id: str) -> tuple[StartFacts, Mapping[str, CredentialSource]]:
    """What the host and the engine say, and the credential sources read, kept apart from the facts. Without
    ``runtime`` (``--render``) nothing is changed and no secret read: the engine's facts are left out, the images
    named only, every credential source named.

    The slow reads run at once (each on a thread: they wait on the engine, the disk or a helper command): the
    engine's memory, the workspace's git config and the other sessions on it from the start; the policy is
    checked against the network facts before anything changes; the audits of dead launchers' sessions are
    finished and the unreviewed findings checked (a refusal) before any image is pulled or checked and any
    source read; meanwhile the leftovers of dead launchers are removed (a plan of their own). Whatever raises
    first is raised once every read begun has ended."""
    identity = host.session_identity(workspace, options.as_root)
    source = str(host.settings_path())
    request = session_request(workspace, command, resolved, settings, options, session_id,
                              "render" if runtime is None else host.launcher_token())
    begun: list[Background[Any]] = []

    def at_once(call: Callable[[], T], name: str) -> Background[T]:
        begun.append(Background(call, f"fact-{name}"))
        return begun[-1]

    def images(engine: Runtime) -> ImageNeeds:
        from dejima.adapters.image_builds import find_base, image_needs

        found = find_base(engine, settings)
        if found is None:  # the base first, a plan of its own: the recipes hash its id into the tags
            Executor(engine, ui).run(base_plan(settings))
        return image_needs(engine, settings, identity, ui, resolved.image_layers(), found)

    def remove_stale(engine: Runtime) -> None:
        from dejima.orchestration import session as pair

        with host.locked(sessions_dir()):  # launchers starting at once: one of them removes a leftover
            pair.remove_stale(engine, host.scope(), ui, record_stale_violations)

    def git_config() -> str:
        from dejima.adapters.repo import git_config_text

        return git_config_text(workspace) if resolved.has_credentials else ""

    try:
        # The engine's slowest answer (~15 ms) first, so that it overlaps the rest.
        memory = at_once(lambda: runtime.memory() if runtime is not None else host.memory_total(), "engine-memory")
        git = at_once(git_config, "git-config")
        others = at_once(lambda: live_sessions_on(str(request.workspace), but=session_id), "other-sessions")
        findings = at_once(lambda: review_findings(workspace, options.accept_findings, ui, session_id), "findings") \
            if runtime is not None else None
        network = network_facts(settings, runtime, options.upstream_dns)
        check_policy(settings, options, network, source, resolved)
        if runtime is not None:
            engine = runtime
            at_once(lambda: remove_stale(engine), "stale-sessions")
        if findings is not None:
            findings.join()
        needs = at_once(lambda: images(engine), "images") if runtime is not None else None
        read = None
        if runtime is not None and resolved.has_credentials:  # here, while the images are checked
            from dejima.proxy.runner import read_session_sources

            read = read_session_sources(resolved, command)
        elif runtime is not None:
            read = {}, ()
        facts = StartFacts(request, identity, source, sessions_dir() / session_id, memory.join(), network,
                           needs.join() if needs is not None else ImageNeeds(("<filter image>", "<session image>")),
                           git.join(), new_draws(), frozenset(read[0]) if read is not None else None,
                           read[1] if read is not None else (), others.join())
        for reading in begun:
            reading.join()  # the leftovers' removal too: what it raised is the start's
    finally:
        for reading in begun:
            reading.wait()
    return facts, read[0] if read is not None else {}


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


def show_boundary(plan: SessionPlan, ui: SessionReporter) -> None:
    """The boundary card (interactive) or line, while the filter starts."""
    if plan.interactive:
        ui.boundary(plan)
    else:
        ui.info(boundary_line(plan))
    for port in plan.filter.ports:  # said even with -q, which hides the card and the line
        if not port.local_only:
            ui.warn(f"the session's port {port.session_port} is published on {port.host_address}:"
                    f"{port.host_port} ({port.origin}): other machines can reach it, not only this one")


def run_session(prepared: Prepared, ui: SessionReporter, streams: Streams | None = None) -> int:
    """Run the prepared session to its end: the plan's container pair applied by the executor that applied its
    preparation, the command run, then the whole log unwound; ``streams``: a non-interactive command's input and
    where its output goes (none, and the launcher's own stdout and stderr, by default)."""
    from dejima.orchestration import session

    settings, executor = prepared.settings, prepared.executor
    executor.streams = streams or Streams()
    try:
        return session.run(prepared.runtime, prepared.plan, ui, ready_timeout=settings.session.ready_timeout,
                           stop_timeout=settings.session.stop_timeout, executor=executor,
                           actions=prepared.start.pair, follow_refusals=prepared.observer.notify)
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
        summary = prepared.observer.store.summary()
        if summary:
            ui.warn(f"session {prepared.plan.session_id}: {summary}; "
                    f"details: dejima violations {prepared.plan.session_id}")
        if prepared.start.routes is not None:
            ui.info(ledger_summary(prepared.plan.session_id))


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


