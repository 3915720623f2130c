"""The session management commands: list the sessions of a scope, stop one, clean up what stale
launchers left (their containers, the refusals their filters printed)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from dejima.adapters import host
from dejima.adapters.session_dirs import ViolationStore, sessions_dir
from dejima.core import labels
from dejima.errors import UsageError
from dejima.orchestration.session_reporter import SessionReporter

if TYPE_CHECKING:
    from dejima.adapters.runtime import Runtime


@dataclass(frozen=True, slots=True)
class SessionInfo:
    session_id: str
    workspace: str
    status: str  # running / stale / partial
    containers: tuple[str, ...]
    launcher_pid: str

    def to_json(self) -> dict[str, object]:
        return {
            "session": self.session_id, "workspace": self.workspace, "status": self.status,
            "containers": list(self.containers), "launcher_pid": self.launcher_pid,
        }


def list_sessions(runtime: Runtime, scope: str) -> list[SessionInfo]:
    grouped: dict[str, list[tuple[str, str, dict[str, str]]]] = {}
    for c in runtime.containers({labels.SCOPE: scope}):
        if c.labels.get(labels.ROLE) not in (labels.ROLE_FILTER, labels.ROLE_SESSION):
            continue
        grouped.setdefault(c.labels.get(labels.SESSION, "?"), []).append((c.id, c.status, c.labels))
    found = []
    for session_id, members in sorted(grouped.items()):
        first = members[0][2]
        token = first.get(labels.LAUNCHER, "")
        alive = host.launcher_alive(token)
        roles = {m[2].get(labels.ROLE) for m in members}
        status = "running" if alive and roles == {labels.ROLE_FILTER, labels.ROLE_SESSION} else (
            "starting" if alive else "stale")
        launcher = host.Launcher.parse(token)
        found.append(SessionInfo(
            session_id, first.get(labels.WORKSPACE, "?"), status,
            tuple(m[0][:12] for m in members), str(launcher.pid) if launcher else "?",
        ))
    return found


STOP_MARGIN = 30.0  # seconds a launcher gets, past the command's stop_timeout, to stop its filter and remove both


def stop_session(runtime: Runtime, scope: str, session_id: str, stop_timeout: float = 5.0) -> list[str]:
    """Ask the session's launcher to end it (executor.STOP_SIGNAL: as SIGTERM, the command gets ``stop_timeout``
    seconds, the filter's records and the audit are kept, and the launcher says it was stopped) and wait for its
    containers to go; whatever is left then (no launcher, or one this user may not signal) is removed here."""
    found = runtime.containers({labels.SCOPE: scope, labels.SESSION: session_id})
    if not found:
        raise UsageError(f"no session {session_id!r}", hint="`dejima sessions` lists the running ones")
    from dejima.orchestration import session
    from dejima.orchestration.executor import STOP_SIGNAL

    members = [c.id for c in found]
    launcher = host.Launcher.parse(found[0].labels.get(labels.LAUNCHER, ""))
    if launcher is not None and launcher.signal(STOP_SIGNAL):
        for container in members:
            if not runtime.wait_removed(container, stop_timeout + STOP_MARGIN):
                break
    session.teardown(runtime, members)
    return members


def record_stale_violations(session_id: str, output: str) -> None:
    """A crashed launcher could not record its session's refusals: take them from the filter."""
    if not output:
        return  # the filter is gone (another launcher took it): keep what was recorded
    store = ViolationStore(session_id)
    if store.path.exists():
        store.path.unlink()  # the filter's log holds every record; start over rather than double
    store.append_output(output)


def clean(runtime: Runtime, scope: str, ui: SessionReporter, everything: bool) -> int:
    if everything:
        sessions = list_sessions(runtime, scope)
        for info in sessions:
            stop_session(runtime, scope, info.session_id)
            ui.info(f"removed session {info.session_id} ({info.status})")
        return len(sessions)
    from dejima.orchestration import session

    with host.locked(sessions_dir()):
        return len(session.remove_stale(runtime, scope, ui, record_stale_violations))
