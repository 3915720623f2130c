"""dejima as a library: plan and render a session, run a command in one, change a running session's
grants, read what sessions left (violations, the credential ledger, audit findings), and manage sessions,
images, settings and manifests (what `dejima sessions`, `stop`, `clean`, `doctor`, `images`, `settings` and
`manifests` do).

    from dejima import api

    request = api.Request("/home/me/repos/project", ["make", "test"], allow=["pypi.org"])
    print(api.render(request).text)          # what `dejima PATH --render` prints: no engine, no secret read
    with api.Session(request) as session:    # the start's steps: images, credentials, the plan
        status = session.run()               # the container pair, the command's output streamed, its status
    api.violations(session.session_id)       # what the session was refused

Everything in ``__all__`` is the public surface (docs/api.md); anything else of dejima is private.
Failures are dejima's own typed errors (``dejima.errors``, re-exported here), the ones the command line
turns into its messages and exit statuses: ``InputError`` (bad input: exit 2), ``SessionError``,
``EngineError``... each with a message, a hint and a kebab-case ``reference``.

Importing this module costs next to nothing: each function imports what it uses when it is called
(a session's start imports as little as it can before its filter is started), and the types named
in ``__all__`` from the layers below are loaded when first asked for.
"""

from __future__ import annotations

import codecs
import io
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO, TYPE_CHECKING, Any, Literal

from dejima.errors import (
    DejimaError,
    DiagnosticError,
    EngineError,
    ExitStatus,
    FilterError,
    GrantRefused,
    ImageError,
    InputError,
    SessionEnded,
    SessionError,
    SettingsError,
    UsageError,
)

if TYPE_CHECKING:
    from dejima.adapters.control_client import RunningSession
    from dejima.adapters.findings import FindingStore
    from dejima.adapters.findings import Stored as Finding
    from dejima.adapters.image_builds import Base as BaseImage
    from dejima.core.manifest import KINDS as MANIFEST_KINDS
    from dejima.core.manifest import Manifest
    from dejima.core.plan import SessionPlan
    from dejima.core.resolve import Resolved
    from dejima.core.settings import Settings
    from dejima.orchestration.doctor import Check as DoctorCheck
    from dejima.orchestration.manage_sessions import SessionInfo
    from dejima.orchestration.prestart import Prestarted
    from dejima.orchestration.session import Sink
    from dejima.orchestration.session_reporter import SessionReporter as Reporter
    from dejima.orchestration.start import Prepared
    from dejima.orchestration.start_plan import StartPlan
    from dejima.orchestration.start_request import Options

__all__ = [
    # plans
    "Request", "Rendered", "render", "render_kubernetes", "load_settings", "Settings", "SessionPlan", "StartPlan",
    # sessions
    "Session", "run", "OutputTarget", "Reporter", "QuietReporter",
    # live grants
    "RunningSession", "running_sessions", "running_session", "live", "grant", "revoke", "persist_grants",
    "check_grant_entry", "check_duration",
    # records
    "recorded_sessions", "violations", "ledger", "Finding", "findings", "findings_by_id", "acknowledge", "restore",
    # management
    "SessionInfo", "sessions", "stop", "clean", "DoctorCheck", "doctor",
    "ImageInfo", "BaseImage", "images", "build_images", "bootstrap_base", "prune_images",
    "settings_path", "settings_reference",
    "ManifestInfo", "Manifest", "MANIFEST_KINDS", "manifests", "manifest", "manifest_reference",
    # errors
    "DejimaError", "DiagnosticError", "InputError", "SettingsError", "UsageError", "EngineError", "ImageError",
    "SessionError", "FilterError", "SessionEnded", "GrantRefused", "ExitStatus",
]


def __getattr__(name: str) -> object:
    """The types of ``__all__`` that live in the layers below, imported when first asked for."""
    if name == "Settings":
        from dejima.core.settings import Settings

        return Settings
    if name == "SessionPlan":
        from dejima.core.plan import SessionPlan

        return SessionPlan
    if name == "StartPlan":
        from dejima.orchestration.start_plan import StartPlan

        return StartPlan
    if name == "Reporter":
        from dejima.orchestration.session_reporter import SessionReporter

        return SessionReporter
    if name == "RunningSession":
        from dejima.adapters.control_client import RunningSession

        return RunningSession
    if name == "Finding":
        from dejima.adapters.findings import Stored

        return Stored
    if name == "SessionInfo":
        from dejima.orchestration.manage_sessions import SessionInfo

        return SessionInfo
    if name == "DoctorCheck":
        from dejima.orchestration.doctor import Check

        return Check
    if name == "BaseImage":
        from dejima.adapters.image_builds import Base

        return Base
    if name in ("Manifest", "MANIFEST_KINDS"):
        from dejima.core import manifest

        return manifest.Manifest if name == "Manifest" else manifest.KINDS
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


# --- plans -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Request:
    """What a session on a workspace asks for: the command line's choices, as data.

    ``command``: what runs in the session (None: an interactive shell on this terminal, as `dejima PATH`).
    ``harness``, ``backend``, ``workflows``, ``forges``: the manifests chosen on top of the detected ones
    (``--harness``...). ``allow``: egress entries added to the settings' (``--allow``); ``allow_special``: the
    overrides that let an entry reach a special place (``--allow-special``); ``dns_upstreams``: the resolvers the
    filter forwards to (``--dns-upstream``). ``settings``: a ``Settings`` (``load_settings(path)``); None reads
    the user's settings file (``$DEJIMA_SETTINGS``, else ``$XDG_CONFIG_HOME/dejima/settings.toml``).
    Bad values are refused with the command line's words (``InputError`` naming the flag).
    """

    workspace: str | os.PathLike[str]
    command: Sequence[str] | None = None
    harness: str = "shell"
    backend: str | None = None
    workflows: Sequence[str] = ()
    forges: Sequence[str] = ()
    allow: Sequence[str] = ()
    allow_special: Sequence[str] = ()
    dns_upstreams: Sequence[str] = ()
    as_root: bool = False
    accept_findings: bool = False
    settings: Settings | None = None

    def __post_init__(self) -> None:
        for name in ("workflows", "forges", "allow", "allow_special", "dns_upstreams"):
            value = getattr(self, name)
            if isinstance(value, str):  # a lone string would be read as its characters
                raise UsageError(f"Request.{name} is a string, not a list of them ({value!r})",
                                 hint=f"write {name}=[{value!r}]")
            object.__setattr__(self, name, tuple(value))
        if isinstance(self.command, str):
            raise UsageError(f"Request.command is a string, not a list of arguments ({self.command!r})",
                             hint=f"write command=[{self.command!r}], or command=['sh', '-c', {self.command!r}]")
        if self.command is not None:
            if not self.command:
                raise UsageError("Request.command is empty", hint="give the command to run, or None for a shell")
            object.__setattr__(self, "command", tuple(self.command))


@dataclass(frozen=True, slots=True)
class Rendered:
    """A session's plan, made by the start's own steps without applying them (``render``)."""

    plan: SessionPlan
    steps: tuple[tuple[str, str, tuple[str, ...], bool], ...]  # (part, step, what it needs, it changes something)
    text: str  # what `dejima PATH --render` prints: the plan and the start's steps
    start: StartPlan  # the whole start as data (its ``session`` is ``plan``): what a real start applies


def load_settings(path: str | os.PathLike[str] | None = None) -> Settings:
    """The settings in the file at ``path``, strictly validated (``SettingsError`` names the key and the fix);
    None: the user's settings file, or the defaults when it is absent."""
    from dejima.adapters import host

    return host.load_settings(Path(path), required=True) if path is not None else host.load_settings()


@dataclass(frozen=True, slots=True)
class _Inputs:
    workspace: Path
    command: tuple[str, ...] | None
    resolved: Resolved
    settings: Settings
    options: Options


def _inputs(request: Request, reporter: Reporter) -> _Inputs:
    """The request checked in the command line's order: flags, settings, workspace, manifests."""
    from dejima.adapters import host
    from dejima.core.kinds import ALLOW_ENTRY, RESOLVER
    from dejima.core.schema import check_flag
    from dejima.orchestration import start_request

    upstream = tuple(check_flag(RESOLVER, text, "--dns-upstream") for text in request.dns_upstreams)
    allow = tuple(check_flag(ALLOW_ENTRY, text, "--allow") for text in request.allow)
    allow_special = tuple(check_flag(ALLOW_ENTRY, text, "--allow-special") for text in request.allow_special)
    settings = request.settings if request.settings is not None else host.load_settings()
    workspace = start_request.validate_workspace(os.fspath(request.workspace))
    selection = start_request.Selection(request.harness, request.backend, tuple(request.workflows),
                                        tuple(request.forges))
    resolved = start_request.resolve_manifests(workspace, selection, reporter)
    options = start_request.Options(allow, allow_special, upstream, request.as_root, request.accept_findings)
    command = tuple(request.command) if request.command is not None else None
    return _Inputs(workspace, command, resolved, settings, options)


def render(request: Request, reporter: Reporter | None = None) -> Rendered:
    """The plan a start on ``request`` would run, and its text as `dejima PATH --render` prints it. Needs no
    engine and reads no secret (credential sources are named, not read); the session id is ``render``."""
    from dejima.orchestration import start
    from dejima.ui.views import format_plan, format_steps

    reporter = reporter if reporter is not None else QuietReporter()
    given = _inputs(request, reporter)
    planned = start.render_start(given.workspace, given.command, given.resolved, given.settings, given.options,
                                 reporter)
    outline = planned.outline()
    return Rendered(planned.session, outline, format_plan(planned.session) + "\n\n" + format_steps(outline), planned)


def render_kubernetes(request: Request, kind: Literal["Sandbox", "Pod"] = "Sandbox",
                      reporter: Reporter | None = None) -> str:
    """The session as objects for `kubectl apply` (YAML), as `dejima PATH --render kubernetes` (a ``Sandbox`` of
    agent-sandbox) or ``--render pod`` (a plain ``Pod``) prints it: docs/kubernetes.md. Needs no engine and
    reads no secret; the settings' ``[kubernetes]`` section names the images and the cluster's DNS."""
    from dejima.orchestration.kubernetes_render import render_kubernetes as rendered

    reporter = reporter if reporter is not None else QuietReporter()
    given = _inputs(request, reporter)
    return rendered(given.workspace, given.command, given.resolved, given.settings, given.options, reporter, kind)


# --- sessions --------------------------------------------------------------------------------------------------


OutputTarget = Callable[[bytes], object] | IO[bytes] | IO[str] | None
"""Where a session's stdout or stderr goes: a callable given each chunk (bytes) as it comes, a binary file (each
chunk written and flushed), a text file (decoded as UTF-8, bad bytes replaced), or None: this process's own."""


def _sink(target: OutputTarget) -> Sink | None:
    if target is None:
        return None
    write = getattr(target, "write", None)
    if write is None:
        if not callable(target):
            raise UsageError(f"an output target must be a file or a callable, not {type(target).__name__}",
                             hint="pass e.g. sys.stdout, a file opened 'wb', or a function taking bytes")
        call: Callable[[bytes], object] = target

        def called(chunk: bytes) -> None:
            call(chunk)

        return called
    flush = getattr(target, "flush", None)
    if isinstance(target, io.TextIOBase):
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

        def text(chunk: bytes) -> None:
            write(decoder.decode(chunk))
            if flush is not None:
                flush()

        return text

    def binary(chunk: bytes) -> None:
        write(chunk)
        if flush is not None:
            flush()

    return binary


class Session:
    """One command in one session, as a context manager that always cleans up::

        with api.Session(api.Request(workspace, ["make", "test"])) as session:
            status = session.run(stdout=sys.stdout, stderr=on_chunk)

    Entering applies the start's steps (stale sessions removed, images built when missing, credentials read,
    the plan made, the session's run directory, gate and record): ``plan`` and ``session_id`` are known from then
    on, and nothing runs yet. ``run`` starts the container pair, streams the command's output, and returns its
    exit status once both containers are removed and the exit audit is done (128+N when the command ended on
    signal N). Leaving without ``run`` undoes the start's steps; leaving after it has nothing left to remove.
    A session runs its command once. ``reporter`` gets what the command line would print (default: kept by a
    ``QuietReporter``, ``reporter.messages``); ``prestarted`` is the command line's filter started before the plan.
    """

    def __init__(self, request: Request, *, reporter: Reporter | None = None,
                 prestarted: Prestarted | None = None) -> None:
        self.request = request
        self.reporter: Reporter = reporter if reporter is not None else QuietReporter()
        self._prestarted = prestarted
        self._prepared: Prepared | None = None
        self._ran = False
        self._closed = False

    def __enter__(self) -> Session:
        self.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()

    def start(self) -> None:
        """Apply the start's steps (entering the ``with`` block does); a failure undoes what they did."""
        if self._prepared is not None or self._closed:
            raise UsageError("this session was started already", hint="make a new Session for another start")
        from dejima.adapters.runtime import connect
        from dejima.orchestration import start

        given = _inputs(self.request, self.reporter)
        self._prepared = start.prepare_session(given.workspace, given.command, given.resolved, given.settings,
                                               connect(), self.reporter, given.options, self._prestarted)

    @property
    def plan(self) -> SessionPlan:
        return self._started().plan

    @property
    def session_id(self) -> str:
        """The session's id: what `dejima violations`, `dejima ledger`, ``grant`` and ``violations`` take."""
        return self._started().plan.session_id

    def _started(self) -> Prepared:
        if self._prepared is None:
            raise UsageError("this session has not started", hint="use it in a `with` block, or call start() first")
        return self._prepared

    def run(self, *, stdout: OutputTarget = None, stderr: OutputTarget = None) -> int:
        """Run the command to its end; its stdout and stderr go to ``stdout`` and ``stderr`` as they come (an
        interactive session's go to this terminal). Returns its exit status. Signals this process gets while
        ``run`` waits on the main thread are passed to the command (the status is then 128+N)."""
        from dejima.orchestration import start
        from dejima.orchestration.session import Output

        prepared = self._started()
        if self._ran or self._closed:
            raise UsageError("a session runs its command once", hint="make a new Session to run another command")
        self._ran = True
        return start.run_session(prepared, self.reporter, Output(_sink(stdout), _sink(stderr)))

    def close(self) -> None:
        """Undo a start that never ran (its run directory, gate and record); a session that ran has removed its
        containers and run directory already. Called on leaving the ``with`` block; calling it again does nothing."""
        if self._closed:
            return
        self._closed = True
        prepared = self._prepared
        if prepared is None or self._ran:
            return
        from dejima.adapters.session_dirs import clear_run_dir

        try:
            if prepared.unwind is not None:
                prepared.unwind()
        finally:
            clear_run_dir(prepared.plan.session_id)


def run(request: Request, *, stdout: OutputTarget = None, stderr: OutputTarget = None,
        reporter: Reporter | None = None) -> int:
    """Start a session on ``request``, run its command to its end and clean up; returns the exit status."""
    with Session(request, reporter=reporter) as session:
        return session.run(stdout=stdout, stderr=stderr)


@dataclass
class _Progress:
    lines: list[str] = field(default_factory=list)

    def line(self, text: str) -> None:
        self.lines.append(text)
        del self.lines[:-200]


class QuietReporter:
    """A ``Reporter`` that prints nothing: it keeps what a session reports in ``messages``, (kind, text) pairs in
    order (kinds: info, warning, error, notice, card, step, boundary, findings), and hands each to ``on_message``
    when given. The text is the session's as it is, not escaped: show it as data."""

    def __init__(self, on_message: Callable[[str, str], None] | None = None) -> None:
        self.messages: list[tuple[str, str]] = []
        self.on_message = on_message

    def _keep(self, kind: str, text: str) -> None:
        self.messages.append((kind, text))
        if self.on_message is not None:
            self.on_message(kind, text)

    def info(self, message: str) -> None:
        self._keep("info", message)

    def warn(self, message: str) -> None:
        self._keep("warning", message)

    def error(self, exc: DiagnosticError) -> None:
        self._keep("error", str(exc))

    def notice(self, message: str) -> None:
        self._keep("notice", message)

    def card(self, title: str, lines: list[str]) -> None:
        self._keep("card", "\n".join([title, *lines]))

    @contextmanager
    def step(self, title: str, log: str | None = None) -> Iterator[_Progress]:
        self._keep("step", title if log is None else f"{title} (log: {log})")
        yield _Progress()

    def boundary(self, plan: SessionPlan) -> None:
        from dejima.orchestration.start import boundary_line

        self._keep("boundary", boundary_line(plan))

    def findings_left(self, found: Sequence[Finding]) -> None:
        self._keep("findings", "\n".join(f"{s.id} {s.finding.severity} {s.finding.path}" for s in found))


# --- live grants -----------------------------------------------------------------------------------------------


def running_sessions(directory: str | os.PathLike[str] | None = None) -> list[RunningSession]:
    """The sessions running on this host (of any scope) whose filter takes grants, oldest id first; with
    ``directory``: those whose workspace is it or holds it. Needs no engine."""
    from dejima.adapters import control_client

    sessions = control_client.running_sessions()
    return sessions if directory is None else control_client.sessions_for(Path(directory), sessions)


def running_session(session_id: str) -> RunningSession:
    """The running session of that id; ``UsageError`` when none runs (it ended, or never was)."""
    match = [s for s in running_sessions() if s.session_id == session_id]
    if not match:
        raise UsageError(f"no running session {session_id!r}",
                         hint="`dejima sessions` lists them; a session that ended takes no grants")
    return match[0]


def _running(session: str | RunningSession) -> RunningSession:
    return running_session(session) if isinstance(session, str) else session


def _send(session: RunningSession, message: dict[str, object]) -> dict[str, Any]:
    from dejima.adapters import control_client

    answer = control_client.send(session, message)
    if not answer.get("ok"):
        raise GrantRefused(f"session {session.session_id} refused: {answer.get('error', 'no reason given')}",
                           hint="nothing was changed")
    return answer


def check_grant_entry(text: str, name: str = "the entry") -> str:
    """A live grant's entry (a name, *.wildcard or IPv4 address, with an optional :port), checked as
    `dejima-allow` checks it, in its canonical form; ``InputError`` naming ``name`` when it is not one."""
    from dejima.core.kinds import GRANT_ENTRY
    from dejima.core.schema import check_flag

    checked: str = check_flag(GRANT_ENTRY, text, name)
    return checked


def check_duration(text: str, name: str = "duration") -> int:
    """A grant's duration (90s, 30m, 2h, 1d; at most 30 days) in seconds; ``InputError`` naming ``name``."""
    from dejima.core import grants
    from dejima.core.kinds import duration
    from dejima.core.schema import check_flag

    seconds: int = check_flag(duration(grants.MAX_SECONDS), text, name)
    return seconds


def live(session: str | RunningSession) -> dict[str, Any]:
    """A running session's live grants and the names it was refused, as its filter lists them:
    ``{"grants": [{"entry", "since", "expires", "reason"}...], "denials": [{"name", "count", "last", "reason",
    "grantable"}...]}`` (times are Unix seconds; ``expires`` None: until the session ends; denials newest first)."""
    from dejima.core import grants

    return _send(_running(session), grants.list_message())


def grant(session: str | RunningSession, entries: Sequence[str], *, duration: str | None = None,
          reason: str = "") -> list[str]:
    """Grant ``entries`` to a running session (its next connection gets through); for ``duration`` (90s, 30m...)
    or until the session ends. Returns the entries granted, canonical. ``GrantRefused`` when its filter refuses
    (a name on the deny list), ``SessionEnded`` when it ended first: either way nothing changed."""
    from dejima.core import grants

    checked = [check_grant_entry(entry) for entry in entries]
    seconds = check_duration(duration) if duration is not None else None
    granted: list[str] = _send(_running(session), grants.grant_message(checked, seconds, reason))["granted"]
    return granted


def revoke(session: str | RunningSession, entries: Sequence[str], *,
           reason: str = "revoked through dejima.api") -> list[str]:
    """Take grants back: new connections fail, open ones are cut. Returns the entries revoked."""
    from dejima.core import grants

    checked = [check_grant_entry(entry) for entry in entries]
    revoked: list[str] = _send(_running(session), grants.revoke_message(checked, reason))["revoked"]
    return revoked


def persist_grants(session: str | RunningSession, entries: Sequence[str]) -> Path:
    """Add ``entries`` to the user's policy for the session's workspace (comments and order kept), so the next
    session there has them from the start; returns the policy file's path."""
    from dejima.adapters import projects

    running = _running(session)
    return projects.persist_allow(Path(running.workspace), [check_grant_entry(entry) for entry in entries])


# --- records ---------------------------------------------------------------------------------------------------


def recorded_sessions() -> list[str]:
    """The ids of the sessions that have a violations record, sorted."""
    from dejima.adapters import session_dirs

    return session_dirs.known_sessions()


def violations(session_id: str) -> list[dict[str, Any]]:
    """What a session was refused (and the grants made in it), as `dejima violations SESSION --json` prints
    them: one dict per record, in order; [] when none was recorded."""
    from dejima.adapters import session_dirs

    return session_dirs.read(session_id)


def ledger(session_id: str) -> list[dict[str, Any]]:
    """The requests a session's credential proxy carried (never a secret), as `dejima ledger SESSION --json`
    prints them; ``UsageError`` when there is no such session on record."""
    from dejima.adapters.session_dirs import ledger_path, session_on_record
    from dejima.proxy.records import read_records

    if not session_on_record(session_id):
        raise UsageError(f"no session {session_id!r} on record", hint="`dejima violations` lists the sessions")
    return [dict(record) for record in read_records(ledger_path(session_id))]


@contextmanager
def _store() -> Iterator[FindingStore]:
    from dejima.adapters.findings import FindingStore

    store = FindingStore()
    try:
        yield store
    finally:
        store.close()


def _workspace(workspace: str | os.PathLike[str] | None) -> str | None:
    return os.path.abspath(os.path.expanduser(os.fspath(workspace))) if workspace is not None else None


def findings(workspace: str | os.PathLike[str] | None = None, *, reviewed: bool = False,
             minimum: str = "low") -> list[Finding]:
    """The exit audit's findings (of ``workspace``, or every one), oldest first: the unreviewed ones of severity
    ``minimum`` (info, low, medium, high, critical) or worse, as `dejima-audit list` shows them; ``reviewed``:
    the acknowledged ones too."""
    from dejima.core.audit import SEVERITIES, rank

    if minimum not in SEVERITIES:
        raise UsageError(f"no severity {minimum!r}", hint=f"one of: {', '.join(SEVERITIES)}")
    with _store() as store:
        found = store.findings(_workspace(workspace), include_acked=reviewed)
    return [s for s in found if rank(s.finding.severity) >= rank(minimum)]


def _known(store: FindingStore, ids: Sequence[int]) -> list[Finding]:
    wanted = store.get(list(ids))
    missing = sorted(set(ids) - {s.id for s in wanted})
    if missing:
        raise UsageError(f"no finding {', '.join(map(str, missing))}", hint="dejima-audit list --all shows every id")
    return wanted


def findings_by_id(ids: Sequence[int]) -> list[Finding]:
    """Findings by id, with their file's start and end states (``state``), as `dejima-audit show` reads them;
    ``UsageError`` naming the ids that are no finding."""
    with _store() as store:
        return _known(store, ids)


def acknowledge(ids: Sequence[int] | None, note: str, *, workspace: str | os.PathLike[str] | None = None
                ) -> list[Finding]:
    """Record the review of unreviewed findings, bound to their content (a later change to the file is a new
    finding): by id, or every one (``ids`` None) of ``workspace`` or of all. Returns those acknowledged (an id
    reviewed already is not one)."""
    if not note.strip():
        raise UsageError("the note is empty", hint="say why the change is fine")
    with _store() as store:
        if ids is not None:
            _known(store, ids)
        return store.ack(list(ids) if ids is not None else None, note,
                         _workspace(workspace) if ids is None else None)


def restore(ids: Sequence[int], *, force: bool = False, note: str = "restored through dejima.api",
            on_restored: Callable[[str], None] | None = None) -> list[str]:
    """Put each finding's file back as it was when its session started (or remove what the session made), never
    following a link, and acknowledge the findings on that file with ``note``. A file changed again since the
    audit is refused unless ``force``. Returns what was done, in words, one per file (each also handed to
    ``on_restored`` as it is done)."""
    from dejima.adapters.restore import restore as restore_file

    done_paths: set[tuple[str, str]] = set()
    done: list[str] = []
    with _store() as store:
        for stored in _known(store, ids):
            where = (stored.root, stored.finding.path)
            if where in done_paths:
                continue  # another finding on the same file: restoring it once covers both
            said = restore_file(stored, force=force)
            done_paths.add(where)
            same_path = [s.id for s in store.findings(stored.workspace) if (s.root, s.finding.path) == where]
            store.ack(same_path or [stored.id], f"{note}: {said}")
            done.append(said)
            if on_restored is not None:
                on_restored(said)
    return done


# --- management ------------------------------------------------------------------------------------------------
# What `dejima sessions`, `stop`, `clean`, `doctor`, `images`, `settings` and `manifests` do. The engine's functions
# work on the sessions and images of this installation's scope (``$DEJIMA_SCOPE``), as the command line does.


def sessions() -> list[SessionInfo]:
    """The sessions of this scope on the engine, by id, as `dejima sessions --json` lists them: ``SessionInfo``
    (``session_id``, ``workspace``, ``status``: running, starting (one container so far) or stale (its launcher is
    gone), ``containers``: short ids, ``launcher_pid``; ``.to_json()``: the command line's object)."""
    from dejima.adapters import host
    from dejima.adapters.runtime import connect
    from dejima.orchestration import manage_sessions

    runtime = connect()
    return manage_sessions.list_sessions(runtime, host.scope())


def stop(session_id: str) -> list[str]:
    """Stop a session of this scope and remove its containers (the filter stopped gently, its records kept), as
    `dejima stop SESSION`; returns the containers' ids. ``UsageError`` when no such session has a container."""
    from dejima.adapters import host
    from dejima.adapters.runtime import connect
    from dejima.orchestration import manage_sessions

    runtime = connect()
    return manage_sessions.stop_session(runtime, host.scope(), session_id)


def clean(*, everything: bool = False, reporter: Reporter | None = None) -> int:
    """Remove the sessions of this scope whose launcher is gone (their filters' refusals recorded first), as `dejima
    clean`; ``everything``: every session of this scope, running ones too (`--all`). Each removal is reported to
    ``reporter``. Returns how many sessions were removed. Per-project home directories are kept."""
    from dejima.adapters import host
    from dejima.adapters.runtime import connect
    from dejima.orchestration import manage_sessions

    runtime = connect()
    return manage_sessions.clean(runtime, host.scope(), _reporter(reporter), everything=everything)


def _reporter(reporter: Reporter | None) -> Reporter:
    return reporter if reporter is not None else QuietReporter()


def _settings(settings: Settings | None) -> Settings:
    from dejima.adapters import host

    return settings if settings is not None else host.load_settings()


def doctor(*, build: bool = False, settings: Settings | None = None,
           reporter: Reporter | None = None) -> list[DoctorCheck]:
    """Whether this machine holds the boundary, as `dejima doctor --json`: ``DoctorCheck`` (``name``, ``ok``,
    ``detail``) in order: the engine, the docker CLI, the images, a decoy an unfiltered container reaches, nftables
    in a filter, and that a real session cannot reach that decoy. A failed check stops the ones after it (an
    unreachable engine is a failed check, not an error); all passed when every ``ok`` is true. ``build``: build (or
    bootstrap) missing images first, reported to ``reporter``. Traffic goes only to containers the doctor starts."""
    from dejima.orchestration.doctor import run_doctor

    return run_doctor(_settings(settings), _reporter(reporter), build=build)


@dataclass(frozen=True, slots=True)
class ImageInfo:
    """An image dejima made, as the engine holds it: ``id`` (``sha256:...``), ``role`` (filter, session, base...),
    ``tags`` (none when untagged) and ``size`` in bytes."""

    id: str
    role: str
    tags: tuple[str, ...]
    size: int


def images() -> list[ImageInfo]:
    """The images dejima made on the engine (of any scope), as `dejima images list` shows them."""
    from dejima.adapters.runtime import connect
    from dejima.core import labels

    return [ImageInfo(image["Id"], (image.get("Labels") or {}).get(labels.ROLE, "?"),
                      tuple(image.get("RepoTags") or ()), int(image.get("Size", 0)))
            for image in connect().images({labels.ROLE: ""})]


def build_images(*, force: bool = False, settings: Settings | None = None, reporter: Reporter | None = None,
                 on_built: Callable[[str, str], None] | None = None) -> dict[str, str]:
    """Make sure the filter and session images of ``settings`` (None: the user's) exist, building what is missing
    (``force``: rebuild them) on the base (pulled, or made with debootstrap when the settings allow it), as `dejima
    images build`; progress goes to ``reporter``. Returns each role's tag (filter, then session), each also handed
    to ``on_built(role, tag)`` once it is there."""
    from dejima.adapters import host
    from dejima.adapters.image_builds import ensure_image, recipes, resolve_base
    from dejima.adapters.runtime import connect

    runtime = connect()
    chosen, said = _settings(settings), _reporter(reporter)
    built: dict[str, str] = {}
    for recipe in recipes(resolve_base(runtime, chosen, said), chosen, host.identity()):
        built[recipe.role] = ensure_image(runtime, recipe, said, force=force)
        if on_built is not None:
            on_built(recipe.role, built[recipe.role])
    return built


def bootstrap_base(*, settings: Settings | None = None, reporter: Reporter | None = None) -> BaseImage:
    """Make the Debian base with debootstrap now (needs root), as `dejima images bootstrap`: ``BaseImage`` (``ref``,
    ``id``, ``bootstrapped``). Its progress goes to ``reporter``, the whole log to the state directory's logs/."""
    from dejima.adapters.image_builds import make_bootstrap_base
    from dejima.adapters.runtime import connect

    runtime = connect()
    return make_bootstrap_base(runtime, _settings(settings), _reporter(reporter))


def prune_images(*, settings: Settings | None = None, reporter: Reporter | None = None) -> tuple[int, int]:
    """Remove the filter and session images the current code and ``settings`` no longer use, as `dejima images
    prune` (base images are kept). Returns (removed, kept because a container still uses them); each image kept is
    reported to ``reporter``."""
    from dejima.adapters import host
    from dejima.adapters.image_builds import prune_images as prune
    from dejima.adapters.runtime import connect

    runtime = connect()
    return prune(runtime, _settings(settings), host.identity(), _reporter(reporter))


def settings_path() -> Path:
    """The user's settings file: ``$DEJIMA_SETTINGS``, else ``$XDG_CONFIG_HOME/dejima/settings.toml`` (it may be
    absent: the defaults then), as `dejima settings path` prints it."""
    from dejima.adapters import host

    return host.settings_path()


def settings_reference() -> str:
    """Every settings key with its kind, default and help, as `dejima settings reference` prints it (Markdown)."""
    from dejima.core.settings import render_settings_reference

    return render_settings_reference()


@dataclass(frozen=True, slots=True)
class ManifestInfo:
    """A manifest file as `dejima manifests list` shows it: ``kind`` (one of ``MANIFEST_KINDS``), ``name``,
    ``source`` (the file), ``description`` (None for a broken one), ``overrides`` (the shipped file a user file
    replaces, if it does) and ``error`` (why a broken one is refused: an ``InputError`` with its hint; None when it is
    sound)."""

    kind: str
    name: str
    source: str
    description: str | None
    overrides: str | None
    error: InputError | None

    @property
    def ref(self) -> str:
        """``KIND/NAME``, as `dejima manifests show` takes it."""
        return f"{self.kind}/{self.name}"

    @property
    def broken(self) -> bool:
        return self.error is not None


def manifests() -> list[ManifestInfo]:
    """Every forge, workflow, harness and backend manifest, shipped and the user's (``$XDG_CONFIG_HOME/dejima/
    <kind>/``, which override shipped ones by name), broken ones included, by kind and name. A broken one stops only
    the sessions that would use it."""
    from dejima.adapters.manifest_files import load_catalog

    catalog = load_catalog()
    found = [ManifestInfo(m.kind, m.name, m.source, m.description, catalog.overridden.get((m.kind, m.name)), None)
             for m in catalog.manifests.values()]
    found += [ManifestInfo(b.kind, b.name, b.source, None, catalog.overridden.get((b.kind, b.name)), b.error)
              for b in catalog.broken.values()]
    return sorted(found, key=lambda info: (info.kind, info.name))


def manifest(kind: str, name: str) -> Manifest:
    """One manifest as sessions use it (its domains, environment, credential routes, image layers), as `dejima
    manifests show KIND/NAME`; a user's file overrides the shipped one of its name. A broken one raises its error (an
    ``InputError``), as does a name that is no manifest; ``UsageError`` for a kind not in ``MANIFEST_KINDS``."""
    from dejima.adapters.manifest_files import load_catalog
    from dejima.core.manifest import KINDS

    if kind not in KINDS:
        raise UsageError(f"no manifest kind {kind!r}", hint=f"kinds: {', '.join(KINDS)}")
    return load_catalog().get(kind, name)


def manifest_reference() -> str:
    """Every key of the manifest format, as `dejima manifests reference` prints it (Markdown)."""
    from dejima.core.manifest import render_manifest_reference

    return render_manifest_reference()
