"""A start's actions as data: a closed set of frozen values, each with the undo the plan derives
for it (``Planned``). orchestration/start_plan.py plans them, orchestration/executor.py is the one
interpreter of them, ``--render`` prints them (ui/views.py format_actions). No I/O here.

    Planned(name, part, action, needs, undo, undo_after)
        action      what to do (BuildImages, MakePrivateDir, ..., ReleaseGate)
        needs       the actions that must have been applied first (independent ones run at once)
        undo        what unwinding it does (None: nothing, what it made is meant to stay)
        undo_after  the actions whose undos must be done before this one's

Teardown is the applied log unwound: on success, on a failure at any action, on a signal. The undos
of the pair are done before those of the preparation, each after its ``undo_after``, independent ones
at once; an undo ``kept_if_ran`` is skipped once the session's command ran (the record, the home).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dejima.core.images import ImageNeeds
from dejima.core.plan import ContainerSpec, Identity, SessionPlan
from dejima.core.publish import Published
from dejima.core.settings import Settings

if TYPE_CHECKING:
    from dejima.core.route_plan import RoutesPlan

LEFTOVERS, PREPARATION, PAIR = "before the plan (leftovers, the base image)", "preparation", "the container pair"


# --- what a start does before its plan: plans of their own, run first ------------------------------------


@dataclass(frozen=True, slots=True)
class RemoveLeftover:
    """A session whose launcher is gone: its filters stopped gently and their output kept as its records, its
    containers removed, its run directory cleared (its records stay)."""

    session_id: str
    containers: tuple[str, ...]
    filters: tuple[str, ...]  # of ``containers``, the filters (stopped gently first)


@dataclass(frozen=True, slots=True)
class ProvideBase:
    """The base image pulled, or made with debootstrap, as the settings say: the image recipes hash its id, so
    it must exist before the start's facts can name the images."""

    settings: Settings = field(repr=False)


def leftovers_plan(stale: Mapping[str, Sequence[tuple[str, str]]]) -> tuple[Planned, ...]:
    """The sessions whose launcher is gone (session id -> (container, role)), each removed; nothing to undo."""
    from dejima.core.labels import ROLE_FILTER

    return tuple(planned(f"leftover-{session_id}", LEFTOVERS, RemoveLeftover(
        session_id, tuple(c for c, _ in members), tuple(c for c, role in members if role == ROLE_FILTER)))
        for session_id, members in sorted(stale.items()))


def base_plan(settings: Settings) -> tuple[Planned, ...]:
    """The base image provided, when the engine lacks it (pulled or made: the settings say how)."""
    return (planned("base", LEFTOVERS, ProvideBase(settings)),)


# --- what a start does -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BuildImages:
    """The images the engine lacks built, then their tags remembered."""

    needs: ImageNeeds


@dataclass(frozen=True, slots=True)
class MakePrivateDir:
    """A 0700 directory (the session's home, a cache), handed to the session's user."""

    path: Path
    owner: Identity


@dataclass(frozen=True, slots=True)
class WriteResolvConf:
    """The host file mounted as the session's resolv.conf (shared by every session, rewritten if it differs)."""

    text: str


@dataclass(frozen=True, slots=True)
class ServeCredentials:
    """The sources read on the host handed to the planned routes, the session CA made (in memory only)."""

    routes: RoutesPlan = field(repr=False)


@dataclass(frozen=True, slots=True)
class WriteCredentialFiles:
    """The decoy credentials file and the session CA's bundle, in the session's home."""

    home: Path
    owner: Identity


@dataclass(frozen=True, slots=True)
class MergeHarnessSettings:
    """The harness's settings merged into its files in the session's home."""

    home: Path
    owner: Identity
    files: Mapping[str, Mapping[str, Any]] = field(repr=False)  # path in the home -> settings


@dataclass(frozen=True, slots=True)
class MakeRunDir:
    """The filter's run directory and its configuration FIFO."""

    path: Path


@dataclass(frozen=True, slots=True)
class MakeGate:
    """The start gate's directory and FIFO."""

    path: Path


@dataclass(frozen=True, slots=True)
class WriteRecord:
    """A fact about the session in its state directory (its workspace, as `dejima sessions` reads it)."""

    path: Path
    text: str


@dataclass(frozen=True, slots=True)
class RememberFilter:
    """This filter's create request kept for the next start on the workspace (orchestration/prestart.py)."""

    workspace: Path
    spec: ContainerSpec = field(repr=False)
    session_id: str
    launcher: str


@dataclass(frozen=True, slots=True)
class ServeProxy:
    """The credential proxy serving on the run directory's sockets while the session runs."""

    socket: Path
    tls_socket: Path | None


@dataclass(frozen=True, slots=True)
class HoldGate:
    """The launcher's end of the start gate opened: were the launcher to die, the command sees end of file."""

    fifo: str


@dataclass(frozen=True, slots=True)
class CreateContainer:
    """A container created from its spec; ``adopt``: a prestarted container of exactly this request is taken."""

    spec: ContainerSpec = field(repr=False)
    adopt: bool = False
    takes_input: bool = False  # its stdin opened when the run has input to feed it (`docker run -i`)

    @property
    def name(self) -> str:
        return self.spec.name


@dataclass(frozen=True, slots=True)
class SendConfiguration:
    """The filter's configuration written into its FIFO, the launcher's end held open until the teardown."""

    fifo: str
    text: str = field(repr=False)


@dataclass(frozen=True, slots=True)
class StartContainer:
    """A created container started; ``attached``: its output streamed (and its input fed) from before
    its start. ``explained_by``: on failure, the filter's story is waited for and told instead."""

    name: str
    attached: bool = False
    explained_by: WaitReady | None = None


@dataclass(frozen=True, slots=True)
class CheckPublished:
    """The engine bound the filter's published ports exactly as planned."""

    name: str
    ports: tuple[Published, ...]


@dataclass(frozen=True, slots=True)
class ShowBoundary:
    """The boundary card (interactive) or line, told to the observer."""

    plan: SessionPlan = field(repr=False)


@dataclass(frozen=True, slots=True)
class StartAudit:
    """The exit audit's start snapshot of every writable mount that outlives the session."""

    plan: SessionPlan = field(repr=False)


@dataclass(frozen=True, slots=True)
class WaitReady:
    """The filter's ready line, naming the plan's ruleset digest, within ``timeout`` seconds."""

    name: str
    digest: str
    timeout: float


@dataclass(frozen=True, slots=True)
class ReleaseGate:
    """The gate released: the session's command runs."""

    fifo: str


Action = (RemoveLeftover | ProvideBase | BuildImages | MakePrivateDir | WriteResolvConf | ServeCredentials
          | WriteCredentialFiles | MergeHarnessSettings | MakeRunDir | MakeGate | WriteRecord | RememberFilter
          | ServeProxy | HoldGate | CreateContainer | SendConfiguration | StartContainer | CheckPublished
          | ShowBoundary | StartAudit | WaitReady | ReleaseGate)


# --- their undos ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RemoveTree:
    path: Path
    kept_if_ran: bool = False


@dataclass(frozen=True, slots=True)
class RemoveFile:
    path: Path
    kept_if_ran: bool = False


@dataclass(frozen=True, slots=True)
class RemoveMadeDir:
    """The directory removed if this start made it, and the parents it made with it while they are empty
    (another start may have made its own beside it since); kept once the session ran (a home outlives its
    session)."""

    path: Path
    kept_if_ran: bool = True


@dataclass(frozen=True, slots=True)
class RemoveContainer:
    """The container removed; ``keep_output``: stopped gently first and its output told to the observer
    (the filter's violation records)."""

    name: str
    keep_output: bool = False
    kept_if_ran: bool = False


@dataclass(frozen=True, slots=True)
class CloseFifo:
    fifo: str
    remove_directory: bool = False
    kept_if_ran: bool = False


@dataclass(frozen=True, slots=True)
class StopProxy:
    kept_if_ran: bool = False


@dataclass(frozen=True, slots=True)
class FinishAudit:
    """The exit audit's end: each mount compared with its start snapshot."""

    kept_if_ran: bool = False


Undo = RemoveTree | RemoveFile | RemoveMadeDir | RemoveContainer | CloseFifo | StopProxy | FinishAudit


@dataclass(frozen=True, slots=True)
class Planned:
    """One action of a plan, where it goes and how it is undone."""

    name: str
    part: str
    action: Action
    needs: tuple[str, ...] = ()
    undo: Undo | None = None
    undo_after: tuple[str, ...] = ()

    @property
    def effect(self) -> bool:
        """Whether it changes the host or the engine (the boundary's line changes neither)."""
        return not isinstance(self.action, ShowBoundary)


def undo_of(action: Action) -> Undo | None:
    """What unwinding ``action`` does: the one place that pairs an action with its undo."""
    match action:
        case MakePrivateDir(path=path):
            return RemoveMadeDir(path)
        case MakeRunDir(path=path) | MakeGate(path=path):
            return RemoveTree(path)
        case WriteRecord(path=path):
            return RemoveFile(path, kept_if_ran=True)  # `dejima sessions` reads it after the session
        case ServeProxy():
            return StopProxy()
        case HoldGate(fifo=fifo):
            return CloseFifo(fifo, remove_directory=True)
        case SendConfiguration(fifo=fifo):
            return CloseFifo(fifo)
        case CreateContainer(spec=spec, adopt=adopt):
            return RemoveContainer(spec.name, keep_output=adopt)  # the filter is the one a prestart may adopt
        case StartAudit():
            return FinishAudit()
    return None  # images, caches of credentials, settings merged, the remembered filter: meant to stay


def planned(name: str, part: str, action: Action, needs: tuple[str, ...] = (),
            undo_after: tuple[str, ...] = ()) -> Planned:
    return Planned(name, part, action, needs, undo_of(action), undo_after)


def ruleset_digest(ruleset: str) -> str:
    """What the filter's ready line names: the ruleset it applied and verified."""
    import hashlib

    return hashlib.sha256(ruleset.encode()).hexdigest()[:16]


def pair_actions(plan: SessionPlan, ready_timeout: float, *, told: bool = True, audited: bool = True,
                 proxy: ServeProxy | None = None) -> tuple[Planned, ...]:
    """The container pair's start. The engine takes most of it to start the filter (its network above
    all), which then applies and verifies its ruleset; meanwhile the session's container is created
    (it joins the filter's namespaces only when started), the boundary told (``told``), the audit's start
    snapshot taken (``audited``) and, behind the gate, the session started. An interactive session's
    terminal is handed over only to a session that will run: its container is started once the gate is
    open (by the docker CLI). ``proxy``: the credential proxy, serving before either container exists.

    Undone: both containers at once (the filter stopped gently, its output kept; the session goes with
    it), the audit's end once the session's container is gone, the FIFOs and the proxy after them."""
    gated, interactive = plan.gate is not None, plan.interactive
    filter_name, session_name = plan.filter.name, plan.session.name
    ready = WaitReady(filter_name, ruleset_digest(plan.ruleset), ready_timeout)
    actions: list[Planned] = []
    if proxy is not None:
        actions.append(planned("proxy", PAIR, proxy, undo_after=("filter", "session")))
    if plan.gate is not None:
        actions.append(planned("gate", PAIR, HoldGate(plan.gate), undo_after=("session",)))
    actions.append(planned("filter", PAIR, CreateContainer(plan.filter, adopt=True)))
    configured = "filter"
    if plan.config_fifo is not None:
        # Only once the filter is created: a prestarted filter that was not adopted is gone, and cannot read it.
        actions.append(planned("filter-configuration", PAIR, SendConfiguration(plan.config_fifo, plan.filter_config),
                               ("filter",), undo_after=("filter",)))
        configured = "filter-configuration"
    actions.append(planned("filter-start", PAIR, StartContainer(filter_name), (configured,)))
    checked: tuple[str, ...] = ()
    if plan.filter.ports:  # the card says where each is reachable: the engine must have bound just that
        actions.append(planned("published-ports", PAIR, CheckPublished(filter_name, plan.filter.ports),
                               ("filter-start",)))
        checked = ("published-ports",)
    actions.append(planned("session", PAIR, CreateContainer(plan.session, takes_input=not interactive), ("filter",)))
    before: tuple[str, ...] = ()
    if told:
        actions.append(planned("boundary", PAIR, ShowBoundary(plan), ("filter",)))
        before = ("boundary",)
    if audited:
        actions.append(planned("audit-start", PAIR, StartAudit(plan), (*before, "filter"), undo_after=("session",)))
        before = (*before, "audit-start")
    actions.append(planned("filter-ready", PAIR, ready, ("filter-start",)))
    started: tuple[str, ...] = ()
    if not interactive:
        actions.append(planned("session-start", PAIR,
                               StartContainer(session_name, attached=True, explained_by=ready if gated else None),
                               ("session", *before, *(() if gated else ("filter-ready",)))))
        started = ("session-start",)
    if plan.gate is not None:
        actions.append(planned("open-gate", PAIR, ReleaseGate(plan.gate),
                               ("gate", "filter-ready", "session", *before, *started, *checked)))
    return tuple(actions)


def with_stdin(action: CreateContainer) -> CreateContainer:
    """The session's container with its stdin open: a command given input to read (`docker run -i`)."""
    return replace(action, spec=replace(action.spec, stdin=True))


def described(action: Action) -> str:
    """One line for ``action``, as ``--render`` prints it (values the session could read are not shown)."""
    match action:
        case RemoveLeftover(session_id=session_id, containers=containers):
            return f"remove session {session_id}'s containers {', '.join(containers)} (its launcher is gone)"
        case ProvideBase():
            return "pull the base image, or make it with debootstrap"
        case BuildImages(needs=needs):
            built = ", ".join(recipe.tag for recipe in needs.to_build)
            return f"build {built}" if built else f"images present: {', '.join(needs.tags)}"
        case MakePrivateDir(path=path, owner=owner):
            return f"make private directory {path} (uid {owner.uid})"
        case WriteResolvConf():
            return "write the sessions' resolv.conf (nameserver: the filter's resolver)"
        case ServeCredentials(routes=routes):
            return f"hand the sources read to routes {', '.join(routes.names)}; make the session CA"
        case WriteCredentialFiles(home=home):
            return f"write the decoy credentials and the CA bundle into {home}"
        case MergeHarnessSettings(home=home, files=files):
            return f"merge the harness's settings into {', '.join(f'{home}/{f}' for f in files)}"
        case MakeRunDir(path=path):
            return f"make the run directory {path} and the filter's configuration FIFO"
        case MakeGate(path=path):
            return f"make the start gate {path}"
        case WriteRecord(path=path, text=text):
            return f"write {path}: {text}"
        case RememberFilter(spec=spec):
            return f"remember {spec.name}'s create request for the next start"
        case ServeProxy(socket=socket, tls_socket=tls):
            return f"serve the credential proxy on {socket}" + (f" and {tls}" if tls else "")
        case HoldGate(fifo=fifo):
            return f"hold the gate {fifo} open"
        case CreateContainer(spec=spec, adopt=adopt):
            return f"create {spec.name} from {spec.image}" + (" (or adopt the prestarted one)" if adopt else "")
        case SendConfiguration(fifo=fifo):
            return f"send the filter its configuration through {fifo}"
        case StartContainer(name=name, attached=attached):
            return f"start {name}" + (", its output streamed" if attached else "")
        case CheckPublished(ports=ports):
            return f"check the engine bound {', '.join(port.shown for port in ports)}"
        case ShowBoundary():
            return "show the boundary"
        case StartAudit():
            return "take the exit audit's start snapshot"
        case WaitReady(name=name, digest=digest, timeout=timeout):
            return f"wait for {name}'s ready line naming ruleset={digest} (at most {timeout:g} s)"
        case ReleaseGate(fifo=fifo):
            return f"release the gate {fifo}: the command runs"


def described_undo(undo: Undo) -> str:
    match undo:
        case RemoveTree(path=path):
            return f"remove {path}"
        case RemoveFile(path=path):
            return f"remove {path}"
        case RemoveMadeDir(path=path):
            return f"remove {path} if this start made it"
        case RemoveContainer(name=name, keep_output=keep):
            return f"{'stop gently, keep the output, ' if keep else ''}remove {name}"
        case CloseFifo(fifo=fifo):
            return f"close {fifo}"
        case StopProxy():
            return "stop the proxy"
        case FinishAudit():
            return "finish the exit audit"


def format_actions(actions: Sequence[Planned]) -> str:
    """The start's actions as ``--render`` prints them, part by part: each with what it waits for and its undo."""
    lines = ["## Start actions (each once what it needs is applied, independent ones at once; the teardown, on",
             "## success, failure or a signal, does the applied ones' undos: the pair's, then the preparation's)"]
    part = ""
    for action in actions:
        if action.part != part:
            part = action.part
            lines.append(part)
        lines.append(f"  {action.name:<22} {described(action.action)}")
        after = f"after {', '.join(action.needs)}" if action.needs else ""
        undo = ""
        if action.undo is not None:
            undo = f"undo: {described_undo(action.undo)}" + (" (kept once the session ran)" if action.undo.kept_if_ran
                                                              else "")
            undo += f", after undoing {', '.join(action.undo_after)}" if action.undo_after else ""
        if after or undo:
            lines.append(f"  {'':<22} {'; '.join(part for part in (after, undo) if part)}")
    return "\n".join(lines)
