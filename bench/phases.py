#!/usr/bin/env python3
"""Where `dejima WS -- true` spends its time: the real launcher, in this process, with its phases timed.

    python bench/phases.py WORKSPACE [dejima options...]

Wraps (never replaces) the functions a session start goes through and prints one line per call,
nested, with its start offset and duration, then the process's own exit time. Used by bench/run
(session phases) and by hand. Nothing is faked: the containers, the filter and the audit are real.
"""

from __future__ import annotations

import time

T0 = time.perf_counter()

import atexit  # noqa: E402
import functools  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

CALLS: list[tuple[str, float, float]] = []  # path ("main/start.run_session/..."), start, end (s since T0)
_local = threading.local()  # the call path per thread: teardown removes containers in threads


def timed(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        outer = getattr(_local, "path", "")
        path = f"{outer}/{name}" if outer else name
        start = time.perf_counter() - T0
        _local.path = path
        try:
            return function(*args, **kwargs)
        finally:
            _local.path = outer
            CALLS.append((path, start, time.perf_counter() - T0))
    return wrapper


def wrap(owner: Any, names: str, prefix: str = "") -> None:
    for name in names.split():
        setattr(owner, name, timed(prefix + name, getattr(owner, name)))


# (module, class or "") -> (names to time, the prefix they are shown with); each is wrapped once
# its module is imported, so the launcher imports what it imports when it would (a module imported
# while the filter starts is timed there, not before main()).
TIMED = {
    ("dejima.orchestration.start_request", ""): ("resolve_manifests network_facts", "start_request."),
    ("dejima.orchestration.start", ""): ("review_findings check_findings prepare_session run_session read_facts",
                                         "start."),
    ("dejima.orchestration.start_plan", ""): ("plan_start build_session_plan", "start_plan."),
    ("dejima.adapters.image_builds", ""): ("resolve_base recipes ensure_image image_needs build_needed", "images."),
    ("dejima.orchestration.session", ""): ("remove_stale _run_attached check_filter_alive teardown", "session."),
    ("dejima.orchestration.executor", ""): ("_wait_ready _start_attached stop_filter_and_read", "session."),
    ("dejima.orchestration.executor", "Executor"): ("run unwind", "executor."),
    ("dejima.orchestration.exit_audit", ""): ("recover start finish", "audit."),
    ("dejima.orchestration.prestart", ""): ("begin", "prestart."),
    ("dejima.orchestration.prestart", "Prestarted"): ("adopt", "prestart."),
    ("dejima.adapters.runtime", "Runtime"): ("image_id create start wait stop logs remove containers gateway memory "
                                    "inspect", "engine."),
}


def instrument() -> None:
    """Wrap what is imported already; hook imports to wrap the rest as it arrives."""
    import builtins

    pending = dict(TIMED)
    original = builtins.__import__

    lock = threading.RLock()  # a start's actions import on threads of their own: each module is wrapped once

    def wrap_arrived() -> None:
        with lock:
            for (module_name, class_name), (names, prefix) in list(pending.items()):
                owner = sys.modules.get(module_name)
                if owner is not None and class_name:
                    owner = getattr(owner, class_name, None)
                if owner is not None and all(hasattr(owner, n) for n in names.split()):  # fully initialised
                    wrap(owner, names, prefix)
                    del pending[(module_name, class_name)]

    def hooked(name: str, *args: Any, **kwargs: Any) -> Any:
        module = original(name, *args, **kwargs)
        if pending:
            wrap_arrived()
        return module

    wrap_arrived()
    builtins.__import__ = hooked


def report() -> None:
    out = sys.stderr
    print(f"{(time.perf_counter() - T0) * 1000:8.1f} ms at exit (atexit)", file=out)
    for path, start, end in sorted(CALLS, key=lambda c: (c[1], c[0].count("/"))):
        depth, name = path.count("/"), path.rsplit("/", 1)[-1]
        print(f"{start * 1000:8.1f} ms {'  ' * depth}{name:<40s} {(end - start) * 1000:8.1f} ms", file=out)
    if os.environ.get("DEJIMA_BENCH_PHASES"):
        with open(os.environ["DEJIMA_BENCH_PHASES"], "w") as handle:
            main = [(start, end) for path, start, end in CALLS if path == "main"]
            json.dump({"imports_end": IMPORTED, "calls": CALLS, "main": main[0] if main else [0.0, 0.0],
                       "exit": time.perf_counter() - T0}, handle)


if __name__ == "__main__":
    from dejima.cli.launch import main

    instrument()
    IMPORTED = time.perf_counter() - T0
    atexit.register(report)
    print(f"{0:8.1f} ms imports (CLI, engine client) {IMPORTED * 1000:8.1f} ms", file=sys.stderr)
    status = timed("main", main)(sys.argv[1:])
    sys.exit(status)
