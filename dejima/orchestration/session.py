"""The orchestrator: start the filter, verify it, run the session, tear everything down.

    run(plan) ── the pair's actions (orchestration/actions.py pair_actions) by the one executor
                (orchestration/executor.py): the filter created (or the prestarted one adopted), sent its
                configuration and started; meanwhile the session created, the boundary told, the audit's
                start snapshot taken; the session's container started (it joins the filter's network and
                PID namespaces), its command waiting at the start gate (core/plan.py) until the filter
                reports "ready" (ruleset applied and read back, its digest the plan's) ── or FilterError
             └─ the gate released: the command runs
                ├─ non-interactive: attached, output streamed, exit with the command's status
                └─ interactive: `docker start -ai` gives a real TTY with resizing
             └─ finally, whatever happened: the executor's log unwound (both containers removed at once,
                the filter stopped gently and its output kept; the audit's end once the session is gone)

Signals (SIGINT, SIGTERM, SIGHUP) are forwarded to the command, which gets ``stop_timeout``
seconds to exit; then everything is removed and dejima exits with 128+N. ``STOP_SIGNAL`` is
`dejima stop`'s request: the same as SIGTERM, and the launcher says who asked.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import threading
from collections.abc import Callable, Sequence

from dejima.adapters.host import Launcher, launcher_alive
from dejima.adapters.runtime import Runtime
from dejima.core import labels
from dejima.core.plan import SessionPlan
from dejima.core.report import Reporter
from dejima.errors import EngineError, ExitStatus, FilterError
from dejima.filter import READY, VIOLATION
from dejima.orchestration.actions import Planned, leftovers_plan, pair_actions
from dejima.orchestration.executor import (
    STOP_SIGNAL,
    Event,
    Executor,
    FilterOutput,
    FilterRefusal,
    Interrupted,
    LeftoverRemoved,
    _wait_ready,
    follow_lines,
    signals_deferred,
    signals_raise,
)
from dejima.orchestration.session_reporter import SessionReporter


def start_filter(runtime: Runtime, plan: SessionPlan, timeout: float) -> str:
    """Start the filter and return its id once it reports its ruleset applied and verified (`dejima doctor`)."""
    from dejima.orchestration.actions import ruleset_digest

    container = runtime.create(plan.filter)
    try:
        runtime.start(container)
        _wait_ready(runtime, container, timeout, ruleset_digest(plan.ruleset))
    except BaseException:
        runtime.remove(container)
        raise
    return container


# --- the session -----------------------------------------------------------------------------


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


def run(runtime: Runtime, plan: SessionPlan, ui: SessionReporter, ready_timeout: float, stop_timeout: float, *,
        executor: Executor | None = None, actions: Sequence[Planned] | None = None,
        follow_refusals: bool = False) -> int:
    """Run the planned session to its end; returns the exit status dejima should exit with.
    ``actions``: the pair's start (default: ``pair_actions`` of ``plan``, without boundary and audit), applied by
    ``executor`` (default: one of its own, telling nothing), whose whole log is unwound at the end, whatever
    happened. ``follow_refusals``: each violation record the filter prints while the session runs is told to the
    executor's observer (``FilterRefusal``: the launcher's live notice)."""
    executor = executor or Executor(runtime, ui)
    actions = actions if actions is not None else pair_actions(plan, ready_timeout, told=False, audited=False)
    received: list[int] = []  # the signals the launcher got while the command ran
    with signals_raise():
        try:
            executor.run(actions)
            filter_id, session_id = executor.container(plan.filter.name), executor.container(plan.session.name)
            if follow_refusals:
                _follow_refusals(runtime, filter_id, lambda record: executor.observe(FilterRefusal(record)))
            if plan.interactive:
                status = _run_interactive(runtime, session_id, stop_timeout, received)
            else:
                assert executor.output is not None
                status = _run_attached(runtime, session_id, stop_timeout, executor.output, received)
            _say_stopped(ui, plan.session_id, received)
            check_filter_alive(runtime, filter_id)
            return status
        except Interrupted as interrupted:
            running = executor.containers.get(plan.session.name)
            if executor.ran and running is not None and not plan.interactive:
                # The command ran (its gate released) but the launcher was not waiting on it yet (the
                # start's last steps, slow under load): it gets the signal and its time all the same,
                # its output relayed, instead of being removed with its trap unrun.
                _forward(runtime, running, interrupted.signum, stop_timeout)  # exited already: kill is a no-op
                if executor.output is not None:
                    executor.output.join(timeout=stop_timeout)
            _say_stopped(ui, plan.session_id, [interrupted.signum])
            return ExitStatus.signalled(_as_sent(interrupted.signum))
        finally:
            executor.unwind()


def _say_stopped(ui: Reporter, session_id: str, received: list[int]) -> None:
    if STOP_SIGNAL in received:
        ui.warn(f"session {session_id} stopped (dejima stop)")


# --- leftovers -------------------------------------------------------------------------------


def stale_sessions(runtime: Runtime, scope: str) -> dict[str, list[tuple[str, str]]]:
    """Session id → its containers (id, role), for sessions whose launcher is gone.

    Only containers that carry a launcher token count: helpers labelled otherwise (the test
    world's servers) belong to whoever made them.
    """
    stale: dict[str, list[tuple[str, str]]] = {}
    for container in runtime.containers({labels.SCOPE: scope}):
        token = container.labels.get(labels.LAUNCHER, "")
        if Launcher.parse(token) is not None and not launcher_alive(token):
            stale.setdefault(container.labels.get(labels.SESSION, "?"), []).append(
                (container.id, container.labels.get(labels.ROLE, "")))
    return stale


def remove_stale(runtime: Runtime, scope: str, ui: SessionReporter,
                 on_filter_output: Callable[[str, str], None] | None = None) -> list[str]:
    """Remove sessions whose launcher is gone (a plan of its own: actions.leftovers_plan), first handing their
    filters' output to the caller."""
    stale = stale_sessions(runtime, scope)

    def observe(event: Event) -> None:
        match event:
            case FilterOutput(session_id=session_id, text=text) if on_filter_output is not None:
                on_filter_output(session_id, text)
            case LeftoverRemoved(session_id=session_id):
                ui.info(f"removed leftover session {session_id} (its launcher is gone)")

    if stale:
        Executor(runtime, ui, observe).run(leftovers_plan(stale))
    return sorted(stale)
