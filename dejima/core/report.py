"""What the launcher's work says to the person running it, as an interface.

Orchestration and adapters report through a ``Reporter``; the terminal UI (``dejima.ui.console``) is
one implementation, a test's recorder another. Every string may carry text a session chose: the
implementation shows it as data (escaped, never markup)."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Protocol

from dejima.errors import DiagnosticError


class Progress(Protocol):
    """A long step's progress: its latest line of log, and the tail kept for an error report."""

    lines: list[str]

    def line(self, text: str) -> None: ...


class Reporter(Protocol):
    def info(self, message: str) -> None: ...

    def warn(self, message: str) -> None: ...

    def error(self, exc: DiagnosticError) -> None: ...

    def notice(self, message: str) -> None:
        """A short notice that must not disturb a program drawing the screen (e.g. the terminal title)."""

    def card(self, title: str, lines: list[str]) -> None:
        """A few lines shown together, before a session starts."""

    def step(self, title: str, log: str | None = None) -> AbstractContextManager[Progress]:
        """A long step (an image build) and its progress; ``log``: the file that keeps its every line. A step
        left by an exception is not done: the reporter does not say it was."""
