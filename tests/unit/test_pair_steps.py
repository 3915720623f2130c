"""The container pair's start as steps (orchestration/session.py pair_steps): what each step waits for.
The graph is data, read without running a step; the steps themselves run against a real engine in
tests/integration (test_lifecycle, test_fail_closed, test_prestart, test_interactive)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from dejima.orchestration.session import pair_steps
from dejima.orchestration.steps import Step, ordered
from tests.unit.core.test_plan import plan

AUDIT = Step("audit-start", lambda _: None)


def needs(interactive: bool = False, gated: bool = True) -> dict[str, set[str]]:
    planned = plan(command=None) if interactive else plan()
    gate: Any = object() if gated else None
    steps = pair_steps(object(), planned, [], [], gate, 30.0, [AUDIT])  # type: ignore[arg-type]
    ordered(steps)  # a graph the executor can run: no cycle, no unknown need
    return {step.name: set(step.needs) for step in steps}


def test_the_callers_steps_run_once_the_filter_exists_and_before_the_session_starts() -> None:
    graph = needs()
    assert graph["audit-start"] == {"filter"}
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


@pytest.mark.parametrize("name", ["filter", "session", "open-gate"])
def test_a_callers_step_may_not_take_a_name_the_pair_uses(name: str) -> None:
    from dejima.orchestration.steps import StepGraphError

    with pytest.raises(StepGraphError, match="used twice"):
        ordered(pair_steps(object(), plan(), [], [], object(), 30.0,  # type: ignore[arg-type]
                           [replace(AUDIT, name=name)]))
