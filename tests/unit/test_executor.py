"""The one executor of a start's actions (orchestration/executor.py) applying a real plan (plan_start of facts
read dry) against a fake of the Docker engine's adapter (the engine is an outside system; everything else is
real: the host's directories, FIFOs, the exit audit's snapshots). What it applies is the plan's actions; a
failure at any action leaves the engine and the host's directories as they were before the start."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import IO, Any

import pytest

from dejima.adapters import host
from dejima.adapters.session_dirs import sessions_dir
from dejima.core.plan import RESOLV_CONF, ContainerSpec
from dejima.filter import READY
from dejima.orchestration.actions import ReleaseGate, WaitReady
from dejima.orchestration.executor import Applying, Event, Executor, Streams, Undone
from dejima.orchestration.start_plan import StartPlan, plan_start
from dejima.ui.console import UI
from tests.unit.test_api import owned
from tests.unit.test_start_plan import OPTIONS, dry_facts


class FakeEngine:
    """The engine adapter's calls a start makes (adapters/runtime.Runtime), on containers kept in a dict: a
    filter started prints its ready line naming ``digest``; every call is logged."""

    def __init__(self, digest: str) -> None:
        self.digest = digest
        self.present: dict[str, dict[str, Any]] = {}
        self.calls: list[tuple[str, str]] = []
        self._lock = threading.Lock()

    def _log(self, call: str, container: str) -> None:
        with self._lock:
            self.calls.append((call, container))

    def image_id(self, ref: str) -> str | None:
        return None  # no image: the audit has no record of its venv (venv_record.record)

    def create(self, spec: ContainerSpec) -> str:
        self._log("create", spec.name)
        self.present[spec.name] = {"spec": spec, "running": False}
        return spec.name

    def start(self, container: str) -> None:
        self._log("start", container)
        self.present[container]["running"] = True

    def follow_logs(self, container: str) -> Iterator[bytes]:
        yield f"{READY} ruleset={self.digest}\n".encode()

    def logs(self, container: str) -> str:
        return f"{READY} ruleset={self.digest}\n"

    def inspect(self, container: str) -> dict[str, Any] | None:
        found = self.present.get(container)
        return None if found is None else {"State": {"Running": found["running"], "ExitCode": 0}}

    def attach(self, container: str, stdin: IO[bytes] | None = None) -> Iterator[tuple[bytes | None, bytes | None]]:
        return iter(())

    def stop(self, container: str, timeout: int) -> None:
        self._log("stop", container)
        self.present[container]["running"] = False

    def remove(self, container: str) -> None:
        self._log("remove", container)
        del self.present[container]


def planned_start(tmp_path: Path, forges: tuple[str, ...] = ()) -> StartPlan:
    """A non-interactive start's plan (the command ``true``), its session's state directory claimed (as
    new_session_id does before the plan) and the shared resolv.conf there (every session's, kept)."""
    tmp_path.mkdir(exist_ok=True)
    facts, resolved = dry_facts(owned(tmp_path), forges)
    facts = replace(facts, request=replace(facts.request, command=("true",)))
    plan = plan_start(("true",), resolved, host.load_settings(), OPTIONS, facts)
    host.claim(sessions_dir() / plan.session.session_id)
    host.resolv_conf_file(RESOLV_CONF)
    return plan


def host_tree(*roots: Path) -> dict[str, tuple[int, int]]:
    """Every path under ``roots`` with its mode and size (directories 0): what a start may change on the host.
    Not the exit audit's records (its findings, what it keeps of each mount between sessions): an audit that
    started ends, and keeps them, whether or not the session ran."""
    found = {}
    kept = (host.state_dir() / "audit", host.state_dir() / "audit.sqlite3")
    for root in roots:
        for directory, names, files in os.walk(root):
            for name in (*names, *files):
                path = Path(directory, name)
                if path in kept or path.parent in kept or any(part in path.parents for part in kept):
                    continue
                info = path.lstat()
                found[str(path)] = (info.st_mode, 0 if path.is_dir() else info.st_size)
    return found


def digest_of(plan: StartPlan) -> str:
    return next(p.action.digest for p in plan.actions if isinstance(p.action, WaitReady))


def run_start(plan: StartPlan, engine: FakeEngine, observe: Any = None) -> Executor:
    executor = Executor(engine, UI(quiet=True), observe or (lambda _: None), streams=Streams())  # type: ignore[arg-type]
    executor.run(plan.preparation)
    executor.run(plan.pair)
    return executor


def test_the_executor_applies_the_plans_actions_and_the_teardown_leaves_what_was_there(tmp_path: Path) -> None:
    plan = planned_start(tmp_path)
    engine = FakeEngine(digest_of(plan))
    told: list[str] = []
    executor = run_start(plan, engine, lambda event: told.append(event.planned.name)
                         if isinstance(event, Applying) else None)
    applied = executor.applied
    assert sorted(p.name for p in applied) == sorted(p.name for p in plan.actions) == sorted(told)
    assert all(set(p.needs) <= {q.name for q in applied[:n]} for n, p in enumerate(applied))  # each after its needs
    pair = (plan.session.filter.name, plan.session.session.name)
    assert sorted(engine.calls) == sorted((call, name) for call in ("create", "start") for name in pair)
    assert executor.ran and set(engine.present) == {plan.session.filter.name, plan.session.session.name}
    executor.unwind()
    assert engine.present == {}
    assert not Path(plan.request.run_dir or "").exists() and not Path(plan.request.gate_dir or "").exists()
    assert plan.record[0].read_text() == str(plan.request.workspace)  # a session that ran keeps its record
    assert Path(plan.request.home_dir).is_dir()  # and its home


def test_a_failure_at_any_action_leaves_the_engine_and_the_host_as_before_the_start(tmp_path: Path) -> None:
    """For each action k, an observer that refuses k (as a failing action would stop the start): what was applied
    is undone, whatever k is. The control: without a failure, the host changed."""
    names = [p.name for p in planned_start(tmp_path / "names").actions]
    for k, name in enumerate(names):
        plan = planned_start(tmp_path / f"k{k}")
        engine = FakeEngine(digest_of(plan))
        roots = (host.state_dir(), host.data_dir(), tmp_path / f"k{k}")
        before = host_tree(*roots)

        def refuse(event: Event, refused: str = name) -> None:
            if isinstance(event, Applying) and event.planned.name == refused:
                raise RuntimeError(f"injected at {refused}")

        with pytest.raises(RuntimeError, match=f"injected at {name}"):
            run_start(plan, engine, refuse)
        assert engine.present == {}, name
        after = host_tree(*roots)
        if k <= names.index("open-gate"):  # the command never ran: nothing is left
            assert after == before, (name, sorted(set(after) ^ set(before)))
        else:  # it ran: its record and its home are kept, as after any session
            assert set(after) - set(before) == {str(plan.record[0]), str(plan.request.home_dir),
                                                str(Path(plan.request.home_dir).parent)}, name
    control = planned_start(tmp_path / "control")
    before = host_tree(host.state_dir(), host.data_dir())
    executor = run_start(control, FakeEngine(digest_of(control)))
    assert host_tree(host.state_dir(), host.data_dir()) != before
    executor.unwind()


def test_a_signal_while_the_pair_starts_unwinds_the_whole_start(tmp_path: Path) -> None:
    """KeyboardInterrupt (Ctrl-C's exception in the main thread) at the gate: both containers and every
    directory the start made are gone, the record too (the command never ran)."""
    plan = planned_start(tmp_path)
    engine = FakeEngine(digest_of(plan))
    before = host_tree(host.state_dir(), host.data_dir())

    def interrupt(event: Event) -> None:
        if isinstance(event, Applying) and isinstance(event.planned.action, ReleaseGate):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_start(plan, engine, interrupt)
    assert engine.present == {} and host_tree(host.state_dir(), host.data_dir()) == before


class LeftoverEngine(FakeEngine):
    """The engine holding a dead launcher's session (another boot's token) and a live one's (this process's)."""

    def __init__(self) -> None:
        super().__init__("")
        from dejima.adapters.runtime import ContainerInfo
        from dejima.core import labels

        dead, alive = "otherboot:1:1", host.launcher_token()
        self.listed = [ContainerInfo(f"{session}-{role}", f"{session}-{role}", "running",
                                     {labels.SCOPE: host.scope(), labels.LAUNCHER: token, labels.SESSION: session,
                                      labels.ROLE: role}, "")
                       for session, token in (("0dead0", dead), ("a11ve0", alive))
                       for role in (labels.ROLE_FILTER, labels.ROLE_SESSION)]
        self.present = {info.id: {"running": True} for info in self.listed}

    def containers(self, label_filter: dict[str, str]) -> list[Any]:
        return [info for info in self.listed if info.id in self.present]

    def logs(self, container: str) -> str:
        return 'dejima-violation {"kind": "dns", "domain": "evil.example"}\n'


def test_leftovers_are_a_plan_of_their_own_the_executor_applies(tmp_path: Path) -> None:
    """A dead launcher's session: its containers removed (the filter stopped gently first, its output kept as
    the session's records), its run directory cleared; a live launcher's session untouched."""
    from dejima.adapters.session_dirs import read, run_dir
    from dejima.orchestration import session
    from dejima.orchestration.manage_sessions import record_stale_violations

    engine = LeftoverEngine()
    run_dir("0dead0").mkdir(parents=True)
    removed = session.remove_stale(engine, host.scope(), UI(quiet=True), record_stale_violations)  # type: ignore[arg-type]
    assert removed == ["0dead0"]
    assert sorted(engine.present) == ["a11ve0-filter", "a11ve0-session"]
    assert ("stop", "0dead0-filter") in engine.calls and ("stop", "0dead0-session") not in engine.calls
    assert [r["domain"] for r in read("0dead0")] == ["evil.example"] and not run_dir("0dead0").exists()


def test_the_teardown_does_each_undo_after_the_ones_the_plan_puts_first(tmp_path: Path) -> None:
    """The pair's undos before the preparation's; within the pair, each after its undo_after (the audit's end
    once the session's container is gone, the FIFOs and the proxy after the containers)."""
    plan = planned_start(tmp_path)
    engine = FakeEngine(digest_of(plan))
    undone: list[str] = []
    executor = run_start(plan, engine, lambda event: undone.append(event.planned.name)
                         if isinstance(event, Undone) else None)
    executor.unwind()
    assert sorted(undone) == sorted(p.name for p in plan.actions if p.undo is not None
                                    and not p.undo.kept_if_ran)
    for p in plan.actions:
        for first in p.undo_after:
            if p.name in undone and first in undone:
                assert undone.index(first) < undone.index(p.name), (first, p.name)
    pair = {p.name for p in plan.pair}
    assert all(name in pair for name in undone[:len(pair & set(undone))])  # the pair's undos come first
    assert undone.index("session") < undone.index("audit-start")


def test_a_failed_start_removes_only_the_directories_it_made_not_anothers_made_beside_them(tmp_path: Path) -> None:
    """The first start on this host makes the homes' directory with its home; a second start puts its own home
    there meanwhile; the first one fails: its home goes, the other's and the directory holding both stay."""
    plan = planned_start(tmp_path)
    home = Path(plan.request.home_dir)
    assert not home.parent.exists()  # this start makes the homes' directory too
    other = home.parent / "another-start's-home"

    def meanwhile(event: Event) -> None:
        if isinstance(event, Applying) and event.planned.name == "filter":
            # The pair begins once the whole preparation is done (the preparation's actions run at
            # once, so only here is the first home sure to exist); then the engine fails.
            other.mkdir()
            raise RuntimeError("the engine is gone")

    with pytest.raises(RuntimeError, match="the engine is gone"):
        run_start(plan, FakeEngine(digest_of(plan)), meanwhile)
    assert not home.exists() and other.is_dir()
