"""One rule's failure hides nothing: every rule is run through ``judged`` (a correlation, which
rewrites what the others found, through ``correlated``), on its own unit of work (one path, one
tree, one file's keys). A rule that raises on a unit becomes a finding of its own there, X00
naming the rule and the path, at the worst severity the catalogue gives that rule (fail closed),
and every other rule and unit is still judged and reported.

A rule is named by its catalogue id, or by the ids it applies joined with "/" ("F03/F04"); the
failure takes the worst severity of them all (an id the catalogue does not know: critical).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from functools import lru_cache
from typing import ParamSpec, TypeVar

from dejima.core.audit.catalogue import CODED_RULES, CONTEXT, GIT_INNER, GIT_KEYS, PATH_RULES
from dejima.core.audit.model import SEVERITIES, Finding, View, finding, rank
from dejima.core.snapshot import SnapshotEntry

P = ParamSpec("P")
T = TypeVar("T")
_REASON_LIMIT = 200


@lru_cache(maxsize=1)
def _ceilings() -> dict[str, str]:
    """The worst severity the catalogue gives each rule id: its path rules' keys, its coded rule's
    range, its git keys and git-directory files."""
    given: list[tuple[str, str]] = [(rule, severities.rpartition("-")[2]) for rule, (_, severities)
                                    in CODED_RULES.items()]
    for path_rule in PATH_RULES:
        given.append((path_rule.id, path_rule.worst))
        given.extend((key.rule, key.severity) for key in path_rule.keys if key.rule and key.severity != CONTEXT)
    given.extend((rule, severity) for _, rule, severity in GIT_KEYS)
    given.extend((rule, severity) for _, rule, severity, _ in GIT_INNER)
    worst: dict[str, str] = {}
    for rule, severity in given:
        if rank(severity) > rank(worst.get(rule, "info")):
            worst[rule] = severity
    return worst


def ceiling(rule: str) -> str:
    """The severity a failure of ``rule`` (one id, or ids joined with "/") is reported at."""
    ceilings = _ceilings()
    return max((ceilings.get(part, SEVERITIES[-1]) for part in rule.split("/")), key=rank)


def _state(view: View, path: str) -> str:
    """What the failure's fingerprint binds: the path's entries at both ends (every change of the
    mount for a failure outside any path), so an acknowledged failure re-opens when they change."""
    if not path:
        digest = view.memo.get("isolation:mount")
        if not isinstance(digest, str):
            hashed = hashlib.sha256()
            for change in view.changes:
                hashed.update(f"{change.path}\0{change.what}\0{_entry(change.after)}\n".encode("utf-8",
                                                                                                "surrogateescape"))
            digest = view.memo["isolation:mount"] = hashed.hexdigest()
        return digest
    return f"{_entry(view.entry(path, 'before'))}\0{_entry(view.entry(path))}"


def _entry(entry: SnapshotEntry | None) -> str:
    return "-" if entry is None else f"{entry.kind}:{entry.sha256 or entry.target or ''}"


def failure(view: View, rule: str, path: str, error: Exception) -> Finding:
    """X00 at ``path`` (the mount's root when ""): ``rule`` could not judge it."""
    reason = f"{type(error).__name__}: {error}"
    reason = reason if len(reason) <= _REASON_LIMIT else reason[:_REASON_LIMIT] + "..."
    where = path or "this mount"
    return finding("X00", ceiling(rule), path, f"rule {rule} could not judge {where} ({reason}); the other rules' "
                   "findings stand: review it by hand, then ack this", f"{rule}\0{_state(view, path)}", key=rule)


def judged(view: View, rule: str, path: str, judge: Callable[P, Iterable[Finding]], /, *args: P.args,
           **kwargs: P.kwargs) -> list[Finding]:
    """What ``judge(*args, **kwargs)`` finds at ``path``, or, if it raises, its failure there."""
    try:
        return list(judge(*args, **kwargs))
    except Exception as error:  # any failure of a rule is a finding of its own, never silence
        return [failure(view, rule, path, error)]


def attempted(view: View, rule: str, path: str, judge: Callable[P, T], /, *args: P.args,
              **kwargs: P.kwargs) -> tuple[T | None, list[Finding]]:
    """``judged`` for a part of a rule that returns data, not findings (the rule stages' parts, run
    apart and combined after): what it returned, or None and its failure at ``path``."""
    try:
        return judge(*args, **kwargs), []
    except Exception as error:  # any failure of a rule is a finding of its own, never silence
        return None, [failure(view, rule, path, error)]


def correlated(view: View, rule: str, found: list[Finding], correlate: Callable[[list[Finding]], list[Finding]],
               path: str = "") -> list[Finding]:
    """``correlate(found)``: what a correlation makes of the findings (raised, more of them); if it
    raises, the findings as they were and its failure."""
    try:
        return correlate(found)
    except Exception as error:  # the findings stand unraised; the failure says so
        return [*found, failure(view, rule, path, error)]
