"""The one interpreter of a start's actions (orchestration/actions.py) and the log of what it applied.

    executor = Executor(runtime, reporter, observe, sources=..., prestarted=..., streams=...)
    executor.run(plan.preparation)      # each action once what it needs is applied, independent ones at once
    executor.run(plan.pair)             # a later batch: its undos are done before the earlier batch's
    ...the session runs...
    executor.unwind()                   # the teardown: the applied log undone

An action that raises stops the run: no further action starts, the running ones are waited for, the
whole log is unwound (every applied action's undo, each after its ``undo_after``), then the error is
raised; a signal's exception in the calling thread is a failure like any other. ``unwind`` runs every
undo even when one fails (the first failure is raised at the end) and defers further signals meanwhile.
The observer gets one event per action about to be applied (``Applying``) and per undo ended (``Undone``),
and what the start tells:
notes (``Note``), the boundary (``Boundary``), the filter's output once it stopped (``FilterOutput``).
An observer that raises on ``Applying`` stops the start like a failing action.
"""

from __future__ import annotations

import queue
import shutil
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import IO, TYPE_CHECKING, TextIO

from dejima.adapters.fifo import Gate, HeldFifo
from dejima.adapters.runtime import Runtime
from dejima.core.labels import SESSION as SESSION_LABEL
from dejima.core.plan import SessionPlan
from dejima.errors import EngineError, FilterError, SessionError
from dejima.filter import FAILED, READY, VIOLATION
from dejima.orchestration.actions import (
    Action,
    BuildImages,
    CheckPublished,
    CloseFifo,
    CreateContainer,
    FinishAudit,
    HoldGate,
    MakeGate,
    MakePrivateDir,
    MakeRunDir,
    MergeHarnessSettings,
    Planned,
    ProvideBase,
    ReleaseGate,
    RememberFilter,
    RemoveContainer,
    RemoveFile,
    RemoveLeftover,
    RemoveMadeDir,
    RemoveTree,
    SendConfiguration,
    ServeCredentials,
    ServeProxy,
    ShowBoundary,
    StartAudit,
    StartContainer,
    StopProxy,
    Undo,
    WaitReady,
    WriteCredentialFiles,
    WriteRecord,
    WriteResolvConf,
    with_stdin,
)
from dejima.orchestration.background import Background
from dejima.orchestration.session_reporter import SessionReporter

if TYPE_CHECKING:
    from dejima.adapters.image_builds import Base
    from dejima.core.route_plan import RoutesPlan
    from dejima.orchestration import exit_audit
    from dejima.orchestration.prestart import Prestarted
    from dejima.proxy.runner import ProxyThread
    from dejima.proxy.server import ProxyConfig
    from dejima.proxy.sources import CredentialSource

# `dejima stop` asks the session's launcher with a signal of its own (manage_sessions.stop_session): the launcher
# ends the session as on SIGTERM (the command gets stop_timeout seconds, the records and the audit are kept) and
# can say why, whoever the stopping user is.
STOP_SIGNAL = signal.SIGUSR1
FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, STOP_SIGNAL)
FILTER_STOP_SECONDS = 2


class Interrupted(BaseException):
    """A signal reached the launcher; BaseException so no `except Exception` swallows it."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _raise_interrupted(signum: int, _frame: FrameType | None) -> None:
    raise Interrupted(signum)


@contextmanager
def signals_raise() -> Iterator[None]:
    """Signals to the launcher raise ``Interrupted`` in the main thread. A session run off the main thread (a
    program using dejima.api on a thread of its own) leaves the signals to that program: only the main thread
    may set their handlers."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.signal(s, _raise_interrupted) for s in FORWARDED_SIGNALS}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


@contextmanager
def signals_deferred() -> Iterator[list[int]]:
    """While tearing down, a further signal is remembered instead of cutting the cleanup short. Off the
    main thread nothing changes: a signal goes to the main thread."""
    received: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return
    previous = {s: signal.signal(s, lambda n, _f: received.append(n)) for s in FORWARDED_SIGNALS}
    try:
        yield received
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


# --- what the observer is told ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Applying:
    planned: Planned


@dataclass(frozen=True, slots=True)
class Undone:
    """An applied action's undo has ended (raised or not)."""

    planned: Planned


@dataclass(frozen=True, slots=True)
class Note:
    text: str


@dataclass(frozen=True, slots=True)
class Boundary:
    plan: SessionPlan = field(repr=False)


@dataclass(frozen=True, slots=True)
class FilterOutput:
    """All a session's filter printed, once it stopped: its violation records."""

    session_id: str
    text: str


@dataclass(frozen=True, slots=True)
class LeftoverRemoved:
    session_id: str


@dataclass(frozen=True, slots=True)
class FilterRefusal:
    """A violation record the filter printed while the session runs (the launcher's live notice)."""

    record: Mapping[str, object]


Event = Applying | Undone | Note | Boundary | FilterOutput | FilterRefusal | LeftoverRemoved


def ignore(_: Event) -> None:
    """The observer of a start that tells nothing."""


# --- the session's streams ----------------------------------------------------------------------------------


Sink = Callable[[bytes], None]  # takes each chunk of the command's output as it comes


@dataclass(frozen=True, slots=True)
class Streams:
    """A non-interactive command's standard streams: ``stdin`` a binary file it reads to its end, then end of
    file (None: end of file at once, as /dev/null); its stdout and its stderr, each a sink (None: the launcher's
    own stream of the same name)."""

    stdout: Sink | None = None
    stderr: Sink | None = None
    stdin: IO[bytes] | None = None


def _own(stream: TextIO) -> Sink:
    def write(chunk: bytes) -> None:
        stream.buffer.write(chunk)
        stream.buffer.flush()

    return write


def _pump(stream: Iterator[tuple[bytes | None, bytes | None]], output: Streams = Streams()) -> None:
    out = output.stdout or _own(sys.stdout)
    err = output.stderr or _own(sys.stderr)
    try:
        for stdout, stderr in stream:
            if stdout:
                out(stdout)
            if stderr:
                err(stderr)
    except Exception:  # noqa: BLE001 - the stream closes when the container is removed
        pass


def _start_attached(runtime: Runtime, container: str, streams: Streams = Streams()) -> threading.Thread:
    """Start the container with its output streamed to ``streams`` (attached before the start, so that
    nothing it prints is lost) and ``streams.stdin``, if any, fed to its stdin (created open for it);
    returns the thread that copies the output."""
    stream = runtime.attach(container, streams.stdin)
    pump = threading.Thread(target=_pump, args=(stream, streams), name="session-output", daemon=True)
    pump.start()
    runtime.start(container)
    return pump


# --- the filter ------------------------------------------------------------------------------------------


def follow_lines(runtime: Runtime, container: str) -> Iterator[str]:
    """The container's output, line by line as it comes, until the container goes away."""
    buffer = b""
    for chunk in runtime.follow_logs(container):
        buffer += chunk
        while b"\n" in buffer:
            raw, buffer = buffer.split(b"\n", 1)
            yield raw.decode(errors="replace")


def _wait_ready(runtime: Runtime, container: str, timeout: float, digest: str) -> None:
    lines: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        try:
            for line in follow_lines(runtime, container):
                lines.put(line)
        except Exception:  # noqa: BLE001 - the container went away; the None below reports it
            pass
        lines.put(None)

    threading.Thread(target=read, name="filter-logs", daemon=True).start()
    seen: list[str] = []
    while True:
        try:
            line = lines.get(timeout=timeout)
        except queue.Empty:
            raise FilterError(
                f"the filter did not report ready within {timeout:g} s",
                context="\n".join(seen[-10:]) or None,
                hint="raise [session] ready_timeout if the machine is very slow; `dejima doctor` checks nftables",
            ) from None
        if line is None:
            break
        if line.startswith(VIOLATION):
            continue
        seen.append(line)
        if line.startswith(READY):
            if f"ruleset={digest}" not in line.split():
                raise FilterError(
                    f"the filter verified a ruleset other than the planned one ({line[len(READY):].strip()}, "
                    f"planned ruleset={digest}), so no session was started",
                    hint="this is a bug in dejima or a tampered filter configuration; please report it",
                )
            return
        if line.startswith(FAILED):
            raise FilterError(
                "the filter could not apply its ruleset, so no session was started: "
                + line[len(FAILED):].strip(),
                hint="`dejima doctor` checks that nftables works in a container on this machine",
            )
    info = runtime.inspect(container) or {}
    code = info.get("State", {}).get("ExitCode", "?")
    raise FilterError(
        f"the filter exited (status {code}) before reporting ready, so no session was started",
        context=(runtime.logs(container).strip() or "\n".join(seen)) or None,
        hint="`dejima doctor` checks that nftables works in a container on this machine",
    )


def stop_filter_and_read(runtime: Runtime, container: str) -> str:
    """Stop the filter gently, so that it writes its last records, and return everything it printed."""
    runtime.stop(container, timeout=FILTER_STOP_SECONDS)
    return runtime.logs(container)


def _send_configuration(fifo: str, configuration: str) -> HeldFifo:
    """The filter's configuration into its FIFO, for it to read whenever it starts (on a thread:
    past the pipe's 64 KiB the write waits for the reader). The launcher's end stays open until
    teardown: were the launcher to die first, the filter would see end of file and apply nothing."""
    channel = HeldFifo(fifo)
    Background(lambda: channel.send(configuration.encode() + b"\n"), "filter-configuration")
    return channel


def _check_published(runtime: Runtime, filter_id: str, action: CheckPublished) -> None:
    from dejima.core.publish import binding_problem

    problem = binding_problem(action.ports, ((runtime.inspect(filter_id) or {}).get("NetworkSettings") or {})
                              .get("Ports"))
    if problem is not None:
        raise SessionError(f"the published ports are not what the plan says: {problem}; nothing ran",
                           reference="published-ports-differ",
                           hint="the engine may not honour a host address in port bindings (a rootless or remote "
                           "engine); run without --publish, or report the engine and its version")


def audited_mounts(plan: SessionPlan) -> list[exit_audit.Mount]:
    """Every directory the session can write that outlives it: the workspace (with the paths the
    session's manifests ask the audit to watch), the per-project home, the manifest caches."""
    from dejima.core.audit.manifest_watch import watch_of
    from dejima.core.paths import SESSION_HOME
    from dejima.orchestration import exit_audit

    watch = watch_of(plan.resolved.manifests if plan.resolved is not None else ())
    mounts = []
    for bind in plan.session.binds:
        if bind.read_only:
            continue
        kind = "workspace" if bind.source == plan.workspace else "home" if bind.target == SESSION_HOME else "cache"
        mounts.append(exit_audit.Mount(kind, Path(bind.source), watch if kind == "workspace" else ()))
    return mounts


def _made_top(path: Path) -> Path | None:
    """The highest directory of ``path`` and its parents that does not exist yet (None: it exists)."""
    top = None
    for candidate in (path, *path.parents):
        if candidate.exists():
            break
        top = candidate
    return top


class StartGraphError(ValueError):
    """The actions do not form a graph the executor can run: a bug in the plan that made them."""


def ordered(actions: Sequence[Planned], applied: set[str] = frozenset()) -> list[Planned]:  # type: ignore[assignment]
    """``actions`` in an order where each comes after what it needs; checked before anything runs."""
    names = [p.name for p in actions]
    twice = sorted({name for name in names if names.count(name) > 1} | (set(names) & applied))
    if twice:
        raise StartGraphError(f"actions named twice: {', '.join(twice)}")
    known = set(names) | applied
    unknown = sorted({f"{p.name} needs {need}" for p in actions for need in p.needs if need not in known})
    if unknown:
        raise StartGraphError(f"actions need what no action makes: {'; '.join(unknown)}")
    done, order, pending = set(applied), [], list(actions)
    while pending:
        ready = [p for p in pending if set(p.needs) <= done]
        if not ready:
            raise StartGraphError(f"actions that need each other: {', '.join(p.name for p in pending)}")
        order += ready
        done.update(p.name for p in ready)
        pending = [p for p in pending if p.name not in done]
    return order


class Executor:
    """Applies a plan's actions and keeps the log of what it applied, to unwind it."""

    def __init__(self, runtime: Runtime | None, reporter: SessionReporter, observe: Callable[[Event], None] = ignore,
                 *, sources: Mapping[str, CredentialSource] | None = None, prestarted: Prestarted | None = None,
                 streams: Streams = Streams()) -> None:
        self.runtime, self.reporter, self.observe = runtime, reporter, observe
        self.sources, self.prestarted, self.streams = sources or {}, prestarted, streams
        self.log: list[list[Planned]] = []  # the batches applied, each in the order its actions finished
        self.ran = False  # the gate released: the session's command ran (undos kept_if_ran are skipped)
        self.containers: dict[str, str] = {}  # name -> id
        self.sessions: dict[str, str] = {}  # name -> the session it belongs to (its label)
        self.adopted: set[str] = set()
        self.fifos: dict[str, HeldFifo] = {}
        self.made: dict[Path, Path | None] = {}  # a private directory -> the highest directory this start made
        self.routes: RoutesPlan | None = None  # the planned routes (what the session's home files come from)
        self.proxy: ProxyConfig | None = None  # the planned routes with their sources: ready to serve
        self.proxy_thread: ProxyThread | None = None
        self.output: threading.Thread | None = None  # copies the session's output
        self.audit: tuple[str, list[exit_audit.MountState]] | None = None
        self.base: Base | None = None  # the base image provided (ProvideBase)
        self._lock = threading.Lock()

    @property
    def applied(self) -> list[Planned]:
        return [p for batch in self.log for p in batch]

    def container(self, name: str) -> str:
        return self.containers[name]

    # --- running --------------------------------------------------------------------------------------

    def run(self, actions: Sequence[Planned]) -> None:
        """Apply ``actions`` (threads for the ones that can overlap); on a failure, unwind the whole log and
        raise it."""
        order = ordered(actions, {p.name for p in self.applied})
        batch: list[Planned] = []
        self.log.append(batch)
        finished: queue.Queue[tuple[Planned, BaseException | None]] = queue.Queue()
        started: set[str] = set()
        done = {p.name for p in self.applied}
        running = 0

        def work(planned: Planned) -> None:
            try:
                self.observe(Applying(planned))
                self._apply(planned.action)
                finished.put((planned, None))
            except BaseException as exc:  # noqa: BLE001 - handed to the calling thread
                finished.put((planned, exc))

        try:
            while len(batch) < len(order):
                for planned in order:
                    if planned.name not in started and set(planned.needs) <= done:
                        started.add(planned.name)
                        running += 1
                        threading.Thread(target=work, args=(planned,), name=f"action-{planned.name}",
                                         daemon=True).start()
                planned, error = finished.get()
                running -= 1
                if error is not None:
                    raise error
                batch.append(planned)
                done.add(planned.name)
        except BaseException as failure:
            while running:  # an action cannot be stopped halfway: its end is waited for, then undone with the rest
                try:
                    planned, error = finished.get()
                except BaseException:  # noqa: BLE001 - a second signal: keep waiting, the first is the story
                    continue
                running -= 1
                if error is None:
                    batch.append(planned)
            if isinstance(failure, Interrupted) and self.ran:
                # The command runs (its gate released): the caller passes the signal on and gives it its time
                # before it unwinds (session.run), as for a signal that comes once it waits on the command.
                raise failure
            try:
                self.unwind()
            except BaseException:  # noqa: BLE001 - the failure that stopped the start is the one to report
                pass
            raise failure

    def unwind(self) -> None:
        """Undo the log, the last batch first; within a batch each undo after its ``undo_after`` (independent
        ones at once). Every undo runs even when one fails; the first failure is raised at the end."""
        errors: list[BaseException] = []
        with signals_deferred():
            while self.log:
                batch = self.log.pop()
                due = [p for p in batch if p.undo is not None and not (self.ran and p.undo.kept_if_ran)]
                errors += self._unwind_batch(due)
        if errors:
            raise errors[0]

    def _unwind_batch(self, due: list[Planned]) -> list[BaseException]:
        errors: list[BaseException] = []
        finished: queue.Queue[str] = queue.Queue()
        pending = {p.name: p for p in due}
        started: set[str] = set()

        def work(planned: Planned) -> None:
            try:
                assert planned.undo is not None
                self._undo(planned.undo)
            except BaseException as exc:  # noqa: BLE001 - collected, raised once every undo ran
                errors.append(exc)
            try:
                self.observe(Undone(planned))
            except BaseException as exc:  # noqa: BLE001 - the teardown goes on; raised at its end
                errors.append(exc)
            finished.put(planned.name)

        while pending:
            for planned in list(pending.values()):
                if planned.name not in started and not set(planned.undo_after) & set(pending):
                    started.add(planned.name)
                    threading.Thread(target=work, args=(planned,), name=f"undo-{planned.name}", daemon=True).start()
            if len(started) == 0:  # an undo_after cycle: the plan's bug; undo the rest one by one
                for planned in pending.values():
                    work(planned)
                break
            del pending[finished.get()]
            started &= set(pending)
        return errors

    # --- one action -------------------------------------------------------------------------------------

    def _engine(self) -> Runtime:
        if self.runtime is None:
            raise SessionError("this start has no engine to apply its actions to",
                               hint="this is a bug in dejima; please report it")
        return self.runtime

    def _apply(self, action: Action) -> None:  # noqa: C901 - one case per action of the closed set
        from dejima.adapters import host

        match action:
            case RemoveLeftover(session_id=session_id, containers=containers, filters=filters):
                from dejima.adapters.session_dirs import clear_run_dir

                runtime = self._engine()
                for container in filters:
                    self.observe(FilterOutput(session_id, stop_filter_and_read(runtime, container)))
                for container in containers:
                    runtime.remove(container)
                clear_run_dir(session_id)
                self.observe(LeftoverRemoved(session_id))
            case ProvideBase(settings=settings):
                from dejima.adapters.image_builds import resolve_base

                self.base = resolve_base(self._engine(), settings, self.reporter)
            case BuildImages(needs=needs):
                from dejima.adapters.image_builds import build_needed

                build_needed(self._engine(), needs, self.reporter)
            case MakePrivateDir(path=path, owner=owner):
                top = _made_top(path)
                host.ensure_private_dir(path, owner)
                with self._lock:
                    self.made[path] = top
            case WriteResolvConf(text=text):
                host.resolv_conf_file(text)
            case ServeCredentials(routes=routes):
                from dejima.proxy.setup import served_config

                self.routes, self.proxy = routes, served_config(routes, self.sources)
            case WriteCredentialFiles(home=home, owner=owner):
                from dejima.proxy.runner import write_home_files

                assert self.routes is not None and self.proxy is not None
                for note in write_home_files(self.routes, self.proxy, home, (owner.uid, owner.gid)):
                    self.observe(Note(note))
            case MergeHarnessSettings(home=home, files=files, owner=owner):
                from dejima.adapters.home_settings import merge_settings

                for note in merge_settings(str(home), files, (owner.uid, owner.gid)):
                    self.observe(Note(note))
            case MakeRunDir(path=path):
                from dejima.adapters.fifo import make_run_dir

                make_run_dir(path)
            case MakeGate(path=path):
                from dejima.adapters.fifo import make_gate

                make_gate(path)
            case WriteRecord(path=path, text=text):
                host.record(path.parent, path.name, text)
            case RememberFilter(workspace=workspace, spec=spec, session_id=session_id, launcher=launcher):
                from dejima.adapters.runtime import create_body
                from dejima.orchestration.prestart import remember

                remember(workspace, spec.name, create_body(spec), session_id, launcher)
            case ServeProxy(socket=socket, tls_socket=tls_socket):
                from dejima.proxy.runner import ProxyThread

                assert self.proxy is not None
                thread = ProxyThread(self.proxy, socket, tls_socket)
                thread.__enter__()
                self.proxy_thread = thread
            case HoldGate(fifo=fifo):
                gate = Gate(fifo)
                with self._lock:
                    self.fifos[fifo] = gate
            case CreateContainer():
                self._create(action)
            case SendConfiguration(fifo=fifo, text=text):
                channel = _send_configuration(fifo, text)
                with self._lock:
                    self.fifos[fifo] = channel
            case StartContainer():
                self._start(action)
            case CheckPublished(name=name):
                _check_published(self._engine(), self.container(name), action)
            case ShowBoundary(plan=plan):
                self.observe(Boundary(plan))
            case StartAudit(plan=plan):
                from dejima.adapters import venv_record
                from dejima.orchestration import exit_audit

                # What the image's Python environments' own files are: recorded once per image (at its build,
                # or here for an image built before), read by the audit at the end.
                facts = venv_record.record(self._engine(), plan.session.image)
                states = exit_audit.start(plan.session_id, audited_mounts(plan), facts.image if facts else "")
                self.audit = (plan.session_id, states)
            case WaitReady(name=name, digest=digest, timeout=timeout):
                _wait_ready(self._engine(), self.container(name), timeout, digest)
            case ReleaseGate(fifo=fifo):
                held = self.fifos[fifo]
                assert isinstance(held, Gate)
                held.release()
                self.ran = True

    def _create(self, action: CreateContainer) -> None:
        runtime = self._engine()
        container = None
        if action.adopt and self.prestarted is not None:
            from dejima.adapters.runtime import create_body

            container = self.prestarted.adopt(action.name, create_body(action.spec))
        adopted = container is not None
        if container is None:
            # A non-interactive session's stdin is open only with input to feed it (else /dev/null, as `docker run`
            # without -i): an open stdin nobody feeds would never end.
            fed = action.takes_input and self.streams.stdin is not None
            container = runtime.create(with_stdin(action).spec if fed else action.spec)
        with self._lock:
            self.containers[action.name] = container
            self.sessions[action.name] = action.spec.labels.get(SESSION_LABEL, "")
            if adopted:
                self.adopted.add(action.name)

    def _start(self, action: StartContainer) -> None:
        runtime, container = self._engine(), self.container(action.name)
        if action.name in self.adopted and self.prestarted is not None:
            self.prestarted.join()  # being started since the launcher began
        elif action.attached:
            try:
                self.output = _start_attached(runtime, container, self.streams)
                self.ran = self.ran or action.explained_by is None  # no gate: the command runs now
            except EngineError:
                # Behind the gate it starts while the filter applies its ruleset. A filter that failed meanwhile
                # takes the session's start down with it (it cannot join a stopped container): its story is the one.
                ready = action.explained_by
                if ready is not None:
                    _wait_ready(runtime, self.container(ready.name), ready.timeout, ready.digest)
                raise
        else:
            runtime.start(container)

    def _undo(self, undo: Undo) -> None:
        match undo:
            case RemoveTree(path=path):
                shutil.rmtree(path, ignore_errors=True)
            case RemoveFile(path=path):
                path.unlink(missing_ok=True)
            case RemoveMadeDir(path=path):
                top = self.made.get(path)
                if top is not None:  # this start made it: nothing of another's is in it
                    shutil.rmtree(path, ignore_errors=True)
                    # The parents it made go only if still empty: another start may have put its own there since.
                    for parent in path.parents:
                        if not parent.is_relative_to(top):
                            break
                        try:
                            parent.rmdir()
                        except OSError:
                            break
            case RemoveContainer(name=name, keep_output=keep):
                runtime, container = self._engine(), self.container(name)
                if keep:
                    self.observe(FilterOutput(self.sessions[name], stop_filter_and_read(runtime, container)))
                runtime.remove(container)
            case CloseFifo(fifo=fifo, remove_directory=remove_directory):
                self.fifos.pop(fifo).close(remove_directory)
            case StopProxy():
                if self.proxy_thread is not None:
                    self.proxy_thread.__exit__(None, None, None)
                    self.proxy_thread = None
            case FinishAudit():
                if self.audit is not None:
                    from dejima.orchestration import exit_audit

                    session_id, states = self.audit
                    self.audit = None
                    exit_audit.finish(session_id, self.reporter, states=states or None)
