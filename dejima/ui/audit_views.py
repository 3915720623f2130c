"""How audit findings and the rule catalogue are shown. Every path, value and line of a file comes
from the agent: control, bidi and invisible characters are shown escaped, never interpreted (a
file name must not be able to clear the screen or reorder what the reviewer reads)."""

from __future__ import annotations

import difflib
import re
import time

from rich.console import Console
from rich.table import Table
from rich.text import Text

from dejima.core.audit.catalogue import (
    CATALOGUE_VERSION,
    CODED_RULES,
    GIT_INNER,
    GIT_KEY_TITLES,
    GIT_KEYS,
    KEY_RULE_TITLES,
    PATH_RULES,
)
from dejima.core.audit.model import SEVERITIES
from dejima.core.audit.names import INVISIBLE
from dejima.findings import Stored

# Line breaks too: a value must not be able to print a line of its own (a fake "reviewed: yes").
_UNSAFE = re.compile(f"[\x00-\x08\x0a-\x1f\x7f-\x9f]|{INVISIBLE.pattern}")
_STYLE = {"critical": "bold red", "high": "red", "medium": "yellow", "low": "cyan", "info": "dim"}
_DIFF_LINES = 200


def safe(text: str) -> str:
    """Escapes what a terminal would act on or hide, and line breaks; undecodable bytes as \\xNN.
    The result is plain text: print it as rich Text, never as markup."""
    text = re.sub("[\udc80-\udcff]", lambda m: f"\\x{ord(m.group()) - 0xdc00:02x}", text)
    return _UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def _where(stored: Stored) -> str:
    if stored.mount == "workspace":
        return stored.workspace
    return f"{stored.mount} of {stored.workspace}"


def findings_table(found: list[Stored]) -> Table:
    table = Table("id", "severity", "rule", "where", "path", "what", show_lines=False)
    for s in found:
        f = s.finding
        what = safe(f.evidence) + "".join(f"\n  + {safe(note)}" for note in f.notes)
        if s.acked:
            what += f"\n  reviewed: {safe(s.ack_note)}"
        table.add_row(str(s.id), Text(f.severity, style=_STYLE.get(f.severity, "")), Text(f.rule),
                      Text(safe(_where(s))), Text(safe(f.path or "(whole mount)")), Text(what))
    return table


def _decoded(data: bytes | None) -> list[str] | None:
    if data is None or b"\0" in data[:8192]:
        return None
    return [safe(line) for line in data.decode("utf-8", "surrogateescape").splitlines()]


def _diff(stored: Stored) -> list[str]:
    state = stored.state
    if state is None:
        return []
    if state.before_kind is None:
        head = [f"(created in the session: a {state.after_kind or 'path now gone'})"]
        before: list[str] | None = []
    elif state.before is None and state.before_kind == "file":
        return [f"(a {state.before_kind} at the start; its content was not kept, only watched files' is)"]
    else:
        head, before = [], _decoded(state.before)
    after = _decoded(state.after) if state.after_kind == "file" else []
    if state.before_kind not in (None, "file") or state.after_kind not in (None, "file"):
        head.append(f"(a {state.before_kind or 'nothing'} at the start, a {state.after_kind or 'nothing'} at the end)")
    if before is None or after is None:
        return [*head, "(binary content: not shown)"]
    lines = list(difflib.unified_diff(before, after, "at the start", "at the end", lineterm="", n=2))
    return [*head, *lines[:_DIFF_LINES], *(["..."] if len(lines) > _DIFF_LINES else [])]


def print_finding(console: Console, stored: Stored) -> None:
    f = stored.finding
    rows = [("finding", str(stored.id)), ("rule", f"{f.rule} ({rule_title(f.rule)})"), ("severity", f.severity),
            ("where", _where(stored)), ("path", f.path or "(whole mount)"), ("key", f.key), ("evidence", f.evidence),
            *(("signal", note) for note in f.notes), ("remedy", _remedy(f.remedy)), ("session", stored.session),
            ("when", time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(stored.created))),
            ("reviewed", f"yes: {stored.ack_note}" if stored.acked else "no"), ("fingerprint", f.fingerprint),
            ("catalogue", stored.catalogue)]
    for label, value in rows:
        if value:
            console.print(Text(f"{label:>11}: {safe(value)}"))
    for line in _diff(stored):
        style = "green" if line.startswith("+") else "red" if line.startswith("-") else "dim"
        console.print(Text(f"    {line}", style=style))
    console.print()


def _remedy(remedy: str) -> str:
    return {"restore": "dejima-audit restore ID puts back the start state (or removes what the session created)",
            "reinstall": "delete it and reinstall on the host (its content was not kept)",
            "strip-bits": "dejima-audit restore ID removes the setuid/setgid bits and capabilities",
            "review": "review it; nothing to put back"}.get(remedy, remedy)


def rule_title(rule: str) -> str:
    return RULE_TITLES.get(rule, "")


def _range(severities: set[str]) -> str:
    ordered = sorted(severities, key=SEVERITIES.index)
    return ordered[0] if len(ordered) == 1 else f"{ordered[0]}-{ordered[-1]}"


def rules_reference() -> str:
    """The catalogue as Markdown (docs/audit.md carries it; a test keeps it current)."""
    lines = [f"Catalogue version {CATALOGUE_VERSION}.", "", "| rule | what | where | severity |", "|---|---|---|---|"]
    for rule in PATH_RULES:
        how = " (by key)" if rule.keys else " (new lines only)" if rule.grep else ""
        mounts = "" if rule.mounts == ("workspace",) else f" ({', '.join(rule.mounts)} mount)"
        paths = ", ".join(f"`{p}`" for p in rule.paths[:5]) + (", ..." if len(rule.paths) > 5 else "")
        severities = {s for s in (rule.severity, rule.added, *(k.severity for k in rule.keys)) if s}
        lines.append(f"| {rule.id} | {rule.title}{how}{mounts} | {paths} | {_range(severities)} |")
    for pattern, rule_id, severity, title in GIT_INNER:
        lines.append(f"| {rule_id} | {title} | `.git/{pattern}` | {severity} |")
    by_rule: dict[str, list[tuple[str, str]]] = {}
    for pattern, rule_id, severity in GIT_KEYS:
        by_rule.setdefault(rule_id, []).append((pattern, severity))
    for rule_id, keys in by_rule.items():
        patterns = ", ".join(f"`{p}`" for p, _ in keys)
        lines.append(f"| {rule_id} | git config: {GIT_KEY_TITLES[rule_id]} | {patterns} | "
                     f"{_range({s for _, s in keys})} |")
    for rule_id, title in KEY_RULE_TITLES.items():
        owning = [r for r in PATH_RULES if any(k.rule == rule_id for k in r.keys)]
        owners = ", ".join(dict.fromkeys(f"`{r.paths[0]}`" for r in owning))
        severities = {k.severity for r in owning for k in r.keys if k.rule == rule_id}
        lines.append(f"| {rule_id} | {title} (by key) | {owners} | {_range(severities)} |")
    for rule_id, (title, severity) in CODED_RULES.items():
        lines.append(f"| {rule_id} | {title} | (rule in code) | {severity} |")
    return "\n".join(lines) + "\n"


RULE_TITLES = {**{rule.id: rule.title for rule in PATH_RULES}, **{r: t for _, r, _, t in GIT_INNER},
               **GIT_KEY_TITLES, **KEY_RULE_TITLES, **{r: t for r, (t, _) in CODED_RULES.items()}}
