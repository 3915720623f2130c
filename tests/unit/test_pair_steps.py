"""The container pair's start as steps (orchestration/start_plan.py pair_outline, orchestration/session.py
pair_steps): what each step waits for.
The graph is data, read without running a step; the steps themselves run against a real engine in
tests/integration (test_lifecycle, test_fail_closed, test_prestart, test_interactive)."""

from __future__ import annotations

from typing import Any

import pytest

from dejima.orchestration.session import pair_steps
from dejima.orchestration.start_plan import pair_outline
from dejima.orchestration.steps import ordered
from tests.unit.core.test_plan import plan

AUDIT = {"audit-start": lambda _: None}


def needs(interactive: bool = False, gated: bool = True) -> dict[str, set[str]]:
    planned = plan(command=None) if interactive else plan()
    gate: Any = object() if gated else None
    steps = pair_steps(object(), planned, [], [], gate, 30.0, AUDIT)  # type: ignore[arg-type]
    ordered(steps)  # a graph the executor can run: no cycle, no unknown need
    graph = {step.name: set(step.needs) for step in steps}
    # the steps the pair runs are the ones the plan declares, with the same needs
    assert graph == {d.name: set(d.needs) for d in pair_outline(planned.interactive, gated)}
    return graph


def test_the_callers_steps_run_once_the_filter_exists_and_before_the_session_starts() -> None:
    graph = needs()
    assert graph["audit-start"] == {"filter", "boundary"}
    assert {"session", "audit-start"} <= graph["session-start"]


def test_behind_the_gate_the_session_starts_while_the_filter_gets_ready() -> None:
    graph = needs()
    assert "filter-ready" not in graph["session-start"]  # overlapping the ruleset's apply and verify
    assert {"filter-ready", "session-start", "audit-start"} <= graph["open-gate"]  # the command waits for both
    assert graph["filter-start"] == {"filter-configuration"}  # the configuration is sent before the start
    assert graph["session"] == {"filter"}  # it names the filter's namespaces


def test_without_a_gate_the_session_starts_only_once_the_filter_is_ready() -> None:
    assert "filter-ready" in needs(gated=False)["session-start"]


def test_an_interactive_terminal_is_handed_over_only_after_the_gate() -> None:
    graph = needs(interactive=True)
    assert "session-start" not in graph  # the docker CLI starts it, once run() has the gate open
    assert {"filter-ready", "session", "audit-start"} <= graph["open-gate"]


@pytest.mark.parametrize("name", ["filter", "session", "open-gate", "unknown"])
def test_a_caller_acts_only_for_its_own_steps(name: str) -> None:
    from dejima.orchestration.steps import StepGraphError

    with pytest.raises(StepGraphError, match="a caller acts only"):
        pair_steps(object(), plan(), [], [], object(), 30.0, {name: lambda _: None})  # type: ignore[arg-type]
