"""The filter started before the plan (orchestration/prestart.py), with a real engine: a second start
in a workspace adopts the filter its first start remembered; a remembered request that is not the
plan's is removed and the plan's filter runs instead; a launcher that stops before adopting it
leaves no container behind."""

from __future__ import annotations

import json
from pathlib import Path

from dejima.adapters import host
from dejima.adapters.runtime import Runtime
from dejima.adapters.session_dirs import sessions_dir
from dejima.orchestration import prestart, start, start_request
from dejima.ui.console import UI
from tests.world import User, containers_of, run_dejima


def start_session(runtime: Runtime, workspace: Path, prestarted: prestart.Prestarted | None,
                  options: start_request.Options | None = None) -> int:
    """What `dejima -q WORKSPACE -- true` does after its prestart (cli/launch.py); ``options``: its flags."""
    ui = UI(quiet=True)
    try:
        resolved = start_request.resolve_manifests(workspace, start_request.Selection(), ui)
        prepared = start.prepare_session(workspace, ("true",), resolved, host.load_settings(), runtime, ui,
                                         options or start_request.Options(), prestarted)
        return start.run_session(prepared, ui)
    finally:
        if prestarted is not None:
            prestarted.discard()


def remembered_file(workspace: Path) -> Path:
    [path] = (host.state_dir() / prestart.REMEMBERED).glob("*.json")
    assert json.loads(path.read_text())["body"]["Labels"]["dejima.workspace"] == str(workspace)
    return path


def test_the_next_start_adopts_the_filter_the_last_one_remembered(runtime: Runtime, images: object, scope: str,
                                                                  workspace: Path, launcher_home: Path) -> None:
    assert prestart.begin(str(workspace)) is None  # nothing remembered yet: the usual start
    assert start_session(runtime, workspace, None) == 0
    text = remembered_file(workspace).read_text()
    assert "{dejima-session}" in text and "{dejima-launcher}" in text  # per-session values marked
    prestarted = prestart.begin(str(workspace))
    assert prestarted is not None
    assert start_session(runtime, workspace, prestarted) == 0
    assert prestarted.adopted
    assert containers_of(runtime, scope, session=prestarted.session_id) == []


def test_a_remembered_request_that_is_not_the_plans_is_removed(runtime: Runtime, images: object, scope: str,
                                                               workspace: Path, launcher_home: Path) -> None:
    assert start_session(runtime, workspace, None) == 0
    path = remembered_file(workspace)
    entry = json.loads(path.read_text())
    entry["body"]["Env"].append("PLANTED=1")  # a filter the plan would not make
    path.write_text(json.dumps(entry))
    prestarted = prestart.begin(str(workspace))
    assert prestarted is not None
    planted = prestarted.created()  # the container exists, so its removal is what is tested
    assert planted is not None
    assert start_session(runtime, workspace, prestarted) == 0  # the plan's own filter ran the session
    assert not prestarted.adopted
    assert runtime.inspect(planted) is None
    assert containers_of(runtime, scope, session=prestarted.session_id) == []
    assert "PLANTED" not in path.read_text()  # the plan's request is remembered again
    again = prestart.begin(str(workspace))
    assert again is not None and start_session(runtime, workspace, again) == 0 and again.adopted


def test_a_launcher_that_stops_before_adopting_leaves_nothing(runtime: Runtime, images: object, user: User,
                                                              scope: str, workspace: Path) -> None:
    first = run_dejima(user, scope, "-q", str(workspace), "--", "true")
    assert first.returncode == 0, first.stderr
    sessions = user.home / ".local/state/dejima" / sessions_dir().relative_to(host.state_dir())
    before = set(sessions.iterdir())
    refused = run_dejima(user, scope, "-q", "--harness", "no-such-harness", str(workspace), "--", "true")
    assert refused.returncode == 2, refused.stderr
    # The prestart did begin (a session id taken, a run directory made, a filter created): all of it went with
    # its filter, the state directory too.
    assert set(sessions.iterdir()) == before
    assert containers_of(runtime, scope, workspace=str(workspace)) == []
