"""The launcher's console: messages on stderr (stdout belongs to the session's command)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO

from rich.console import Console
from rich.markup import escape
from rich.text import Text

from dejima.errors import DiagnosticError


class UI:
    def __init__(self, console: Console | None = None, quiet: bool = False) -> None:
        self.console = console or Console(file=sys.stderr, highlight=False, soft_wrap=True)
        self.quiet = quiet

    def info(self, message: str) -> None:
        if not self.quiet:
            self.console.print(Text("dejima: ", style="bold cyan") + Text(message))

    def warn(self, message: str) -> None:
        self.console.print(Text("dejima: warning: ", style="bold yellow") + Text(message))

    def card(self, title: str, lines: list[str]) -> None:
        if not self.quiet:
            from rich.panel import Panel

            self.console.print(Panel("\n".join(escape(line) for line in lines), title=title, expand=False))

    def error(self, exc: DiagnosticError) -> None:
        self.console.print(render_error(exc))

    @contextmanager
    def step(self, title: str) -> Iterator[Step]:
        """A long step (image build, bootstrap) with its latest log line shown as progress."""
        step = Step(self, title)
        if self.console.is_terminal and not self.quiet:
            with self.console.status(Text(title), spinner="dots") as status:
                step.status = status
                yield step
        else:
            self.info(f"{title} ...")
            yield step
        self.info(f"{title}: done")


class Step:
    def __init__(self, ui: UI, title: str) -> None:
        self.ui = ui
        self.title = title
        self.status: object | None = None
        self.lines: list[str] = []

    def line(self, text: str) -> None:
        self.lines.append(text)
        del self.lines[:-200]  # keep the tail for error reports
        if self.status is not None:
            self.status.update(Text(f"{self.title} | {text[:100]}"))  # type: ignore[attr-defined]
        elif not self.ui.quiet:
            self.ui.console.print(Text(f"  {text}", style="dim"))


def render_error(exc: DiagnosticError) -> Text:
    text = Text()
    text.append("dejima: error", style="bold red")
    text.append(f" [{exc.reference}]: ", style="red")
    text.append(exc.message)
    if exc.context:
        for line in exc.context.splitlines():
            text.append("\n  │ ")
            text.append(line)
    if exc.hint:
        text.append("\n  hint: ", style="bold")
        text.append(exc.hint)
    return text


def plain_console(stream: IO[str], width: int = 100) -> Console:
    """A colourless console for tests and for --json paths."""
    return Console(file=stream, width=width, color_system=None, highlight=False, soft_wrap=True)


__all__ = ["UI", "Step", "render_error", "plain_console", "escape"]
