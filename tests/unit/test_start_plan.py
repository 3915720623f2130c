"""The start as data (orchestration/start_plan.py): facts read first, then ``plan_start`` with no I/O to a
frozen ``StartPlan`` holding the whole start: its actions, each with its undo (the executor that applies
them: tests/unit/test_executor.py). The facts here are read dry (as ``--render`` reads them), then varied by
hand; a real start's plan against a render's is tests/integration/test_render_equals_run.py."""

from __future__ import annotations

import dataclasses
import json
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
from dejima.proxy.sources import CredentialError
from dejima.ui.console import UI
from tests.unit.test_api import owned

OPTIONS = start_request.Options(upstream_dns=("192.0.2.53",))


def dry_facts(workspace: Path, forges: tuple[str, ...] = ("github",),
              selection: start_request.Selection | None = None) -> tuple[StartFacts, Resolved]:
    ui = UI(quiet=True)
    resolved = start_request.resolve_manifests(workspace, selection or start_request.Selection(forges=forges), ui)
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
    assert plan.routes is not None and "bridge" in json.loads(plan.session.filter_config)


def test_the_plan_is_a_function_of_its_facts(tmp_path: Path) -> None:
    """The placeholders and decoys follow from the facts' draws: the same facts give an equal plan; other
    draws give other values and nothing else, so the plan's hash (which leaves drawn values out, as it leaves
    out the session's id) stays; a route's upstream is in the hash."""
    from dejima.adapters.session_dirs import new_draws

    facts, resolved = dry_facts(owned(tmp_path))
    settings = host.load_settings()
    plan = plan_start(None, resolved, settings, OPTIONS, facts)
    assert plan_start(None, resolved, settings, OPTIONS, facts) == plan
    assert plan.session.plan_hash == plan_start(None, resolved, settings, OPTIONS, facts).session.plan_hash
    other = plan_start(None, resolved, settings, OPTIONS, replace(facts, draws=new_draws()))
    assert other != plan and other.session.plan_hash == plan.session.plan_hash
    assert plan.routes is not None and other.routes is not None
    assert sorted(other.session.session.environment) == sorted(plan.session.session.environment)
    assert other.session.session.environment["GH_TOKEN"] != plan.session.session.environment["GH_TOKEN"]
    assert replace(other.routes, routes=(), decoys=plan.routes.decoys, environment=()) == replace(
        plan.routes, routes=(), environment=())
    elsewhere = replace(settings, credentials=replace(settings.credentials,
                                                      upstreams={"github-api": "https://gh.example.com"}))
    assert plan_start(None, resolved, elsewhere, OPTIONS, facts).session.plan_hash != plan.session.plan_hash


def test_the_plan_is_frozen_and_names_sources_only(tmp_path: Path) -> None:
    facts, resolved = dry_facts(owned(tmp_path))
    plan = plan_start(None, resolved, host.load_settings(), OPTIONS, facts)
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.notes = ("changed",)  # type: ignore[misc]
    assert plan.routes is not None
    assert set(plan.routes.names) == {"github-api", "github-uploads", "github-git"}
    assert {planned.source for planned in plan.routes.routes} == {("env", ("GH_TOKEN",))}  # named, never read
    assert "interception" not in repr(plan)  # the session CA is made when applied, never planned
    relayed = json.loads(plan.session.filter_config)["intercept"]["names"]
    assert plan.routes.intercepted and relayed == sorted(plan.routes.intercepted)
    assert plan.private_dirs[0] == Path(plan.request.home_dir)
    assert plan.record == (facts.session_dir / "workspace", str(tmp_path))


def test_a_route_whose_source_the_host_lacks_is_left_out_with_a_note(tmp_path: Path) -> None:
    facts, resolved = dry_facts(owned(tmp_path))
    missing = CredentialError("forges/github.toml credentials route 'github-git': GH_TOKEN is not set")
    facts = replace(facts, credentials_present=frozenset({"github-api", "github-uploads"}),
                    credentials_skipped=(missing,))
    plan = plan_start(None, resolved, host.load_settings(), OPTIONS, facts)
    assert plan.routes is not None
    assert plan.routes.names == ("github-api", "github-uploads")
    assert plan.notes == (f"{missing.message}; the session starts without that route",)
    assert not any(name.startswith("GIT_CONFIG") for name in plan.session.session.environment)
    none = plan_start(None, resolved, host.load_settings(), OPTIONS,
                      replace(facts, credentials_present=frozenset()))
    assert none.routes is None and "bridge" not in json.loads(none.session.filter_config)


MANIFESTS = {  # the manifests a session may have, and the routes they declare
    "a forge": (start_request.Selection(forges=("github",)), ("github-api", "github-uploads", "github-git")),
    "an agent's backend": (start_request.Selection(harness="claude-code", backend="anthropic"),
                           ("anthropic-api-key",)),
    "both": (start_request.Selection(harness="claude-code", backend="anthropic", forges=("github",)),
             ("anthropic-api-key", "github-api", "github-uploads", "github-git")),
}


@pytest.mark.parametrize("manifests", sorted(MANIFESTS))
@pytest.mark.parametrize("present", ["not read (render)", "none", "the first", "all"])
def test_the_card_the_render_the_environment_and_the_proxy_name_the_routes_served_and_no_other(
        tmp_path: Path, manifests: str, present: str) -> None:
    """What the boundary card and the render say of the credential routes, the variables the session gets,
    the filter's relays and canaries, and the routes the proxy serves all come from one routes plan: a route
    whose source the host lacks is named by none of them (not shown as swapped in by a proxy that will not
    be there), and every route served is named by all."""
    from dejima.core.secret import Secret
    from dejima.proxy.setup import served_config
    from dejima.proxy.sources import FixedSource
    from dejima.ui.views import boundary_card, format_plan

    selection, declared = MANIFESTS[manifests]
    has = {"not read (render)": None, "none": frozenset(), "the first": frozenset(declared[:1]),
           "all": frozenset(declared)}[present]
    facts, resolved = dry_facts(owned(tmp_path), selection=selection)
    plan = plan_start(None, resolved, host.load_settings(), OPTIONS, replace(facts, credentials_present=has))
    expected = set(declared) if has is None else set(has)
    sources = {name: FixedSource(name, Secret("real-" + name)) for name in expected}
    served = {spec.route.name for spec in served_config(plan.routes, sources).routes} if plan.routes else set()
    assert served == expected  # the proxy serves what the host has a source for
    card, render = "\n".join(boundary_card(plan.session)), format_plan(plan.session)
    env = plan.session.session.environment
    config = json.loads(plan.session.filter_config)
    by_name = {route.name: route for m in resolved.manifests for route in m.credentials}
    for name in declared:
        route, on = by_name[name], name in served
        assert (f"{name}:" in card) == on, card
        assert (f"{name} " in render) == on, render
        if route.placeholder_env:
            assert (route.placeholder_env in env) == on, sorted(env)
        if route.base_url_env or route.scheme == "Basic":
            assert any(f"/r/{name}" in value for value in env.values()) == on, sorted(env)
        if route.intercept:
            assert (route.upstream.removeprefix("https://") in config.get("intercept", {}).get("names", [])) == on
    assert ("bridge" in config) == bool(served) and ("canaries" in config) == bool(served)
    if not served:
        assert "credentials none" in card and plan.routes is None
        assert not any(name.startswith("GIT_CONFIG") for name in env)


def test_the_engine_is_given_no_secret_the_proxy_serves(tmp_path: Path) -> None:
    """What the engine gets for both containers (their create requests, what `docker inspect` shows) comes
    from the plan, which names each source: the secrets the proxy serves, read on the host, are in neither;
    the session holds the same placeholder the proxy checks."""
    from dejima.adapters.runtime import create_body
    from dejima.core.secret import Secret
    from dejima.proxy.setup import served_config
    from dejima.proxy.sources import FixedSource

    selection, declared = MANIFESTS["both"]
    facts, resolved = dry_facts(owned(tmp_path), selection=selection)
    plan = plan_start(None, resolved, host.load_settings(), OPTIONS, facts)
    assert plan.routes is not None
    real = {name: "ghp_" + name.replace("-", "") + "R" * 30 for name in declared}
    config = served_config(plan.routes, {name: FixedSource(name, Secret(value)) for name, value in real.items()})
    engine = json.dumps([create_body(plan.session.filter), create_body(plan.session.session),
                         plan.session.filter_config])
    for value in real.values():
        assert value not in engine and value not in repr(plan)
    served = {spec.route.name: spec for spec in config.routes}
    env = plan.session.session.environment
    assert env["ANTHROPIC_API_KEY"] == served["anthropic-api-key"].route.placeholder
    assert env["GH_TOKEN"] == served["github-api"].route.placeholder
    import asyncio

    assert asyncio.run(served["github-api"].source.current()).reveal() == real["github-api"]  # the control


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
