"""A command run in a session: ``Session`` (a context manager that always cleans up) and ``run``, the session's
output handed to the caller's files or functions as it comes."""

from __future__ import annotations

import codecs
import io
from collections.abc import Callable
from types import TracebackType
from typing import IO, TYPE_CHECKING

from dejima.api.plans import Request, _inputs, _worded
from dejima.api.reporting import _quiet
from dejima.errors import UsageError

if TYPE_CHECKING:
    from dejima.core.plan import SessionPlan
    from dejima.orchestration.executor import Sink
    from dejima.orchestration.prestart import Prestarted
    from dejima.orchestration.session_reporter import SessionReporter as Reporter
    from dejima.orchestration.start import Prepared


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

    Entering applies the start's preparation (stale sessions removed, images built when missing, credentials read,
    the plan made, the session's run directory, gate and record): ``plan`` and ``session_id`` are known from then
    on, and nothing runs yet. ``run`` starts the container pair, streams the command's output, and returns its
    exit status once both containers are removed and the exit audit is done (128+N when the command ended on
    signal N). Leaving without ``run`` undoes what the start applied; leaving after it has nothing left to remove.
    A session runs its command once. ``reporter`` gets what the command line would print (default: kept by a
    ``QuietReporter``, ``reporter.messages``); ``prestarted`` is the command line's filter started before the plan.
    """

    def __init__(self, request: Request, *, reporter: Reporter | None = None,
                 prestarted: Prestarted | None = None) -> None:
        self.request = request
        self.reporter: Reporter = _quiet(reporter)
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
        """Apply the start's preparation (entering the ``with`` block does); a failure undoes what it did."""
        if self._prepared is not None or self._closed:
            raise UsageError("this session was started already", hint="make a new Session for another start")
        from dejima.adapters.runtime import connect
        from dejima.orchestration import start

        with _worded(self.request):
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

    def run(self, *, stdout: OutputTarget = None, stderr: OutputTarget = None, stdin: IO[bytes] | None = None) -> int:
        """Run the command to its end; its stdout and stderr go to ``stdout`` and ``stderr`` as they come (an
        interactive session's go to this terminal); it reads ``stdin`` (a binary file, read as the command reads
        it, then end of file; None: end of file at once, as /dev/null). Returns its exit status. Signals this
        process gets while ``run`` waits on the main thread are passed to the command (the status is then 128+N)."""
        from dejima.orchestration import start
        from dejima.orchestration.executor import Streams

        prepared = self._started()
        if self._ran or self._closed:
            raise UsageError("a session runs its command once", hint="make a new Session to run another command")
        self._ran = True
        with _worded(self.request):
            return start.run_session(prepared, self.reporter, Streams(_sink(stdout), _sink(stderr), stdin))

    def close(self) -> None:
        """Undo a start that never ran (its run directory, gate and record); a session that ran has removed its
        containers and run directory already. Called on leaving the ``with`` block; calling it again does nothing."""
        if self._closed:
            return
        self._closed = True
        prepared = self._prepared
        if prepared is None or self._ran:
            return
        from dejima.adapters.session_dirs import clear_run_dir, discard_unstarted

        try:
            prepared.executor.unwind()
        finally:
            clear_run_dir(prepared.plan.session_id)
            if self._prestarted is None:  # else the prestart's, removed with it by its owner
                discard_unstarted(prepared.plan.session_id)


def run(request: Request, *, stdout: OutputTarget = None, stderr: OutputTarget = None,
        stdin: IO[bytes] | None = None, reporter: Reporter | None = None) -> int:
    """Start a session on ``request``, run its command to its end and clean up; returns the exit status."""
    with Session(request, reporter=reporter) as session:
        return session.run(stdout=stdout, stderr=stderr, stdin=stdin)
