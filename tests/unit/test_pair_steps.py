"""The container pair's start as actions (orchestration/actions.py pair_actions): what each waits for and how
each is undone. The graph is data, read without applying an action; the executor applies them against a fake
engine in tests/unit/test_executor.py and against a real one in tests/integration (test_lifecycle,
test_fail_closed, test_prestart, test_interactive)."""

from __future__ import annotations

from dataclasses import replace

from dejima.orchestration.actions import CloseFifo, RemoveContainer, pair_actions
from dejima.orchestration.executor import ordered
from tests.unit.core.test_plan import plan


def graph(interactive: bool = False, gated: bool = True) -> dict[str, set[str]]:
    planned = plan(command=None) if interactive else plan()
    planned = replace(planned, gate="/run/gate/go" if gated else None, config_fifo="/run/config")
    actions = pair_actions(planned, 30.0)
    ordered(actions)  # a graph the executor can run: no cycle, no unknown need
    return {p.name: set(p.needs) for p in actions}


def test_the_boundary_and_the_audit_start_once_the_filter_exists_and_before_the_session_starts() -> None:
    needs = graph()
    assert needs["audit-start"] == {"filter", "boundary"}
    assert {"session", "audit-start"} <= needs["session-start"]


def test_behind_the_gate_the_session_starts_while_the_filter_gets_ready() -> None:
    needs = graph()
    assert "filter-ready" not in needs["session-start"]  # overlapping the ruleset's apply and verify
    assert {"filter-ready", "session-start", "audit-start", "gate"} <= needs["open-gate"]  # the command waits for both
    assert needs["filter-start"] == {"filter-configuration"}  # the configuration is sent before the start
    assert needs["session"] == {"filter"}  # it names the filter's namespaces


def test_without_a_gate_the_session_starts_only_once_the_filter_is_ready() -> None:
    needs = graph(gated=False)
    assert "filter-ready" in needs["session-start"] and "open-gate" not in needs


def test_an_interactive_terminal_is_handed_over_only_after_the_gate() -> None:
    needs = graph(interactive=True)
    assert "session-start" not in needs  # the docker CLI starts it, once run() has the gate open
    assert {"filter-ready", "session", "audit-start"} <= needs["open-gate"]


def test_the_teardown_removes_both_containers_at_once_and_ends_the_audit_after_the_session() -> None:
    actions = {p.name: p for p in pair_actions(replace(plan(), gate="/run/gate/go"), 30.0)}
    assert actions["filter"].undo == RemoveContainer(plan().filter.name, keep_output=True)  # its records kept
    assert actions["session"].undo == RemoveContainer(plan().session.name)
    assert actions["filter"].undo_after == actions["session"].undo_after == ()  # at once: the session dies with it
    assert actions["audit-start"].undo_after == ("session",)  # no process of the session left to write
    assert isinstance(actions["gate"].undo, CloseFifo) and "session" in actions["gate"].undo_after
    assert actions["open-gate"].undo is None and actions["filter-ready"].undo is None
