"""The orchestrator: start the filter, verify it, run the session, tear everything down.

    run(plan) ── create the filter; start it on its own thread, meanwhile create the session
                and do the caller's work (the audit's recovery, findings check, start snapshot)
             ── start the session's container (it joins the filter's network and PID namespaces);
                its command waits at the start gate (core/plan.py) until the filter is verified
             ── wait for "ready" (ruleset applied and read back, its digest the plan's) ── or FilterError
             └─ release the gate: the command runs
                ├─ non-interactive: attach, stream output, exit with the command's status
                └─ interactive: `docker start -ai` gives a real TTY with resizing
             └─ finally, whatever happened, in parallel: stop the filter gently, keep its output,
                remove it; remove the session, then the caller's end-of-session work (the audit)

Signals (SIGINT, SIGTERM, SIGHUP) are forwarded to the command, which gets ``stop_timeout``
seconds to exit; then everything is removed and dejima exits with 128+N. ``STOP_SIGNAL`` is
`dejima stop`'s request: the same as SIGTERM, and the launcher says who asked.
"""

from __future__ import annotations

import hashlib
import queue
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from types import FrameType
from typing import IO, TextIO

from dejima.adapters.fifo import Gate, HeldFifo
from dejima.adapters.host import Launcher, launcher_alive
from dejima.adapters.runtime import Runtime, create_body
from dejima.adapters.session_dirs import clear_run_dir
from dejima.core import labels
from dejima.core.plan import SessionPlan
from dejima.core.report import Reporter
from dejima.errors import EngineError, ExitStatus, FilterError, SessionError
from dejima.filter import FAILED, READY, VIOLATION
from dejima.orchestration.background import Background
from dejima.orchestration.prestart import Prestarted
from dejima.orchestration.start_plan import CALLERS_STEPS, pair_outline
from dejima.orchestration.steps import Done, Step, StepGraphError, apply, with_actions

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
    main thread (a start's step) nothing changes: a signal goes to the main thread, which waits for the step."""
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


# --- the filter ------------------------------------------------------------------------------


def start_filter(runtime: Runtime, plan: SessionPlan, timeout: float) -> str:
    """Start the filter and return its id once it reports its ruleset applied and verified."""
    container = runtime.create(plan.filter)
    try:
        runtime.start(container)
        _wait_ready(runtime, container, timeout, ruleset_digest(plan.ruleset))
    except BaseException:
        runtime.remove(container)
        raise
    return container


def follow_lines(runtime: Runtime, container: str) -> Iterator[str]:
    """The container's output, line by line as it comes, until the container goes away."""
    buffer = b""
    for chunk in runtime.follow_logs(container):
        buffer += chunk
        while b"\n" in buffer:
            raw, buffer = buffer.split(b"\n", 1)
            yield raw.decode(errors="replace")


def ruleset_digest(ruleset: str) -> str:
    """What the filter's ready line names: the ruleset it applied and verified."""
    return hashlib.sha256(ruleset.encode()).hexdigest()[:16]


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


# --- the session -----------------------------------------------------------------------------


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
    nothing it prints is lost) and ``streams.stdin``, if any, fed to its stdin (created open for it:
    ``pair_steps``); returns the thread that copies the output."""
    stream = runtime.attach(container, streams.stdin)
    pump = threading.Thread(target=_pump, args=(stream, streams), name="session-output", daemon=True)
    pump.start()
    runtime.start(container)
    return pump


def _run_attached(runtime: Runtime, container: str, stop_timeout: float, pump: threading.Thread,
                  received: list[int]) -> int:
    try:
        status = runtime.wait(container)
    except Interrupted as interrupted:
        received.append(interrupted.signum)
        status = _forward(runtime, container, interrupted.signum, stop_timeout)
    pump.join(timeout=stop_timeout)
    return status


def _run_interactive(runtime: Runtime, container: str, stop_timeout: float, received: list[int]) -> int:
    cli = shutil.which("docker")
    if cli is None:
        raise EngineError(
            "an interactive session needs the docker command-line client, which is not on PATH",
            hint="install the docker CLI, or run a command non-interactively: dejima PATH -- CMD",
        )
    # The docker CLI handles raw mode, window resizes and stdin for us.
    process = subprocess.Popen([cli, "start", "--attach", "--interactive", container])
    try:
        process.wait()
        return runtime.wait(container)
    except Interrupted as interrupted:
        received.append(interrupted.signum)
        status = _forward(runtime, container, interrupted.signum, stop_timeout)
        process.terminate()
        process.wait()
        return status


def _forward(runtime: Runtime, container: str, signum: int, stop_timeout: float) -> int:
    """Pass a signal to the command (`dejima stop`'s as SIGTERM); give it stop_timeout seconds; report 128+N
    either way."""
    sent = _as_sent(signum)
    with signals_deferred():
        runtime.kill(container, signal.Signals(sent).name)
        try:
            runtime.wait(container, timeout=stop_timeout)
        except Exception:  # noqa: BLE001 - it did not exit in time; teardown removes it
            pass
    return ExitStatus.signalled(sent)


def _as_sent(signum: int) -> int:
    return signal.SIGTERM if signum == STOP_SIGNAL else signum


def teardown(runtime: Runtime, containers: list[str],
             before_removal: dict[str, Callable[[], None]] | None = None,
             after_removal: dict[str, Callable[[], None]] | None = None) -> None:
    """Remove containers in parallel, each between its ``before_removal`` and ``after_removal``
    steps if it has them (on the same thread: the other removals go on meanwhile)."""
    before, after = before_removal or {}, after_removal or {}
    with signals_deferred():
        errors: list[BaseException] = []

        def remove(container: str) -> None:
            try:
                if container in before:
                    before[container]()
                runtime.remove(container)
                if container in after:
                    after[container]()
            except BaseException as exc:  # noqa: BLE001 - collected and re-raised below
                errors.append(exc)

        threads = [threading.Thread(target=remove, args=(c,)) for c in containers]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if errors:
            raise errors[0]


def _follow_refusals(runtime: Runtime, filter_id: str, on_refusal: Callable[[dict[str, object]], None]) -> None:
    """Hand each violation record the filter prints to ``on_refusal`` while the session runs (the
    stream ends when the filter is removed). The durable record is kept elsewhere, at teardown."""
    import json

    def follow() -> None:
        try:
            for line in follow_lines(runtime, filter_id):
                if line.startswith(VIOLATION):
                    try:
                        on_refusal(json.loads(line[len(VIOLATION):]))
                    except ValueError:
                        continue
        except Exception:  # noqa: BLE001 - the filter went away; a notice is a courtesy, not a record
            pass

    threading.Thread(target=follow, name="refusal-notices", daemon=True).start()


def check_filter_alive(runtime: Runtime, filter_id: str) -> None:
    """Raise FilterError when the filter stopped under the session: the session was killed with it
    (it is init of the session's PID namespace), and a bare 137 would hide why."""
    state = (runtime.inspect(filter_id) or {}).get("State", {})
    if state.get("Running"):
        return
    lines = [line for line in runtime.logs(filter_id).splitlines() if not line.startswith(VIOLATION)]
    last_words = [line for line in lines if not line.startswith(READY)][-8:]
    how = f"status {state.get('ExitCode', '?')}" + (", out of memory" if state.get("OOMKilled") else "")
    raise FilterError(
        f"the filter stopped during the session ({how}): the session lost its network and was ended with it",
        context="\n".join(last_words) or "the filter printed nothing before it stopped",
        hint="`dejima violations SESSION` shows what the session was refused; if the filter's last words above "
        "look like a bug, please report them",
        reference="filter-stopped",
    )


def stop_filter_and_read(runtime: Runtime, container: str) -> str:
    """Stop the filter gently, so that it writes its last records, and return everything it printed."""
    runtime.stop(container, timeout=FILTER_STOP_SECONDS)
    return runtime.logs(container)


def run(runtime: Runtime, plan: SessionPlan, ui: Reporter, ready_timeout: float, stop_timeout: float,
        on_filter_output: Callable[[str], None] | None = None,
        on_refusal: Callable[[dict[str, object]], None] | None = None,
        before_session: Mapping[str, Callable[[Done], object]] = {},
        once_session_removed: Callable[[], None] | None = None,
        prestarted: Prestarted | None = None, streams: Streams = Streams()) -> int:
    """Run the planned session to its end; returns the exit status dejima should exit with.
    Its start is steps (``pair_steps``): the session's command runs only after the filter reported
    ready (its container may start before, behind the gate). ``before_session``: the caller's actions
    for the steps that must be done before the session's container starts (``boundary``, ``audit-start``:
    the boundary line, the audit's start snapshot); they run while the filter starts.
    ``once_session_removed`` runs when no process of the session is left (its container removed),
    while the filter is still being stopped: the end of the session's audit belongs there.

    ``on_filter_output`` gets all the filter printed (its violation records), once it has stopped;
    ``on_refusal`` gets each violation record as it happens (the launcher's live notice).
    ``prestarted``: a filter started before the plan existed, used if its request is the plan's.
    ``streams``: a non-interactive command's input and where its output goes (none and the launcher's own stdout
    and stderr by default).
    """
    created: list[str] = []
    received: list[int] = []  # the signals the launcher got while the command ran
    gate = Gate(plan.gate) if plan.gate is not None else None
    held: list[HeldFifo] = [gate] if gate is not None else []
    with signals_raise():
        try:
            done = apply(pair_steps(runtime, plan, created, held, gate, ready_timeout, before_session,
                                    prestarted, streams)).results
            filter_id, session_id = done["filter"][0], done["session"]
            if on_refusal is not None:
                _follow_refusals(runtime, filter_id, on_refusal)
            if plan.interactive:
                status = _run_interactive(runtime, session_id, stop_timeout, received)
            else:
                status = _run_attached(runtime, session_id, stop_timeout, done["session-start"], received)
            _say_stopped(ui, plan.session_id, received)
            check_filter_alive(runtime, filter_id)
            return status
        except Interrupted as interrupted:
            _say_stopped(ui, plan.session_id, [interrupted.signum])
            return ExitStatus.signalled(_as_sent(interrupted.signum))
        finally:
            steps, after = {}, {}
            if created and on_filter_output is not None:  # created[0]: the filter, once it exists
                stopped = created[0]
                steps[stopped] = lambda: on_filter_output(stop_filter_and_read(runtime, stopped))
            if len(created) == 2 and once_session_removed is not None:
                after[created[1]] = once_session_removed
            try:
                teardown(runtime, created, steps, after)
            finally:
                for fifo in held:
                    fifo.close()


def _say_stopped(ui: Reporter, session_id: str, received: list[int]) -> None:
    if STOP_SIGNAL in received:
        ui.warn(f"session {session_id} stopped (dejima stop)")


def _send_configuration(fifo: str, configuration: str) -> HeldFifo:
    """The filter's configuration into its FIFO, for it to read whenever it starts (on a thread:
    past the pipe's 64 KiB the write waits for the reader). The launcher's end stays open until
    teardown: were the launcher to die first, the filter would see end of file and apply nothing."""
    channel = HeldFifo(fifo)
    Background(lambda: channel.send(configuration.encode() + b"\n"), "filter-configuration")
    return channel


def _check_published(runtime: Runtime, filter_id: str, plan: SessionPlan) -> None:
    from dejima.core.publish import binding_problem

    problem = binding_problem(plan.filter.ports, ((runtime.inspect(filter_id) or {}).get("NetworkSettings") or {})
                              .get("Ports"))
    if problem is not None:
        raise SessionError(f"the published ports are not what the plan says: {problem}; nothing ran",
                           reference="published-ports-differ",
                           hint="the engine may not honour a host address in port bindings (a rootless or remote "
                           "engine); run without --publish, or report the engine and its version")


def pair_steps(runtime: Runtime, plan: SessionPlan, created: list[str], held: list[HeldFifo], gate: Gate | None,
               ready_timeout: float, before_session: Mapping[str, Callable[[Done], object]] = {},
               prestarted: Prestarted | None = None, streams: Streams = Streams()) -> list[Step]:
    """The container pair's start (orchestration/start_plan.pair_outline: what each step waits for) with
    its actions; ids go to ``created`` and FIFOs to ``held`` as they exist, for the teardown.
    ``before_session``: the caller's actions for ``boundary`` and ``audit-start`` (none: nothing to do)."""
    digest = ruleset_digest(plan.ruleset)
    gated = gate is not None

    def create_filter(_: Done) -> tuple[str, bool]:
        adopted = prestarted.adopt(plan.filter.name, create_body(plan.filter)) if prestarted is not None else None
        filter_id = adopted if adopted is not None else runtime.create(plan.filter)
        created.append(filter_id)  # first: the teardown stops the filter gently and keeps its output
        return filter_id, adopted is not None

    def configure_filter(done: Done) -> None:
        # Only now: a prestarted filter that was not adopted is gone, and cannot read it instead.
        if plan.config_fifo is not None:
            held.append(_send_configuration(plan.config_fifo, plan.filter_config))

    def start_filter(done: Done) -> None:
        filter_id, adopted = done["filter"]
        if adopted and prestarted is not None:
            prestarted.join()  # being started since the launcher began
        else:
            runtime.start(filter_id)
        if plan.filter.ports:  # the card says where each is reachable: the engine must have bound just that
            _check_published(runtime, filter_id, plan)

    # A non-interactive session's stdin is open only with input to feed it (else /dev/null, as `docker run`
    # without -i): an open stdin nobody feeds would never end.
    fed = not plan.interactive and streams.stdin is not None
    session_spec = replace(plan.session, stdin=True) if fed else plan.session
    session_streams = streams if fed else replace(streams, stdin=None)

    def create_session(done: Done) -> str:
        session_id = runtime.create(session_spec)
        created.append(session_id)
        return session_id

    def filter_ready(done: Done) -> None:
        _wait_ready(runtime, done["filter"][0], ready_timeout, digest)

    def start_session(done: Done) -> threading.Thread:
        try:
            return _start_attached(runtime, done["session"], session_streams)
        except EngineError:
            # Behind the gate it starts while the filter applies its ruleset. A filter that failed meanwhile
            # takes the session's start down with it (it cannot join a stopped container): its story is the one.
            if gated:
                _wait_ready(runtime, done["filter"][0], ready_timeout, digest)
            raise

    def release_gate(done: Done) -> None:
        if gate is not None:
            gate.release()

    theirs = sorted(set(before_session) - set(CALLERS_STEPS))
    if theirs:
        raise StepGraphError(f"a caller acts only for the pair's {' and '.join(CALLERS_STEPS)}, not for "
                             f"{', '.join(theirs)}")
    actions: dict[str, Callable[[Done], object]] = {
        "filter": create_filter, "filter-configuration": configure_filter, "filter-start": start_filter,
        "session": create_session, "filter-ready": filter_ready, "open-gate": release_gate,
        **({} if plan.interactive else {"session-start": start_session}),  # the CLI starts an interactive one
        **{name: lambda _: None for name in CALLERS_STEPS}, **before_session,
    }
    return with_actions(pair_outline(plan.interactive, gated), actions)


# --- leftovers -------------------------------------------------------------------------------


def stale_sessions(runtime: Runtime, scope: str) -> dict[str, list[str]]:
    """Session id → container ids, for sessions whose launcher is gone.

    Only containers that carry a launcher token count: helpers labelled otherwise (the test
    world's servers) belong to whoever made them.
    """
    stale: dict[str, list[str]] = {}
    for container in runtime.containers({labels.SCOPE: scope}):
        token = container.labels.get(labels.LAUNCHER, "")
        if Launcher.parse(token) is not None and not launcher_alive(token):
            stale.setdefault(container.labels.get(labels.SESSION, "?"), []).append(container.id)
    return stale


def remove_stale(runtime: Runtime, scope: str, ui: Reporter,
                 on_filter_output: Callable[[str, str], None] | None = None) -> list[str]:
    """Remove sessions whose launcher is gone, first handing their filters' output to the caller."""
    stale = stale_sessions(runtime, scope)
    for session_id, containers in sorted(stale.items()):
        if on_filter_output is not None:
            for container in containers:
                info = runtime.inspect(container) or {}
                if info.get("Config", {}).get("Labels", {}).get(labels.ROLE) == labels.ROLE_FILTER:
                    on_filter_output(session_id, stop_filter_and_read(runtime, container))
        teardown(runtime, containers)
        clear_run_dir(session_id)
        ui.info(f"removed leftover session {session_id} (its launcher is gone)")
    return sorted(stale)
