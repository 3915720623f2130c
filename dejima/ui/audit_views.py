"""How audit findings and the rule catalogue are shown. Every path, value and line of a file comes
from the agent: control, bidi and invisible characters are shown escaped, never interpreted (a
file name must not be able to clear the screen or reorder what the reviewer reads)."""

from __future__ import annotations

import difflib
import os
import re
import shlex
import time

from rich.cells import cell_len, set_cell_size
from rich.console import Console
from rich.text import Text

from dejima.adapters.findings import Stored
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


def cut(text: str, width: int) -> str:
    """``text`` in at most ``width`` terminal cells, cut at the end with a marker."""
    if cell_len(text) <= width:
        return text
    return set_cell_size(text, max(width - 1, 0)) + "…"


def shorten_path(path: str, width: int) -> str:
    """``path`` in at most ``width`` cells, shortened from the middle: the start says where it is,
    the end which file it is."""
    if cell_len(path) <= width:
        return path
    if width < 5:
        return cut(path, width)
    tail_width = (width - 1) * 2 // 3
    head = set_cell_size(path, width - 1 - tail_width)
    tail, size = "", 0
    for char in reversed(path):
        size += cell_len(char)
        if size > tail_width:
            break
        tail = char + tail
    return set_cell_size(head + "…" + tail, width)


def _path_cell(stored: Stored) -> str:
    path = safe(stored.finding.path or "(whole mount)")
    return path if stored.mount == "workspace" else f"{stored.mount}:{path}"


def summary(stored: Stored) -> str:
    """The finding's evidence in one line of plain text, with how many more changes it covers."""
    f = stored.finding
    more = sum(1 for line in f.lines if not line.startswith("context: "))
    text = safe(f.evidence) + (f" (+{more} more)" if more else "")
    if stored.closed is not None:
        return f"[{safe(stored.closed_note)}] {text}"
    return f"[reviewed] {text}" if stored.acked else text


def _group_header(workspace: str, rows: list[Stored], width: int) -> list[Text]:
    unreviewed = sum(1 for s in rows if not s.acked and s.closed is None)
    counts = ", ".join(f"{n} {sev}" for sev in reversed(SEVERITIES)
                       if (n := sum(1 for s in rows if s.finding.severity == sev)))
    rest = f"{len(rows)} finding(s): {counts}" + (f"; {unreviewed} unreviewed" if unreviewed < len(rows) else "")
    return [Text(f"workspace {shorten_path(safe(workspace), width - 10)}", style="bold"), Text(cut(rest, width))]


def findings_table(found: list[Stored], width: int = 80) -> list[Text]:
    """Findings as lines of at most ``width`` cells: a header per workspace (shown once, not on
    every row), then one line per finding: id, severity, rule, path (shortened from the middle),
    and its evidence (cut with a marker)."""
    by_workspace: dict[str, list[Stored]] = {}
    for s in found:
        by_workspace.setdefault(s.workspace, []).append(s)
    id_width = max([len("id"), *(len(str(s.id)) for s in found)])  # the column is as wide as its header too
    lines: list[Text] = []
    for workspace, rows in by_workspace.items():
        if lines:
            lines.append(Text(""))
        rows.sort(key=lambda s: (-SEVERITIES.index(s.finding.severity), s.id))
        lines.extend(_group_header(workspace, rows, width))
        paths = [_path_cell(s) for s in rows]
        fixed = id_width + 2 + 8 + 2 + 4 + 2
        path_width = min(max(cell_len(p) for p in paths), max(12, (width - fixed) * 2 // 5))
        what_width = max(width - fixed - path_width - 2, 8)
        head = f"{'id':>{id_width}}  {'severity':<8}  {'rule':<4}  {set_cell_size('path', path_width)}  what"
        lines.append(Text(cut(head, width), style="dim"))
        for s, path in zip(rows, paths, strict=True):
            f = s.finding
            line = Text(f"{s.id:>{id_width}}  ")
            line.append(f"{f.severity:<8}", style=_STYLE.get(f.severity, ""))
            line.append(f"  {f.rule:<4}  {set_cell_size(shorten_path(path, path_width), path_width)}  "
                        f"{cut(summary(s), what_width)}")
            lines.append(line)
    return lines


def finding_record(stored: Stored) -> dict[str, object]:
    """A finding for scripts (one JSON object per line, as `dejima violations --json` prints)."""
    f = stored.finding
    record: dict[str, object] = {
        "id": stored.id, "workspace": stored.workspace, "session": stored.session, "mount": stored.mount,
        "root": stored.root, "reviewed": stored.acked, "note": stored.ack_note, "catalogue": stored.catalogue,
        "closed": stored.closed is not None, "closed_note": stored.closed_note,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(stored.created)),
        "rule": f.rule, "severity": f.severity, "path": f.path, "key": f.key, "evidence": f.evidence,
        "more": list(f.lines), "remedy": f.remedy, "fingerprint": f.fingerprint, "notes": list(f.notes)}
    if stored.state is not None:
        record["diff"] = _diff(stored)
    return record


def end_of_session(found: list[Stored], width: int = 80, shown: int = 5) -> list[Text]:
    """The worst findings of a session, one line each (at most ``width`` cells), for the
    launcher's closing message: severity, id, path and evidence."""
    worst = sorted(found, key=lambda s: (-SEVERITIES.index(s.finding.severity), s.id))[:shown]
    id_width = max((len(str(s.id)) for s in worst), default=1)
    lines = []
    for s in worst:
        line = Text("  ")
        line.append(f"{s.finding.severity:<8}", style=_STYLE.get(s.finding.severity, ""))
        rest = f" {s.id:>{id_width}} {shorten_path(_path_cell(s), max(width // 3, 16))}: {summary(s)}"
        line.append(cut(rest, width - 10))
        lines.append(line)
    if len(found) > shown:
        lines.append(Text(f"  ... and {len(found) - shown} more"))
    return lines


def _decoded(data: bytes | None) -> list[str] | None:
    if data is None or b"\0" in data[:8192]:
        return None
    return [safe(line) for line in data.decode("utf-8", "surrogateescape").splitlines()]


_KIND_WORDS = {"file": "a file", "dir": "a directory", "symlink": "a symbolic link", "fifo": "a named pipe",
               "socket": "a socket", "char": "a character device", "block": "a block device"}


def _kind(kind: str | None) -> str:
    """What a path was, in words: "nothing" when it was absent."""
    return "nothing" if kind is None else _KIND_WORDS.get(kind, f"a {kind}")


def _content(kind: str | None, data: bytes | None) -> list[str] | None:
    """The lines one side of the diff shows: a file's (None: binary), a link's target; nothing else has any."""
    if kind == "file" or (kind == "symlink" and data is not None):
        return _decoded(data)
    return []


def _diff(stored: Stored, limit: int = _DIFF_LINES) -> list[str]:
    state = stored.state
    if state is None:
        return []
    before_kind, after_kind = state.before_kind, state.after_kind
    if before_kind == "file" and state.before is None:
        return ["(a file at the start; its content was not kept, only watched files' is)"]
    if before_kind is None:
        head = [f"(created in the session: {_kind(after_kind) if after_kind else 'a path now gone'})"]
    elif before_kind != "file" or after_kind != "file":
        head = [f"({_kind(before_kind)} at the start, {_kind(after_kind)} at the end)"]
    else:
        head = []
    if "dir" in (before_kind, after_kind) and not {before_kind, after_kind} & {"file", "symlink"}:
        return [*head, "(a directory has no content of its own; the evidence above says what changed in it)"]
    after_target = os.fsencode(state.after_target) if state.after_target is not None else None
    before = _content(before_kind, state.before)
    after = _content(after_kind, after_target if after_kind == "symlink" else state.after)
    if before is None or after is None:
        return [*head, "(binary content: not shown)"]
    lines = list(difflib.unified_diff(before, after, "at the start", "at the end", lineterm="", n=2))
    return [*head, *lines[:limit], *(["..."] if len(lines) > limit else [])]


def finding_lines(stored: Stored) -> list[Text]:
    """A finding's evidence, every change it covers, its signals and how to undo it (plain text)."""
    f = stored.finding
    rows = [("finding", str(stored.id)), ("rule", f"{f.rule} ({rule_title(f.rule)})"), ("severity", f.severity),
            ("where", _where(stored)), ("path", f.path or "(whole mount)"), ("key", f.key), ("evidence", f.evidence),
            *(("context" if line.startswith("context: ") else "also", line.removeprefix("context: "))
              for line in f.lines),
            *(("signal", note) for note in f.notes), ("remedy", _remedy(stored)),
            ("session", stored.session),
            ("when", time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(stored.created))),
            ("reviewed", f"yes: {stored.ack_note}" if stored.acked else "no"), ("fingerprint", f.fingerprint),
            ("catalogue", stored.catalogue)]
    return [Text(f"{label:>11}: {safe(value)}") for label, value in rows if value]


def diff_lines(stored: Stored, limit: int = _DIFF_LINES) -> list[Text]:
    """What changed in the file since the start, as a unified diff of escaped lines."""
    return [Text(f"    {line}", style="green" if line.startswith("+") else "red" if line.startswith("-") else "dim")
            for line in _diff(stored, limit)]


def print_finding(console: Console, stored: Stored) -> None:
    for line in [*finding_lines(stored), *diff_lines(stored)]:
        console.print(line)
    console.print()


def _remedy(stored: Stored) -> str:
    restore = f"dejima-audit restore {stored.id}"
    if stored.finding.remedy == "reinstall":
        return _reinstall(stored, restore)
    return {"restore": f"{restore} puts back the start state (or removes what the session created)",
            "strip-bits": f"{restore} removes the setuid/setgid bits and capabilities",
            "review": "review it; nothing to put back"}.get(stored.finding.remedy, stored.finding.remedy)


def _reinstall(stored: Stored, restore: str) -> str:
    """How to undo a change to a whole tree: the case that applies (the session made the tree, or it was
    there at the start), with the tool's clean reinstall command, the one `restore` names."""
    from dejima.adapters.restore import clean_reinstall_command  # restore's own lookup: one table of clean commands

    path, state = stored.finding.path, stored.state
    where = f"{stored.root}/{path}".rstrip("/")
    parent = where.rpartition("/")[0] or "/"
    command = clean_reinstall_command(stored)
    if path and state is not None and state.before_kind is None:  # what `restore` removes whole
        again = f"; then `{command}` in {parent} installs it again from the lockfile" if command else \
            "; then install it again on the host if the project needs it"
        return f"the session created this tree: {restore} removes it whole{again}"
    then = f"`{command}` in {parent}" if command else "the project's installer"
    undo = f"delete it and reinstall on the host: rm -r {shlex.quote(where)}, then {then}"
    if state is None:  # read without its start state: both cases
        return f"{undo} ({restore} removes it if the session created it)"
    return f"it was there at the start and its content was not kept, so nothing can be put back: {undo}"


def rule_title(rule: str) -> str:
    return RULE_TITLES.get(rule, "")


def _range(severities: set[str]) -> str:
    ordered = sorted(severities, key=SEVERITIES.index)
    return ordered[0] if len(ordered) == 1 else f"{ordered[0]}-{ordered[-1]}"


def rules_records() -> list[dict[str, str]]:
    """The catalogue, one record per row: rule, what, where, severity."""
    rows = []
    for rule in PATH_RULES:
        how = " (by key)" if rule.keys else " (new lines only)" if rule.grep else ""
        mounts = "" if rule.mounts == ("workspace",) else f" ({', '.join(rule.mounts)} mount)"
        paths = ", ".join(f"`{p}`" for p in rule.paths[:5]) + (", ..." if len(rule.paths) > 5 else "")
        severities = {s for s in (rule.severity, rule.added, *(k.severity for k in rule.keys)) if s in SEVERITIES}
        rows.append((rule.id, f"{rule.title}{how}{mounts}", paths, _range(severities)))
    for pattern, rule_id, severity, title in GIT_INNER:
        rows.append((rule_id, title, f"`.git/{pattern}`", severity))
    by_rule: dict[str, list[tuple[str, str]]] = {}
    for pattern, rule_id, severity in GIT_KEYS:
        by_rule.setdefault(rule_id, []).append((pattern, severity))
    for rule_id, keys in by_rule.items():
        patterns = ", ".join(f"`{p}`" for p, _ in keys)
        rows.append((rule_id, f"git config: {GIT_KEY_TITLES[rule_id]}", patterns, _range({s for _, s in keys})))
    for rule_id, title in KEY_RULE_TITLES.items():
        owning = [r for r in PATH_RULES if any(k.rule == rule_id for k in r.keys)]
        owners = ", ".join(dict.fromkeys(f"`{r.paths[0]}`" for r in owning))
        severities = {k.severity for r in owning for k in r.keys if k.rule == rule_id}
        rows.append((rule_id, f"{title} (by key)", owners, _range(severities)))
    for rule_id, (title, severity) in CODED_RULES.items():
        rows.append((rule_id, title, "(rule in code)", severity))
    return [dict(zip(("rule", "what", "where", "severity"), row, strict=True)) for row in rows]


def rules_reference() -> str:
    """The catalogue as Markdown (docs/audit.md carries it; a test keeps it current)."""
    lines = [f"Catalogue version {CATALOGUE_VERSION}.", "", "| rule | what | where | severity |", "|---|---|---|---|"]
    lines += [f"| {r['rule']} | {r['what']} | {r['where']} | {r['severity']} |" for r in rules_records()]
    return "\n".join(lines) + "\n"


RULE_TITLES = {**{rule.id: rule.title for rule in PATH_RULES}, **{r: t for _, r, _, t in GIT_INNER},
               **GIT_KEY_TITLES, **KEY_RULE_TITLES, **{r: t for r, (t, _) in CODED_RULES.items()}}
