"""The filter started before the plan exists.

Before it can create the filter, a start spends ~0.15 s importing the launcher's code, reading the
manifests and making the plan; the engine then takes ~0.25 s to start the filter. For a workspace
that had a session before, the launcher remembers that session's filter create request (its
per-session values marked) and, first thing, creates and starts the same filter for the new session
on a thread, without a configuration: the filter waits for one on its FIFO (core/paths.py).

Once the plan exists, its filter's create request must equal the prestarted one exactly; then that
filter is the session's and gets the plan's configuration through the FIFO (orchestration/session.py),
and its ready line must name the plan's ruleset as always. Otherwise, or when the prestart failed
(the engine, an image gone), it is removed and the plan's filter is created the usual way, which
reports whatever is really wrong. A launcher that stops before adopting it removes it too.

This module is imported before the plan's code (cli/launch.py): it keeps to the standard library,
the engine's client and the host's paths.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from dejima.adapters import host
from dejima.adapters.engine import Engine
from dejima.adapters.fifo import make_run_dir
from dejima.adapters.session_dirs import new_session_id, run_dir
from dejima.core.paths import FILTER_RUN_DIR, IMAGE_REPOSITORY
from dejima.errors import DiagnosticError
from dejima.orchestration.background import Background

SESSION_MARK, LAUNCHER_MARK = "{dejima-session}", "{dejima-launcher}"
REMEMBERED = "prestart"  # in the state directory (never mounted into a session), one file per workspace


def _remembered(workspace: Path) -> Path:
    key = hashlib.sha256(f"{host.scope()}\0{workspace}".encode()).hexdigest()[:32]  # scopes share the state
    return host.state_dir() / REMEMBERED / f"{key}.json"


def _request_text(name: str, body: dict[str, Any]) -> str:
    return json.dumps({"name": name, "body": body}, sort_keys=True)


def remember(workspace: Path, name: str, body: dict[str, Any], session_id: str, launcher: str) -> None:
    """Keep this session's filter create request for the next start in ``workspace``."""
    text = _request_text(name, body).replace(session_id, SESSION_MARK).replace(launcher, LAUNCHER_MARK)
    path = _remembered(workspace)
    try:
        if path.read_text() == text:
            return
    except OSError:
        pass
    host.ensure_private_dir(path.parent)
    host.write_atomically(path, text.encode())


class Prestarted:
    """A filter being created, then started, on threads, for the session ``session_id``."""

    def __init__(self, engine: Engine, session_id: str, name: str, body: dict[str, Any]) -> None:
        self.session_id, self.name = session_id, name
        self._engine, self._request = engine, _request_text(name, body)
        self.adopted = False
        self._creating = Background(lambda: str(engine.call("POST", "/containers/create", {"name": name}, body)["Id"]),
                                    "filter-prestart-create")
        self._starting = Background(lambda: engine.call("POST", f"/containers/{self._creating.join()}/start"),
                                    "filter-prestart-start")

    def created(self) -> str | None:
        """The container, once its create returned; None when the create failed (the usual path
        meets the same trouble and says what it is)."""
        try:
            return self._creating.join()
        except Exception:  # noqa: BLE001 - see above
            return None

    def adopt(self, name: str, body: dict[str, Any]) -> str | None:
        """The prestarted container, when it was created and its request is exactly the plan's
        (``name`` and ``body``); otherwise None, and it is gone."""
        container = self.created()
        if container is not None and _request_text(name, body) == self._request:
            self.adopted = True
            return container
        self.discard()
        return None

    def join(self) -> None:
        """Wait for the start; raise what it raised (a failed start of an adopted filter is the session's)."""
        self._starting.join()

    def wait(self) -> None:
        self._starting.wait()

    def discard(self) -> None:
        """Remove the container unless a session adopted it (then its teardown does)."""
        self._starting.wait()
        container = self.created()
        if container is not None and not self.adopted:
            try:
                self._engine.call("DELETE", f"/containers/{container}", {"force": 1})
            except Exception:  # noqa: BLE001 - gone already, or the engine is: the stale check finds it later
                pass


# What any filter create request of dejima's has (adapters/runtime.py create_body of core/plan.py's
# filter spec). A remembered request is created before the plan can be compared with it, so one
# that could do more than a filter (planted by whatever could write the state directory) is not.
_HOST_KEYS = frozenset({"Binds", "Tmpfs", "CapDrop", "CapAdd", "SecurityOpt", "NetworkMode", "ReadonlyRootfs", "Init",
                        "Dns", "Sysctls", "PidsLimit", "CpuShares", "Memory", "MemorySwap"})
_BODY_KEYS = frozenset({"Image", "Cmd", "Entrypoint", "User", "Labels", "Env", "WorkingDir", "Hostname", "Tty",
                        "OpenStdin", "StdinOnce", "AttachStdin", "AttachStdout", "AttachStderr", "HostConfig"})


def filter_shaped(body: dict[str, Any], run: Path) -> bool:
    """Whether ``body`` asks for no more than a filter: dejima's filter image with its own
    entrypoint, two capabilities, no new privileges, the run directory as its only mount, a network
    of its own."""
    host_config = body.get("HostConfig")
    if set(body) - _BODY_KEYS or not isinstance(host_config, dict) or set(host_config) - _HOST_KEYS:
        return False
    network = str(host_config.get("NetworkMode", ""))
    return (str(body.get("Image", "")).startswith(f"{IMAGE_REPOSITORY}/filter:") and body.get("Cmd") is None
            and body.get("Entrypoint") is None and host_config.get("CapDrop") == ["ALL"]
            and set(host_config.get("CapAdd") or ()) <= {"NET_ADMIN", "NET_BIND_SERVICE"}
            and host_config.get("SecurityOpt") == ["no-new-privileges:true"]
            and host_config.get("Binds") == [f"{run}:{FILTER_RUN_DIR}:rw"]
            and network not in ("host", "none") and not network.startswith("container:"))


def begin(workspace_argument: str) -> Prestarted | None:
    """Start the filter remembered for this workspace, if there is one; never raises (a start
    that cannot prestart goes the usual way)."""
    workspace = Path(workspace_argument).expanduser().resolve()
    try:
        entry = json.loads(_remembered(workspace).read_text())
        template = _request_text(entry["name"], entry["body"])
    except (OSError, ValueError, KeyError, TypeError, DiagnosticError):  # a bad scope: the usual path says so
        return None
    try:
        session_id, launcher = new_session_id(), host.launcher_token()
        request = json.loads(template.replace(SESSION_MARK, session_id).replace(LAUNCHER_MARK, launcher))
        run = run_dir(session_id)
        if not filter_shaped(request["body"], run):
            return None
        make_run_dir(run)
        return Prestarted(Engine.from_env(), session_id, request["name"], request["body"])
    except Exception:  # noqa: BLE001 - the usual path meets the same trouble and says what it is
        return None
