"""`dejima PATH --render` prints the plan a start runs: both make it with the same function from the
host's facts (orchestration/start_plan.py plan_start), the render's facts read dry. With a real
engine: the plan a real start applies and the rendered one differ only in what only the engine
knows (the session's id, its images, the engine's gateway) and in the values drawn from the
session's randomness (its placeholders and decoys, a fact of each); the steps, the credential routes,
the bridge, the intercepted hosts and the session's variables are the same. The render changes
nothing on the host and reads no secret: its routes' sources are named, not read; a start's plan
names them too (the values stay apart from it)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dejima.adapters import host
from dejima.adapters.runtime import Runtime
from dejima.core.plan import SessionPlan
from dejima.orchestration import start, start_request
from dejima.orchestration.start_plan import StartPlan
from dejima.ui.console import UI
from dejima.ui.views import format_plan


def outline(plan: StartPlan) -> list[tuple[str, str, str, tuple[str, ...], str, tuple[str, ...]]]:
    """Each action's name, part, kind, needs, undo kind and undo order (the values hold the session's own paths)."""
    return [(p.name, p.part, type(p.action).__name__, p.needs, type(p.undo).__name__, p.undo_after)
            for p in plan.actions]

def shown(plan: SessionPlan, gateway: str) -> list[str]:
    """The render's text with what only a start knows put back to the render's words."""
    text = format_plan(plan).replace(plan.session_id, "render")
    lines = text.splitlines()[1:]  # the first line holds the plan's hash, which covers the images' tags
    return [line.replace(f", {gateway}/32", "").replace(" (+ the engine gateway, found at start)", "")
            for line in lines]


def files_under(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_render_shows_the_plan_a_start_prepares(runtime: Runtime, images: object, workspace: Path,
                                                launcher_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GH_TOKEN", "ghp_" + "r" * 36)  # the github forge's routes, intercepted hosts among them
    ui = UI(quiet=True)
    settings = host.load_settings()
    resolved = start_request.resolve_manifests(workspace, start_request.Selection(forges=("github",)), ui)
    options = start_request.Options()
    before = files_under(launcher_home)
    render = start.render_start(workspace, None, resolved, settings, options, ui)
    rendered = render.session
    assert files_under(launcher_home) == before  # a render makes no directory, record or FIFO

    prepared = start.prepare_session(workspace, None, resolved, settings, runtime, ui, options)
    planned = prepared.plan
    assert type(prepared.start) is type(render) and planned is prepared.start.session
    # The same actions with the same needs and undos; the same routes, sources, directories, connection and notes.
    assert outline(prepared.start) == outline(render)
    assert prepared.start.private_dirs == render.private_dirs and prepared.start.connection == render.connection
    assert prepared.start.notes == render.notes == ()
    assert prepared.start.routes is not None and render.routes is not None

    def routes(plan: StartPlan) -> list[tuple[str, str, str]]:
        assert plan.routes is not None
        return [(planned.name, str(planned.route.upstream), planned.source_shown) for planned in plan.routes.routes]

    assert routes(prepared.start) == routes(render) and routes(render)
    assert "ghp_" + "r" * 36 not in repr(prepared.start)  # the plan names the source; the value is served apart
    # The proxy serves the planned routes, each with the source read on the host.
    assert prepared.executor.proxy is not None and [spec.route.name for spec in prepared.executor.proxy.routes] == list(
        prepared.start.routes.names)
    gateway = str(runtime.gateway(settings.session.network))
    assert shown(planned, gateway) == shown(rendered, gateway)

    # What the old render left out: the proxy's bridge and TLS fallback, and the variables the routes give.
    def relays(plan: SessionPlan) -> tuple[object, object]:
        config = json.loads(plan.filter_config)
        return config.get("bridge", {}).get("port"), config.get("intercept", {}).get("names")

    assert relays(planned) == relays(rendered) and relays(rendered)[0] is not None and relays(rendered)[1]
    assert sorted(planned.session.environment) == sorted(rendered.session.environment)
    assert "GH_TOKEN" in rendered.session.environment
    assert rendered.session.environment["GH_TOKEN"] != planned.session.environment["GH_TOKEN"]  # each its own
    assert "ghp_" + "r" * 36 not in json.dumps([rendered.session.environment, rendered.filter_config])

    # The render reads no source: with the secret gone from the host, it shows the same routes.
    monkeypatch.delenv("GH_TOKEN")
    unread = start.render_start(workspace, None, resolved, settings, options, ui).session
    prepared.executor.unwind()  # never run: its run directory, gate and record undone
    assert relays(unread) == relays(rendered) and sorted(unread.session.environment) == sorted(
        rendered.session.environment)
