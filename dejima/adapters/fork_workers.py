"""Work split over forked processes: each child inherits its input through fork and sends back one
marshal-able result through a pipe (the snapshot walk's parallelism; without fork, the caller
runs the work in-process)."""

from __future__ import annotations

import gc
import marshal
import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from dejima.errors import DiagnosticError, ExitStatus

MAX_WORKERS = 8  # lstat-bound: more processes mostly cost forks


class SnapshotError(DiagnosticError):
    """The walk could not see the whole tree: a partial snapshot would hide changes (also when a
    walker process failed or sent back something unreadable)."""

    reference = "audit-snapshot-failed"


_pauses = 0  # how many pauses of the collector are in force, across threads
_pauses_lock = threading.Lock()


def pause_gc() -> Callable[[], None]:
    """Pause the collector until the returned function is called (once; further calls do nothing).
    Pauses nest and span threads: the collector runs again when the last one ends, so no pause
    ends another's (the launcher's start pause and the audit's loader thread overlap)."""
    global _pauses
    with _pauses_lock:
        _pauses += 1
        gc.disable()
    ended = threading.Event()

    def resume() -> None:
        global _pauses
        with _pauses_lock:
            if ended.is_set():
                return
            ended.set()
            _pauses -= 1
            if _pauses == 0:
                gc.enable()

    return resume


@contextmanager
def gc_paused() -> Iterator[None]:
    # Building 100k entries would trigger full collections that scan all of them, several times.
    resume = pause_gc()
    try:
        yield
    finally:
        resume()


def workers() -> int:
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return min(cpus, MAX_WORKERS) if hasattr(os, "fork") else 1


Child = tuple[int, int]  # pid, the read end of its pipe


def fork(work: Callable[[], Any]) -> Child:
    """Runs ``work`` in a child process (OSError when it cannot fork)."""
    reap()
    read_end, write_end = os.pipe()
    try:
        pid = os.fork()
    except OSError:
        os.close(read_end)
        os.close(write_end)
        raise
    if pid == 0:  # the child only reads the filesystem and writes to its pipe
        code = ExitStatus.WALKER_CUT_SHORT
        try:
            os.close(read_end)
            try:
                data, status = marshal.dumps(work()), ExitStatus.SUCCESS
            except BaseException as exc:  # reported to the parent, which raises
                data, status = marshal.dumps(repr(exc)), ExitStatus.FAILURE
            with open(write_end, "wb") as pipe:
                pipe.write(data)
            code = status
        finally:
            os._exit(code)
    os.close(write_end)
    return pid, read_end


def collect(child: Child) -> Any:
    """The result ``fork``'s work returned; SnapshotError when it failed. A child that has sent a
    whole result but not exited yet is reaped later (``reap``): its exit, its copy of this
    process torn down, takes milliseconds the caller need not wait."""
    pid, read_end = child
    try:
        with open(read_end, "rb") as pipe:
            data = pipe.read()
    except BaseException:
        os.waitpid(pid, 0)
        raise
    done, status = os.waitpid(pid, os.WNOHANG)
    try:
        result = marshal.loads(data)
    except (EOFError, ValueError, TypeError) as exc:
        result = f"unreadable result: {exc}"
    if not done:
        if isinstance(result, tuple):  # only a whole result is one (a failure sends a text)
            _unreaped.append(pid)
            return result
        status = os.waitpid(pid, 0)[1]
    code = os.waitstatus_to_exitcode(status)
    if code not in (ExitStatus.SUCCESS, ExitStatus.FAILURE):
        result = f"exit status {code}"
    if code != ExitStatus.SUCCESS or not isinstance(result, tuple):
        raise SnapshotError(f"a snapshot walker process failed ({result}); the snapshot would be partial",
                            hint="run the audit again; if it fails again, report it")
    return result


_unreaped: list[int] = []  # children whose result was taken before they exited
_behind: list[int] = []  # children doing work no one waits for (``fork_behind``), not yet reaped
# finish_behind's request to a child fork_behind started: end once what can be done now is done (a read
# ahead that waits for archives still to come). Not SIGUSR1, the launcher's stop signal (executor.py). Blocked
# in the child from its fork on: a request sent before the child looks for it stays pending, neither lost
# nor fatal; work that never looks for it (the kept manifests) ends on its own, the request dropped with it.
FINISH = signal.SIGUSR2


def reap() -> None:
    """Waits for the children ``collect`` left (long gone by the next fork); reaps those
    ``fork_behind`` left that are done, without waiting for the others."""
    while _unreaped:
        try:
            os.waitpid(_unreaped.pop(), 0)
        except ChildProcessError:
            pass
    _behind[:] = [pid for pid in _behind if not _reaped(pid, os.WNOHANG)]


def _reaped(pid: int, flags: int) -> bool:
    try:
        return os.waitpid(pid, flags)[0] != 0
    except ChildProcessError:
        return True  # not ours (any more)


def fork_behind(work: Callable[[], object]) -> int:
    """Runs ``work`` in a child no one waits for now (the audit's bookkeeping, off its critical
    path): its pid, or 0 when it cannot fork (then the caller does it). The child keeps no descriptor of
    this process's, its standard streams on /dev/null (one that another process reads to its end
    must not wait for it too), and its failure is nobody's: what it does must be something that
    may not get done (a cache)."""
    reap()
    unblocked = signal.pthread_sigmask(signal.SIG_BLOCK, {FINISH})
    try:
        pid = os.fork()
    except OSError:
        pid = -1
    if pid:
        signal.pthread_sigmask(signal.SIG_SETMASK, unblocked)
    if pid < 0:
        return 0
    if pid == 0:
        code = ExitStatus.FAILURE
        try:
            gc.disable()
            quiet = os.open(os.devnull, os.O_RDWR)  # nor the standard streams: a launcher's caller
            for standard in (0, 1, 2):  # reading its output to the end must not wait for this child
                os.dup2(quiet, standard)
            os.closerange(3, os.sysconf("SC_OPEN_MAX"))
            work()
            code = ExitStatus.SUCCESS
        finally:
            os._exit(code)
    _behind.append(pid)
    return pid


def stop_behind(pid: int) -> None:
    """Ends a child ``fork_behind`` left, if it has not been reaped (then the pid is still this
    process's child: no other process is killed), and reaps it."""
    if pid in _behind:
        _behind.remove(pid)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        _reaped(pid, 0)


def finish_requested(seconds: float) -> bool:
    """In a child ``fork_behind`` started: waits up to ``seconds`` for ``finish_behind``'s request
    (FINISH), and says whether it came (then or before)."""
    return signal.sigtimedwait({FINISH}, seconds) is not None


def finish_behind() -> None:
    """Asks every child ``fork_behind`` left in this process to finish (FINISH: what it can do now,
    done) and waits for each (tests, benchmarks: what the session's time would have done). Only a
    child not reaped yet is asked (its pid is still this process's child: no other process is)."""
    while _behind:
        pid = _behind.pop()
        try:
            os.kill(pid, FINISH)
        except ProcessLookupError:
            pass
        _reaped(pid, 0)


def stop(children: list[Child]) -> None:
    """Kills and reaps children left by an error."""
    for pid, read_end in children:
        os.kill(pid, signal.SIGKILL)
        os.close(read_end)
        os.waitpid(pid, 0)
