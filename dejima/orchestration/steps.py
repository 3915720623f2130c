"""One executor for a plan's steps: each runs once what it needs has run, independent ones at once.

    applied = apply([Step("images", build), Step("home", make_home),
                     Step("plan", lambda done: plan(done["images"], done["home"]), needs=("images", "home"))])
    applied.results["plan"]; ...; applied.unwind()   # undoes what was applied, dependents first

A step that raises stops the run: no further step starts, the ones running are waited for, and every
step applied so far is undone (its ``undo``, dependents before what they needed), then the error is
raised. ``dry=True`` (``--render``) runs only the steps that change nothing and read no secret
(``effect=False``); an effect's ``preview`` stands in for its result. The graph is checked before
anything runs: a name twice, a need that names no step or a cycle is a bug, and nothing starts.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Done = Mapping[str, Any]  # the results of the steps run so far, by name


@dataclass(frozen=True, slots=True)
class Step:
    name: str
    run: Callable[[Done], Any]  # given the results of the steps run so far
    needs: tuple[str, ...] = ()
    undo: Callable[[Any], None] | None = None  # given the step's result; run when a later step fails
    effect: bool = True  # it changes the host or the engine, or reads a secret (a dry run skips it)
    preview: Callable[[Done], Any] | None = None  # a dry run's stand-in for an effect's result


class StepGraphError(ValueError):
    """The steps do not form a graph the executor can run: a bug in the code that made them."""


@dataclass(frozen=True, slots=True)
class StepDecl:
    """A step as a plan declares it, without its action: its part, its name, what it waits for, whether
    it changes something (the host, the engine) or reads a secret — a dry run runs only those that do not."""

    part: str
    name: str
    needs: tuple[str, ...] = ()
    effect: bool = True


def with_actions(decls: Sequence[StepDecl], actions: Mapping[str, Callable[[Done], Any]],
                 previews: Mapping[str, Callable[[Done], Any]] = {},
                 undos: Mapping[str, Callable[[Any], None]] = {}) -> list[Step]:
    """The declared steps with their actions; a declared step without one, or an action no step
    declares, is a bug: nothing starts."""
    names = [d.name for d in decls]
    if sorted(names) != sorted(actions):
        raise StepGraphError(f"declared steps {sorted(names)} and actions {sorted(actions)} differ")
    return [Step(d.name, actions[d.name], d.needs, undos.get(d.name), d.effect, previews.get(d.name)) for d in decls]


def ordered(steps: Iterable[Step]) -> list[Step]:
    """The steps in an order where each comes after what it needs (the declared order among equals)."""
    pending = list(steps)
    names = [step.name for step in pending]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise StepGraphError(f"step names used twice: {', '.join(twice)}")
    unknown = sorted({f"{step.name} needs {need}" for step in pending for need in step.needs if need not in names})
    if unknown:
        raise StepGraphError(f"steps need what no step makes: {'; '.join(unknown)}")
    done: set[str] = set()
    order: list[Step] = []
    while pending:
        ready = [step for step in pending if set(step.needs) <= done]
        if not ready:
            raise StepGraphError(f"steps that need each other: {', '.join(step.name for step in pending)}")
        order += ready
        done.update(step.name for step in ready)
        pending = [step for step in pending if step.name not in done]
    return order


class Applied:
    """What an ``apply`` did: each step's result, and how to undo it."""

    def __init__(self, steps: list[Step]) -> None:
        self._steps = {step.name: step for step in steps}
        self.results: dict[str, Any] = {}
        self.finished: list[str] = []  # steps that ran to their end, in that order

    def unwind(self) -> None:
        """Undo every finished step that has an undo, each after the undos of the steps that needed it
        (the reverse of the order they finished in satisfies that); every undo runs even when one
        fails, and the first failure is raised at the end."""
        errors: list[BaseException] = []
        while self.finished:
            step = self._steps[self.finished.pop()]
            if step.undo is not None:
                try:
                    step.undo(self.results.get(step.name))
                except BaseException as exc:  # noqa: BLE001 - raised below once every undo ran
                    errors.append(exc)
        if errors:
            raise errors[0]


def apply(steps: Iterable[Step], dry: bool = False) -> Applied:
    """Run ``steps`` (threads for the ones that can overlap); raise the first failure once what was
    applied is undone. A signal's exception in the calling thread is a failure like any other."""
    order = ordered(steps)
    applied = Applied(order)
    finished: queue.Queue[tuple[str, Any, BaseException | None]] = queue.Queue()
    started: set[str] = set()
    running = 0
    failure: BaseException | None = None

    def launch(step: Step) -> None:
        snapshot = dict(applied.results)  # a step sees the results of what it needs, never a later write
        call = step.preview if dry and step.effect else step.run
        if call is None:
            finished.put((step.name, None, None))
            return

        def work() -> None:
            try:
                finished.put((step.name, call(snapshot), None))
            except BaseException as exc:  # noqa: BLE001 - handed to the calling thread
                finished.put((step.name, None, exc))

        threading.Thread(target=work, name=f"step-{step.name}", daemon=True).start()

    try:
        while len(applied.finished) < len(order):
            for step in order:
                if step.name not in started and set(step.needs) <= set(applied.finished):
                    started.add(step.name)
                    running += 1
                    launch(step)
            name, result, error = finished.get()
            running -= 1
            if error is not None:
                raise error
            applied.results[name] = result
            applied.finished.append(name)
    except BaseException as exc:
        failure = exc
        while running:  # a step cannot be stopped halfway: its end is waited for, then undone with the rest
            try:
                name, result, error = finished.get()
            except BaseException:  # noqa: BLE001 - a second signal: keep waiting, the first is the story
                continue
            running -= 1
            if error is None:
                applied.results[name] = result
                applied.finished.append(name)
        try:
            applied.unwind()
        except BaseException:  # noqa: BLE001 - the failure that stopped the start is the one to report
            pass
        raise failure from None
    return applied
