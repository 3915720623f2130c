"""The rules over one mount: every change between two snapshots that could run code later, worst
first, one finding per path (imported only by what runs them: the end of a session's audit)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import Any, cast

from dejima.core.audit.configs import config_findings
from dejima.core.audit.correlate import correlate
from dejima.core.audit.environment import environment_findings
from dejima.core.audit.fallback import fallback_findings, watch_findings
from dejima.core.audit.files import file_findings
from dejima.core.audit.git import git_findings
from dejima.core.audit.isolation import attempted, correlated, judged
from dejima.core.audit.lockfiles import lockfile_findings
from dejima.core.audit.manifest_watch import Watch
from dejima.core.audit.model import Artifacts, Contents, Finding, View, rank
from dejima.core.audit.modelines import modeline_findings
from dejima.core.audit.names import name_findings
from dejima.core.audit.pinned import TreeJudgement
from dejima.core.audit.trees import (
    Parts,
    dependency_findings,
    tree_findings,
    tree_groups,
    tree_judgements,
    tree_tampering,
)
from dejima.core.audit.venv_facts import SessionPython
from dejima.core.snapshot import Snapshot, diff


def _merged(group: list[Finding]) -> Finding:
    """One finding for one path: the worst change leads, every other one is a line of evidence,
    and the fingerprint covers them all (a later change to any of them re-opens the review)."""
    worst, *others = group
    if not others:
        return worst
    lines = [*worst.lines, *(line for o in others for line in (f"{o.rule} {o.severity}: {o.evidence}", *o.lines))]
    merged = tuple(dict.fromkeys(line for line in lines if not line.startswith("context: ")))
    context = tuple(dict.fromkeys(line for line in lines if line.startswith("context: ")))
    digest = hashlib.sha256("\0".join(sorted(f.fingerprint for f in group)).encode()).hexdigest()
    notes = tuple(dict.fromkeys(note for f in group for note in f.notes))
    return replace(worst, lines=merged + context, notes=notes, fingerprint=digest)


def _one_after_another(stages: list[Stage]) -> list[list[Finding]]:
    return [stage() for stage in stages]


def one_per_path(found: list[Finding]) -> list[Finding]:
    """The counting rule: the changes found in one file are one finding (research §4.2 keeps the
    keys as evidence), so a reviewer reads each file once. ``found`` is worst first."""
    groups: dict[str, list[Finding]] = {}
    for item in found:
        groups.setdefault(item.path, []).append(item)
    merged = [_merged(group) for group in groups.values()]
    return sorted(merged, key=lambda f: (-rank(f.severity), f.path, f.rule, f.key))


def _deduplicated(found: list[Finding]) -> list[Finding]:
    """One finding per (rule, path, key): the worst, with every note."""
    best: dict[tuple[str, str, str], Finding] = {}
    for item in found:
        key = (item.rule, item.path, item.key)
        other = best.get(key)
        if other is not None:
            worse, better = (other, item) if rank(item.severity) > rank(other.severity) else (item, other)
            item = replace(better, notes=tuple(dict.fromkeys((*better.notes, *worse.notes))))
        best[key] = item
    return sorted(best.values(), key=lambda f: (-rank(f.severity), f.path, f.rule, f.key))


Stage = Callable[[], list[Finding]]
# Runs tasks (stages, and the parts of one that return data), each on its own, and returns what each
# returned, in order (the adapter's shares them out to processes: walk_shares.shared_out).
StageRunner = Callable[[list[Callable[[], Any]]], list[Any]]
_HEAVIEST = "the tree rules (B07, B10, B11, M01)"  # dealt out first: a tree's verification is most of the work


def _asked_ahead(view: View) -> None:
    """What every stage asks of the changed paths (which tree each lies in, the changes by path),
    answered here before the stages are shared out: each process, and the fallback after them,
    would otherwise answer it again. A failure here is met again by the stage that asks, and
    judged there."""
    try:
        tree_groups(view)
        view.changed  # noqa: B018 - a cached property, computed here once
    except Exception:  # noqa: S110 - judged where it is asked (isolation.judged)
        pass


def _shared(view: View, stages: list[tuple[str, Callable[[View], list[Finding]]]],
            share: StageRunner) -> dict[int, list[Finding]]:
    """The stages shared out to processes, the heaviest first, and the tree rules' dependency
    trees in two parts beside them: verified against their pins, and checked for what no install
    makes (the two heavy parts of an npm tree's judgement), combined here."""
    _asked_ahead(view)
    heaviest = next(i for i, (name, _) in enumerate(stages) if name == _HEAVIEST)
    others = [i for i in range(len(stages)) if i != heaviest]
    tasks: list[Callable[[], object]] = [
        partial(attempted, view, _HEAVIEST, "", tree_judgements, view),
        partial(judged, view, _HEAVIEST, "", tree_findings, view, False),
        partial(attempted, view, _HEAVIEST, "", tree_tampering, view),
        *(partial(judged, view, stages[i][0], "", stages[i][1], view) for i in others)]
    ran = share(tasks)
    judgements, failed = cast("tuple[Parts[TreeJudgement | None] | None, list[Finding]]", ran[0])
    tampering, failed_too = cast("tuple[Parts[list[str]] | None, list[Finding]]", ran[2])
    rest: list[Finding] = ran[1]
    by_stage: dict[int, list[Finding]] = dict(zip(others, ran[3:], strict=True))
    parts = [*failed, *failed_too] if judgements is None or tampering is None else \
        judged(view, _HEAVIEST, "", dependency_findings, view, judgements, tampering)
    by_stage[heaviest] = [*parts, *rest]  # as tree_findings orders them, in one process
    return by_stage


def audit(before: Snapshot, after: Snapshot, contents: Contents, kind: str = "workspace",
          listdir: Callable[[str], list[str]] | None = None, candidates: list[str] | None = None,
          watch: tuple[Watch, ...] = (), artifacts: Artifacts | None = None,
          share: StageRunner | None = None, python: SessionPython | None = None,
          before_paths: str | None = None) -> list[Finding]:
    """Findings for the changes from ``before`` to ``after`` (one mount), worst first.
    ``contents(side, path)`` returns a file's bytes at "before" or "after" (None when unknown);
    ``listdir(directory)`` the names in a directory now (default: from ``after``); ``candidates``
    as for ``diff``; ``watch``: the paths the session's manifests ask to watch; ``artifacts``: the
    packages' pinned artifacts, which dependency trees are verified against; ``share``: how the
    stages, each independent of the others, are run (default: one after the other); ``python``: what
    the session image's tools write in a Python environment, and where the mount was in the session;
    ``before_paths``: ``snapshot.joined_paths(before)``, when made ahead."""
    view = View(before, after, diff(before, after, candidates), contents, kind, listdir, artifacts=artifacts,
                python=python, complete=True, before_paths=before_paths)
    # Each stage judges each path (tree, file's keys) on its own (isolation.judged); what fails
    # outside any path is a failure of the whole stage, and the other stages still run.
    stages: list[tuple[str, Callable[[View], list[Finding]]]] = [
        ("the catalogue's path rules", config_findings), ("the file rules (F01-F10)", file_findings),
        ("the name rules (F08, G25)", name_findings), (_HEAVIEST, tree_findings),
        ("the environment rules (E02, E10)", environment_findings)]
    if kind == "workspace":
        stages += [("the git rules (G01-G28, X03, X04)", git_findings), ("the lockfile rules (X05, X06)",
                                                                          lockfile_findings),
                   ("the modeline rules (I12, I13)", modeline_findings)]
    if share is None:
        by_stage = dict(enumerate(_one_after_another([partial(judged, view, name, "", judge, view)
                                                      for name, judge in stages])))
    else:
        by_stage = _shared(view, stages, share)
    found = [f for i in range(len(stages)) for f in by_stage[i]]  # in the stages' order, however they ran
    # Before the correlations, which may raise it; before the fallback, which a manifest's ask outranks.
    found.extend(judged(view, "X07", "", watch_findings, view, found, watch))
    found = correlated(view, "the correlations (C3, C4, C8, content)", found, lambda found: correlate(found, view))
    found.extend(judged(view, "X01/X02", "", fallback_findings, view, found))
    return one_per_path(_deduplicated(found))
