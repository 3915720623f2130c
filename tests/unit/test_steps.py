"""The start's executor (dejima.orchestration.steps) with fake steps: order, overlap, failure cleanup, dry runs."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

import pytest

from dejima.orchestration.steps import Step, StepGraphError, apply, ordered

WAIT = 10.0  # bounds every wait below; none is reached when the executor works


class Log:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.lock = threading.Lock()

    def add(self, line: str) -> None:
        with self.lock:
            self.lines.append(line)

    def step(self, name: str, needs: tuple[str, ...] = (), fails: bool = False, effect: bool = True) -> Step:
        def run(done: Mapping[str, Any]) -> str:
            self.add(f"run {name} after {sorted(done)}")
            if fails:
                raise RuntimeError(f"{name} failed")
            return f"{name}-result"

        return Step(name, run, needs, undo=lambda result: self.add(f"undo {name} ({result})"), effect=effect)


def test_each_step_runs_after_what_it_needs_and_sees_its_results() -> None:
    log = Log()
    seen: dict[str, Any] = {}
    steps = [log.step("images"), log.step("home"),
             Step("plan", lambda done: seen.update(done) or "plan", needs=("images", "home")),
             log.step("remember", needs=("plan",))]
    applied = apply(steps)
    assert seen == {"images": "images-result", "home": "home-result"}
    assert applied.results["remember"] == "remember-result"
    assert applied.finished.index("plan") > max(applied.finished.index("images"), applied.finished.index("home"))
    assert log.lines[-1] == "run remember after ['home', 'images', 'plan']"


def test_independent_steps_run_at_once() -> None:
    """Both wait for the other at a barrier: run one after the other, the barrier would break."""
    barrier = threading.Barrier(2, timeout=WAIT)
    applied = apply([Step("a", lambda _: barrier.wait()), Step("b", lambda _: barrier.wait())])
    assert sorted(applied.results.values()) == [0, 1]


def test_a_failure_stops_the_rest_waits_for_running_steps_and_undoes_dependents_first() -> None:
    log = Log()
    sibling_running, failed = threading.Event(), threading.Event()

    def sibling(_: Mapping[str, Any]) -> str:
        sibling_running.set()
        assert failed.wait(WAIT)  # still running when the failure happens
        log.add("sibling done")
        return "sibling-result"

    def fails(_: Mapping[str, Any]) -> None:
        assert sibling_running.wait(WAIT)
        failed.set()
        raise RuntimeError("proxy failed")

    steps = [log.step("dirs"), log.step("gate", needs=("dirs",)),
             Step("sibling", sibling, needs=("dirs",), undo=lambda r: log.add(f"undo sibling ({r})")),
             Step("proxy", fails, needs=("gate",)), log.step("plan", needs=("proxy",))]
    with pytest.raises(RuntimeError, match="proxy failed"):
        apply(steps)
    assert not any(line.startswith("run plan") for line in log.lines)
    undos = [line for line in log.lines if line.startswith("undo")]
    assert undos[-1] == "undo dirs (dirs-result)"  # what the others needed is undone last
    assert set(undos) == {"undo dirs (dirs-result)", "undo gate (gate-result)", "undo sibling (sibling-result)"}
    assert log.lines.index("sibling done") < log.lines.index("undo sibling (sibling-result)")


def test_a_signal_in_a_step_unwinds_too() -> None:
    log = Log()

    def interrupted(_: Mapping[str, Any]) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        apply([log.step("home"), Step("images", interrupted, needs=("home",))])
    assert log.lines == ["run home after []", "undo home (home-result)"]


def test_unwind_after_success_undoes_everything_and_reports_the_first_failed_undo() -> None:
    log = Log()

    def broken_undo(_: Any) -> None:
        raise OSError("engine gone")

    steps = [log.step("a"), Step("b", lambda _: "b", needs=("a",), undo=broken_undo), log.step("c", needs=("b",))]
    applied = apply(steps)
    with pytest.raises(OSError, match="engine gone"):
        applied.unwind()
    assert [line for line in log.lines if line.startswith("undo")] == ["undo c (c-result)", "undo a (a-result)"]


def test_a_dry_run_runs_only_what_changes_nothing_with_previews_for_the_rest() -> None:
    log = Log()
    steps = [Step("images", lambda _: log.add("built"), preview=lambda _: ("<filter image>", "<session image>")),
             Step("home", lambda _: log.add("made home")),  # an effect without a preview: None
             Step("facts", lambda _: "facts", effect=False),
             Step("plan", lambda done: (done["images"], done["home"], done["facts"]), needs=("images", "home", "facts"),
                  effect=False)]
    applied = apply(steps, dry=True)
    assert applied.results["plan"] == (("<filter image>", "<session image>"), None, "facts")
    assert log.lines == []


@pytest.mark.parametrize(("steps", "message"), [
    ([Step("a", lambda _: 1), Step("a", lambda _: 2)], "step names used twice: a"),
    ([Step("a", lambda _: 1, needs=("b",))], "steps need what no step makes: a needs b"),
    ([Step("a", lambda _: 1, needs=("b",)), Step("b", lambda _: 1, needs=("a",)), Step("c", lambda _: 1)],
     "steps that need each other: a, b"),
])
def test_a_broken_graph_starts_nothing(steps: list[Step], message: str) -> None:
    with pytest.raises(StepGraphError, match=message):
        apply(steps)


def test_the_order_keeps_the_declared_order_among_equals() -> None:
    steps = [Step("z", lambda _: 1), Step("y", lambda _: 1, needs=("x",)), Step("x", lambda _: 1)]
    assert [step.name for step in ordered(steps)] == ["z", "x", "y"]
