"""A dependency tree's verification against its lockfile, as one finding (issue 32): shared by the
npm (npm_verify.py) and Python (python_verify.py) verifications, which differ in what they compare,
not in what they report.

- what no install from the lockfile makes: high, each named;
- what cannot be held to a pin: medium, each with why, and what would verify it;
- else low: "verified N file(s) of M package(s) against LOCKFILE as the session's start had it".
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dejima.core.audit.caches import changes_value
from dejima.core.audit.model import Finding, finding
from dejima.core.snapshot import Change

_LISTED = 10


@dataclass
class TreeVerdict:
    lockfile: str
    problems: list[str] = field(default_factory=list)  # what no install from the lockfile makes
    unverified: list[str] = field(default_factory=list)  # what cannot be held to a pin, and why
    files: int = 0
    packages: set[str] = field(default_factory=set)


def listed(items: list[str]) -> str:
    shown = "; ".join(items[:_LISTED])
    return shown + (f"; and {len(items) - _LISTED} more" if len(items) > _LISTED else "")


def verdict_findings(rule: str, tree: str, verdict: TreeVerdict, problems: list[str], changes: list[Change],
                     remedy: str, unit: str, idle: str | None = None) -> list[Finding]:
    """The one finding of a verified tree. ``problems``: the verdict's and the other checks' own;
    ``unit``: what a package is called ("package(s)"); ``idle``: what to say when the tree changed
    with nothing to verify (None: say what was verified)."""
    verified = f"verified {verdict.files} file(s) of {len(verdict.packages)} {unit} against {verdict.lockfile} " \
        "as the session's start had it"
    value = changes_value(changes)
    if problems:
        return [finding(rule, "high", tree, f"{len(problems)} change(s) no install from {verdict.lockfile} makes: "
                        f"{listed(problems)}; {remedy}", value, remedy="reinstall")]
    if verdict.unverified:
        return [finding(rule, "medium", tree, f"{verified}; {len(verdict.unverified)} not verifiable: "
                        f"{listed(verdict.unverified)}; to be sure, {remedy}", value, remedy="reinstall")]
    return [finding(rule, "low", tree, idle if idle is not None and not verdict.files else verified, value,
                    remedy="reinstall")]
