"""`dejima PATH --render` prints the plan a start runs: both apply the same steps (orchestration/start.py
start_steps), the render dry. With a real engine: the plan a real start prepares and the rendered one
differ only in what only the engine knows (the session's id, its images, the engine's gateway) and
in the session's random placeholders; the credential routes, the bridge, the intercepted hosts and
the session's variables are the same. The render changes nothing on the host and reads no secret:
its routes' sources are named, not read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dejima.adapters import host
from dejima.adapters.runtime import Runtime
from dejima.core.plan import SessionPlan
from dejima.orchestration import start, start_request
from dejima.ui.console import UI
from dejima.ui.views import format_plan


def shown(plan: SessionPlan, gateway: str) -> list[str]:
    """The render's text with what only a start knows put back to the render's words."""
    text = format_plan(plan).replace(plan.session_id, "render")
    lines = text.splitlines()[1:]  # the first line holds the plan's hash, which covers the placeholders
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
    rendered = start.render_plan(workspace, None, resolved, settings, options, ui)
    assert files_under(launcher_home) == before  # a render makes no directory, record or FIFO

    prepared = start.prepare_session(workspace, None, resolved, settings, runtime, ui, options)
    planned = prepared.plan
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
    unread = start.render_plan(workspace, None, resolved, settings, options, ui)
    assert relays(unread) == relays(rendered) and sorted(unread.session.environment) == sorted(
        rendered.session.environment)
