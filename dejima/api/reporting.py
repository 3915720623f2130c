"""What a session reports, kept rather than printed: ``QuietReporter``, every function's reporter when the caller
gives none."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dejima.adapters.findings import Stored as Finding
    from dejima.core.plan import SessionPlan
    from dejima.errors import DiagnosticError
    from dejima.orchestration.session_reporter import SessionReporter as Reporter


@dataclass
class _Progress:
    lines: list[str] = field(default_factory=list)

    def line(self, text: str) -> None:
        self.lines.append(text)
        del self.lines[:-200]


class QuietReporter:
    """A ``Reporter`` that prints nothing: it keeps what a session reports in ``messages``, (kind, text) pairs in
    order (kinds: info, warning, error, notice, card, step, boundary, findings), and hands each to ``on_message``
    when given. The text is the session's as it is, not escaped: show it as data."""

    def __init__(self, on_message: Callable[[str, str], None] | None = None) -> None:
        self.messages: list[tuple[str, str]] = []
        self.on_message = on_message

    def _keep(self, kind: str, text: str) -> None:
        self.messages.append((kind, text))
        if self.on_message is not None:
            self.on_message(kind, text)

    def info(self, message: str) -> None:
        self._keep("info", message)

    def warn(self, message: str) -> None:
        self._keep("warning", message)

    def error(self, exc: DiagnosticError) -> None:
        self._keep("error", str(exc))

    def notice(self, message: str) -> None:
        self._keep("notice", message)

    def card(self, title: str, lines: list[str]) -> None:
        self._keep("card", "\n".join([title, *lines]))

    @contextmanager
    def step(self, title: str, log: str | None = None) -> Iterator[_Progress]:
        self._keep("step", title if log is None else f"{title} (log: {log})")
        yield _Progress()

    def boundary(self, plan: SessionPlan) -> None:
        from dejima.orchestration.start import boundary_line

        self._keep("boundary", boundary_line(plan))

    def findings_left(self, found: Sequence[Finding]) -> None:
        self._keep("findings", "\n".join(f"{s.id} {s.finding.severity} {s.finding.path}" for s in found))


def _quiet(reporter: Reporter | None) -> Reporter:
    """The caller's reporter, or one that keeps what is reported and prints nothing."""
    return reporter if reporter is not None else QuietReporter()
