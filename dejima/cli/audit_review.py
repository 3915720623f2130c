"""`dejima-audit ack` on a terminal: walks the unreviewed findings one file at a time, worst first,
and records a choice per file (acknowledge with a note, restore, show more, skip, quit).

Everything shown comes from the audit views: paths, values and file lines are escaped plain text.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rich.text import Text

from dejima.core.audit import rank
from dejima.errors import DiagnosticError

if TYPE_CHECKING:
    from rich.console import Console

    from dejima.adapters.findings import FindingStore, Stored

Ask = Callable[[str], "str | None"]  # shows a prompt, returns the line typed (None at end of input)
CHOICES = "a) acknowledge  r) restore  m) more  s) skip  q) quit"
_PAGE = 20  # diff lines shown at a time


@dataclass
class Tally:
    acknowledged: int = 0
    restored: int = 0
    skipped: int = 0
    note: str = ""  # the last note given, offered again for the next file
    left: list[int] = field(default_factory=list)


def by_file(found: list[Stored]) -> list[list[Stored]]:
    """Findings grouped by the file they are about (several sessions may have flagged it), the
    worst file first; inside a group, the newest finding first."""
    groups: dict[tuple[str, str, str], list[Stored]] = {}
    for stored in found:
        groups.setdefault((stored.workspace, stored.root, stored.finding.path), []).append(stored)
    ordered = [sorted(group, key=lambda s: -s.id) for group in groups.values()]
    return sorted(ordered, key=lambda g: (-max(rank(s.finding.severity) for s in g), min(s.id for s in g)))


def instead(found: list[Stored], workspace: str | None) -> str:
    """What to type without a terminal: the exact commands for these findings."""
    ids = " ".join(str(s.id) for s in found)
    scope = f" --workspace {shlex.quote(workspace)}" if workspace else ""
    return (f"without a terminal, type: dejima-audit show {ids}   then: dejima-audit ack {ids} --note "
            f"\"why they are fine\"   (or every one: dejima-audit ack --all{scope} --note \"...\")")


class Review:
    def __init__(self, store: FindingStore, console: Console, ask: Ask,
                 restore: Callable[[Stored], str]) -> None:
        self.store, self.console, self.ask, self.restore = store, console, ask, restore
        self.tally = Tally()

    def run(self, found: list[Stored]) -> Tally:
        groups = by_file(found)
        for index, group in enumerate(groups, 1):
            if not self._file(group, index, len(groups)):
                self.tally.left = [s.id for g in groups[index - 1:] for s in g]
                break
        return self.tally

    def _file(self, group: list[Stored], index: int, total: int) -> bool:
        """Shows one file and acts on the choices; False when the user quits."""
        from dejima.ui.audit_views import diff_lines, finding_lines, safe, summary

        newest = self.store.get([group[0].id])[0]  # with the file's start and end state
        where = "" if newest.mount == "workspace" else f" ({newest.mount} of the workspace)"
        self.console.print()
        self.console.print(Text(f"[{index}/{total}] {newest.finding.severity} {safe(newest.finding.path)}{where}"
                                f"  in {safe(newest.workspace)}", style="bold"))
        for stored in [newest, *group[1:]]:
            self.console.print(Text(f"  finding {stored.id} ({stored.finding.rule}): {summary(stored)}"))
            for line in stored.finding.lines:
                self.console.print(Text(f"    {safe(line)}"))
        diff = diff_lines(newest, limit=10_000)
        shown = self._page(diff, 0)
        while True:
            answer = self.ask(f"{CHOICES}: ")
            choice = (answer or "q").strip().lower()[:1]
            if choice == "q":
                return False
            if choice == "s":
                self.tally.skipped += 1
                return True
            if choice == "m":
                if shown < len(diff):
                    shown = self._page(diff, shown)
                else:
                    for detail in finding_lines(newest):
                        self.console.print(detail)
            elif choice == "a" and self._acknowledge(group):
                return True
            elif choice == "r" and self._restore(newest, group):
                return True
            elif choice not in ("a", "r", "m"):
                self.console.print(Text(f"type one letter: {CHOICES}"))

    def _page(self, diff: list[Text], start: int) -> int:
        end = min(start + _PAGE, len(diff))
        for line in diff[start:end]:
            self.console.print(line)
        if end < len(diff):
            self.console.print(Text(f"    ({len(diff) - end} more diff lines: m shows them)", style="dim"))
        return end

    def _acknowledge(self, group: list[Stored]) -> bool:
        previous = self.tally.note
        prompt = f"note (Enter: same as before, {previous!r}): " if previous else "note (why it is fine): "
        answer = self.ask(prompt)
        if answer is None:
            return False
        note = answer.strip() or previous
        if not note:
            self.console.print(Text("a note is needed: say why the change is fine"))
            return False
        self.store.ack([s.id for s in group], note)
        self.tally.note = note
        self.tally.acknowledged += len(group)
        self.console.print(Text(f"  acknowledged ({len(group)} finding(s))"))
        return True

    def _restore(self, newest: Stored, group: list[Stored]) -> bool:
        from dejima.ui.audit_views import safe

        try:
            done = self.restore(newest)
        except DiagnosticError as exc:
            self.console.print(Text(f"  not restored: {safe(exc.message)}" + (f" ({safe(exc.hint)})" if exc.hint
                                                                                 else "")))
            return False
        self.store.close_findings([s.id for s in group], f"closed: restored by dejima-audit ack: {done}")
        self.tally.restored += len(group)
        self.console.print(Text(f"  {safe(done)}"))
        return True
