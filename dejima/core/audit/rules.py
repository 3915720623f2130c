"""The rules over one mount: every change between two snapshots that could run code later, worst
first, one finding per path (imported only by what runs them: the end of a session's audit)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import replace

from dejima.core.audit.configs import config_findings
from dejima.core.audit.correlate import correlate
from dejima.core.audit.environment import environment_findings
from dejima.core.audit.fallback import fallback_findings, watch_findings
from dejima.core.audit.files import file_findings
from dejima.core.audit.git import git_findings
from dejima.core.audit.lockfiles import lockfile_findings
from dejima.core.audit.manifest_watch import Watch
from dejima.core.audit.model import Contents, Finding, View, rank
from dejima.core.audit.modelines import modeline_findings
from dejima.core.audit.names import name_findings
from dejima.core.audit.trees import tree_findings
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


def audit(before: Snapshot, after: Snapshot, contents: Contents, kind: str = "workspace",
          listdir: Callable[[str], list[str]] | None = None, candidates: list[str] | None = None,
          watch: tuple[Watch, ...] = ()) -> list[Finding]:
    """Findings for the changes from ``before`` to ``after`` (one mount), worst first.
    ``contents(side, path)`` returns a file's bytes at "before" or "after" (None when unknown);
    ``listdir(directory)`` the names in a directory now (default: from ``after``); ``candidates``
    as for ``diff``; ``watch``: the paths the session's manifests ask to watch."""
    view = View(before, after, diff(before, after, candidates), contents, kind, listdir)
    found = [*config_findings(view), *file_findings(view), *name_findings(view), *tree_findings(view),
             *environment_findings(view)]
    if kind == "workspace":
        found.extend(git_findings(view))
        found.extend(lockfile_findings(view))
        found.extend(modeline_findings(view))
    # Before the correlations, which may raise it; before the fallback, which a manifest's ask outranks.
    found.extend(watch_findings(view, found, watch))
    found = correlate(found, view)
    found.extend(fallback_findings(view, found))
    return one_per_path(_deduplicated(found))
