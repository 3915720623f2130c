"""The start as data (orchestration/start_plan.py): facts read first, then ``plan_start`` with no I/O to a
frozen ``StartPlan`` holding the whole start: its actions, each with its undo (the executor that applies
them: tests/unit/test_executor.py). The facts here are read dry (as ``--render`` reads them), then varied by
hand; a real start's plan against a render's is tests/integration/test_render_equals_run.py."""

from __future__ import annotations

import dataclasses
import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import pytest

from dejima.adapters import host
from dejima.core.resolve import Resolved
from dejima.orchestration import start, start_request
from dejima.orchestration.actions import PREPARATION, MakeGate, planned, undo_of
from dejima.orchestration.executor import StartGraphError, ordered
from dejima.orchestration.start_plan import StartFacts, StartPlan, plan_start
from dejima.proxy.sources import CredentialError, UnreadSource
from dejima.ui.console import UI
from tests.unit.test_api import owned

OPTIONS = start_request.Options(upstream_dns=("192.0.2.53",))


def dry_facts(workspace: Path, forges: tuple[str, ...] = ("github",)) -> tuple[StartFacts, Resolved]:
    ui = UI(quiet=True)
    resolved = start_request.resolve_manifests(workspace, start_request.Selection(forges=forges), ui)
    facts, _sources = start.read_facts(workspace, None, resolved, host.load_settings(), OPTIONS, ui,
                                     None, "render")
    return facts, resolved


# Audit events (PEP 578) that reach the host: files, directories, processes, sockets, the environment.
IO_EVENTS = ("open", "os.", "shutil.", "subprocess.", "socket.", "glob.", "tempfile.", "sqlite3.", "pathlib.")

_watched = threading.local()
_seen: list[str] = []


def _hook(event: str, _args: object) -> None:
    if getattr(_watched, "on", False) and event.startswith(IO_EVENTS):
        _seen.append(event)


sys.addaudithook(_hook)  # a hook cannot be removed: it records only while a test's block runs


@contextmanager
def io_recorded() -> Iterator[list[str]]:
    _seen.clear()
    _watched.on = True
    try:
        yield _seen
    finally:
        _watched.on = False


def test_the_hook_sees_io() -> None:
    """The control: the recorder below does see a file read and a directory listing."""
    with io_recorded() as seen:
        Path(__file__).read_bytes()
        os.listdir("/")
    assert "open" in seen and "os.listdir" in seen


def test_the_plan_module_names_no_io_and_no_adapter() -> None:
    """Read as the layering test reads the core: no I/O module, no I/O name, nothing from the adapters."""
    from tests.unit.test_layering import PACKAGE, STDLIB_IO, imports_of, io_names_of

    module = PACKAGE / "orchestration" / "start_plan.py"
    imported = imports_of(module)
    assert io_names_of(module) == set()
    assert not {name for name in imported if name in STDLIB_IO or name.startswith("dejima.adapters")}
    assert imported & {"dejima.core.plan", "dejima.proxy.runner"}  # the control: the reader sees its imports


def test_plan_start_does_no_io(tmp_path: Path) -> None:
    """At run time, what Python's audit hooks see (files opened, directories listed, processes, sockets),
    through everything plan_start calls (the proxy's route planning among them)."""
    facts, resolved = dry_facts(owned(tmp_path))
    settings = host.load_settings()
    plan_start(None, resolved, settings, OPTIONS, facts)  # the modules it imports are loaded before the watch
    with io_recorded() as seen:
        plan = plan_start(None, resolved, settings, OPTIONS, facts)
    assert seen == []
    assert plan.proxy is not None and plan.request.bridge


def test_the_plan_is_frozen_and_names_sources_only(tmp_path: Path) -> None:
    facts, resolved = dry_facts(owned(tmp_path))
    plan = plan_start(None, resolved, host.load_settings(), OPTIONS, facts)
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.notes = ("changed",)  # type: ignore[misc]
    assert plan.proxy is not None
    specs = plan.proxy.prepared.config.routes
    assert {spec.route.name for spec in specs} == {"github-api", "github-uploads", "github-git"}
    assert all(isinstance(spec.source, UnreadSource) for spec in specs)
    assert plan.proxy.prepared.interception is None  # the session CA is made when applied, never planned
    assert dict(plan.proxy.prepared.intercepted) and set(plan.request.intercept) == set(plan.proxy.intercepted)
    assert plan.private_dirs[0] == Path(plan.request.home_dir)
    assert plan.record == (facts.session_dir / "workspace", str(tmp_path))


def test_a_route_whose_source_the_host_lacks_is_left_out_with_a_note(tmp_path: Path) -> None:
    facts, resolved = dry_facts(owned(tmp_path))
    missing = CredentialError("forges/github.toml credentials route 'github-git': GH_TOKEN is not set")
    facts = replace(facts, credentials_present=frozenset({"github-api", "github-uploads"}),
                    credentials_skipped=(missing,))
    plan = plan_start(None, resolved, host.load_settings(), OPTIONS, facts)
    assert plan.proxy is not None
    assert [spec.route.name for spec in plan.proxy.prepared.config.routes] == ["github-api", "github-uploads"]
    assert plan.notes == (f"{missing.message}; the session starts without that route",)
    assert not any(name.startswith("GIT_CONFIG") for name in plan.session.session.environment)
    none = plan_start(None, resolved, host.load_settings(), OPTIONS,
                      replace(facts, credentials_present=frozenset()))
    assert none.proxy is None and not none.request.bridge


@pytest.mark.parametrize("present", [None, frozenset(), frozenset({"github-api"}),
                                     frozenset({"github-api", "github-uploads", "github-git"})])
def test_the_card_and_the_render_name_the_routes_the_proxy_serves_and_no_other(tmp_path: Path,
                                                                              present: frozenset[str] | None) -> None:
    """What the boundary card says of the credential routes comes from the routes planned to run: a route
    whose source the host lacks is not shown as swapped in by a proxy that will not be there."""
    from dejima.ui.views import boundary_card, format_plan

    facts, resolved = dry_facts(owned(tmp_path))
    plan = plan_start(None, resolved, host.load_settings(), OPTIONS, replace(facts, credentials_present=present))
    served = set(plan.proxy.routes) if plan.proxy is not None else set()
    assert {view.route for view in plan.session.credentials} == served
    card, render = "\n".join(boundary_card(plan.session)), format_plan(plan.session)
    for route in ("github-api", "github-uploads", "github-git"):
        assert (f"{route}:" in card) == (route in served), card
        assert (f"{route} " in render) == (route in served), render
    if not served:
        assert "credentials none" in card


def test_other_sessions_on_the_workspace_are_named_in_a_note(tmp_path: Path) -> None:
    facts, resolved = dry_facts(owned(tmp_path), forges=())
    assert plan_start(None, resolved, host.load_settings(), OPTIONS, facts).notes == ()
    shared = plan_start(None, resolved, host.load_settings(), OPTIONS, replace(facts, other_sessions=("a1b2c3d4",)))
    assert shared.notes[0].startswith(f"session a1b2c3d4 is running on {facts.request.workspace} too")


def test_a_policy_that_does_not_pass_is_refused_by_the_plan_too(tmp_path: Path) -> None:
    from dejima.errors import DiagnosticError

    facts, resolved = dry_facts(owned(tmp_path))
    refused = replace(OPTIONS, allow=("169.254.169.254",))  # the cloud metadata address: by policy, no packet
    # as a start asking for it would carry it, had the facts' own policy step not refused it first
    facts = replace(facts, request=replace(facts.request, allow=refused.allow))
    with pytest.raises(DiagnosticError):
        plan_start(None, resolved, host.load_settings(), refused, facts)
    with pytest.raises(DiagnosticError):  # and a start is refused in its facts, before any effect
        start.read_facts(tmp_path, None, resolved, host.load_settings(), refused, UI(quiet=True), None, "render")


def test_the_actions_are_one_graph_each_with_the_undo_the_plan_derives(tmp_path: Path) -> None:
    facts, resolved = dry_facts(owned(tmp_path))
    plan = plan_start(None, resolved, host.load_settings(), OPTIONS, facts)
    assert plan.actions == plan.preparation + plan.pair and plan.preparation and plan.pair
    ordered(plan.actions)  # a graph the executor runs: no name twice, no unknown need, no cycle
    assert all(set(p.needs) <= {q.name for q in plan.actions[:n]} for n, p in enumerate(plan.actions))  # in order
    assert all(p.undo == undo_of(p.action) for p in plan.actions)
    names = [p.name for p in plan.actions]
    assert {"images", "home", "credentials", "run-directory", "start-gate", "record", "filter", "filter-ready",
            "audit-start", "open-gate"} <= set(names)
    assert all(set(p.undo_after) <= set(names) for p in plan.actions)
    # a start with a prestarted filter: its run directory is the prestart's, made before the plan
    prestarted = plan_start(None, resolved, host.load_settings(), OPTIONS, replace(facts, prestarted=True))
    assert "run-directory" not in [p.name for p in prestarted.actions]


def test_plan_start_is_a_function_of_its_facts(tmp_path: Path) -> None:
    """The same facts, the same actions (the routes' placeholders aside: drawn in plan_start until they are facts)."""
    facts, resolved = dry_facts(owned(tmp_path), forges=())
    first, again = (plan_start(None, resolved, host.load_settings(), OPTIONS, facts) for _ in range(2))
    assert first.actions == again.actions and first == again


def test_the_executor_refuses_a_graph_it_cannot_run() -> None:
    one = planned("a", PREPARATION, MakeGate(Path("/nonexistent/a")))
    with pytest.raises(StartGraphError, match="named twice"):
        ordered([one, one])
    with pytest.raises(StartGraphError, match="need what no action makes"):
        ordered([replace(one, needs=("b",))])
    with pytest.raises(StartGraphError, match="need each other"):
        ordered([replace(one, needs=("b",)), replace(one, name="b", needs=("a",))])


def test_a_start_plan_is_what_render_returns(tmp_path: Path) -> None:
    from dejima import api

    rendered = api.render(api.Request(owned(tmp_path), None, forges=["github"], dns_upstreams=["192.0.2.53"]))
    assert isinstance(rendered.start, StartPlan) and rendered.plan is rendered.start.session
    assert rendered.actions == rendered.start.actions


GOLDEN = Path(__file__).parents[1] / "golden" / "start_actions"
SCENARIOS = {  # name -> (forges, harness, command, publish)
    "command-no-routes": ((), "shell", ("make", "test"), ()),
    "interactive-github-routes": (("github",), "shell", None, ()),
    "codex-harness-settings": ((), "codex", ("codex",), ()),
    "published-port": ((), "shell", ("serve",), ("8080",)),
}


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_the_render_prints_the_plans_actions_as_the_golden_file_says(tmp_path: Path, scenario: str,
                                                                     update_golden: bool) -> None:
    """What `--render` prints of the start: plan.actions, each with what it waits for and its undo (host paths,
    the session's uid and the ruleset's digest written as names: they are this machine's)."""
    from dejima import api

    forges, harness, command, publish = SCENARIOS[scenario]
    (tmp_path / "ws").mkdir()
    workspace = owned(tmp_path / "ws")
    rendered = api.render(api.Request(workspace, command, harness=harness, forges=list(forges),
                                      dns_upstreams=["192.0.2.53"], publish=list(publish)))
    text = rendered.text[rendered.text.index("## Start actions"):]
    for path, name in ((rendered.start.request.home_dir, "<home>"), (host.state_dir(), "<state>"),
                       (host.data_dir(), "<data>"), (workspace, "<workspace>")):
        text = text.replace(str(path), name)
    digest = next(p.action.digest for p in rendered.actions if p.name == "filter-ready")  # type: ignore[union-attr]
    text = text.replace(digest, "<digest>").replace(f"(uid {os.getuid() or 4242})", "(uid <session user>)")
    golden = GOLDEN / f"{scenario}.txt"
    if update_golden:
        golden.parent.mkdir(exist_ok=True)
        golden.write_text(text + "\n")
    assert text + "\n" == golden.read_text()
