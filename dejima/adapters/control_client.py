"""The host's end of a session's control channel: which sessions run here, and one message to one.

A running session's state directory (``$XDG_STATE_HOME/dejima/sessions/<id>/``) holds its
launcher's token, its workspace and ``run/control.sock``, the filter's control socket (mounted
into the filter alone, owned by the launcher's uid). Finding sessions needs no container engine.
"""

from __future__ import annotations

import errno
import json
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dejima.adapters import host
from dejima.adapters.session_dirs import RUN_DIR, sessions_dir
from dejima.core.plan import CONTROL_SOCKET
from dejima.errors import SessionEnded, SessionError

TIMEOUT_SECONDS = 5.0


@dataclass(frozen=True, slots=True)
class RunningSession:
    session_id: str
    workspace: str
    socket: Path


def running_sessions() -> list[RunningSession]:
    """Sessions whose launcher lives and whose filter has a control socket, oldest id order."""
    root = sessions_dir()
    found = []
    for directory in sorted(root.iterdir()) if root.is_dir() else ():
        control = directory / RUN_DIR / CONTROL_SOCKET
        workspace = host.read_record(directory, "workspace")
        if workspace is not None and control.exists() and host.owner_alive(directory):
            found.append(RunningSession(directory.name, workspace, control))
    return found


def sessions_for(directory: Path, sessions: list[RunningSession]) -> list[RunningSession]:
    """The sessions whose workspace is ``directory`` or one of its parents."""
    here = directory.resolve()
    return [s for s in sessions if here == Path(s.workspace) or Path(s.workspace) in here.parents]


# The filter is gone: nothing listens on its socket (or the socket is gone with its run directory),
# or it closed the connection before answering. A session's filter ends only with the session.
_GONE = frozenset({errno.ECONNREFUSED, errno.ENOENT, errno.ECONNRESET, errno.EPIPE})


def _ended(session: RunningSession) -> SessionEnded:
    return SessionEnded(
        f"session {session.session_id} has ended (its filter is gone): nothing was changed in it",
        hint="`dejima sessions` lists the running ones; a new session on the workspace takes grants again "
             "(--persist on a running session keeps a grant for the next ones)")


def send(session: RunningSession, message: dict[str, Any]) -> dict[str, Any]:
    """One message, one answer. SessionEnded when the session ended before answering (its filter is
    gone, even in the middle of the exchange); SessionError when its filter cannot be reached otherwise."""
    data = b""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(TIMEOUT_SECONDS)
            sock.connect(str(session.socket))
            sock.sendall(json.dumps(message).encode() + b"\n")
            while not data.endswith(b"\n"):
                chunk = sock.recv(65536)
                if not chunk:
                    break
                data += chunk
    except OSError as exc:
        if exc.errno in _GONE:
            raise _ended(session) from exc
        raise SessionError(
            f"cannot reach session {session.session_id}'s filter: {exc.strerror or exc}",
            hint="`dejima sessions` lists the running ones; a filter that does not answer within "
                 f"{TIMEOUT_SECONDS:g} s is stuck: `dejima stop {session.session_id}` ends its session",
            reference="control-unreachable",
        ) from exc
    if not data:
        raise _ended(session)  # it closed the connection without a word: it went away with its session
    try:
        answer = json.loads(data)
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        raise SessionError(f"session {session.session_id}'s filter gave an answer that is not a JSON object",
                           hint="this is a bug in dejima, please report it", reference="control-unreachable")
    return answer
