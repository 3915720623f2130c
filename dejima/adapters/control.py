"""The host's end of a session's control channel: which sessions run here, and one message to one.

A running session's state directory (``$XDG_STATE_HOME/dejima/sessions/<id>/``) holds its
launcher's token, its workspace and ``run/control.sock``, the filter's control socket (mounted
into the filter alone, owned by the launcher's uid). Finding sessions needs no container engine.
"""

from __future__ import annotations

import json
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dejima.adapters import host
from dejima.adapters.violations import RUN_DIR, sessions_dir
from dejima.core.plan import CONTROL_SOCKET
from dejima.errors import SessionError

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


def send(session: RunningSession, message: dict[str, Any]) -> dict[str, Any]:
    """One message, one answer; SessionError when the filter cannot be reached."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(TIMEOUT_SECONDS)
            sock.connect(str(session.socket))
            sock.sendall(json.dumps(message).encode() + b"\n")
            data = b""
            while not data.endswith(b"\n"):
                chunk = sock.recv(65536)
                if not chunk:
                    break
                data += chunk
    except OSError as exc:
        raise SessionError(
            f"cannot reach session {session.session_id}'s filter: {exc.strerror or exc}",
            hint="the session may have just ended; `dejima sessions` lists the running ones",
            reference="control-unreachable",
        ) from exc
    try:
        answer = json.loads(data)
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        raise SessionError(f"session {session.session_id}'s filter gave no answer",
                           hint="the session may have just ended", reference="control-unreachable")
    return answer
