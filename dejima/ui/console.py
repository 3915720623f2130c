"""The console: messages on stderr; tables and answers on stdout (``UI.out``), as git, docker and
kubectl do, so that a pipe or a file gets the result and the terminal the diagnostics. A session's
start prints nothing on stdout: there stdout belongs to the session's command.

Messages name paths, sessions and values that a session may have chosen: every one is shown as
plain text through ``ui.text`` (escaped, never markup), whoever built the string.

rich (~20 ms to import) is imported by the first message: a quiet start that has nothing to say
never pays for it."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, TYPE_CHECKING

from dejima.errors import DiagnosticError
from dejima.ui.text import MESSAGE_LIMIT, escaped

if TYPE_CHECKING:
    from collections.abc import Sequence

    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from dejima.adapters.findings import Stored
    from dejima.core.plan import SessionPlan


# Off a terminal a line is as wide as its content: a table printed to a pipe or a file cuts no value.
UNCUT_WIDTH = 1 << 16


class UI:
    def __init__(self, console: Console | None = None, quiet: bool = False, out: Console | None = None) -> None:
        self._console = console
        self._out = out
        self.quiet = quiet

    @property
    def console(self) -> Console:
        if self._console is None:
            from rich.console import Console

            self._console = Console(file=sys.stderr, highlight=False, soft_wrap=True)
        return self._console

    @property
    def out(self) -> Console:
        """Where a command's result goes (tables, answers): stdout; off a terminal, never cut to a width."""
        if self._out is None:
            self._out = output_console(sys.stdout)
        return self._out

    def table(self, table: Table) -> None:
        """A table of results, on stdout (every cell is plain ``Text``: session data never markup)."""
        self.out.print(table)

    def answer(self, message: str) -> None:
        """One line of a command's result (what it did or found), on stdout, even when quiet."""
        self.out.print(_message(message), crop=False)

    def info(self, message: str) -> None:
        if not self.quiet:
            self.console.print(_styled("dejima: ", "bold cyan") + _message(message))

    def warn(self, message: str) -> None:
        self.console.print(_styled("dejima: warning: ", "bold yellow") + _message(message))

    def card(self, title: str, lines: list[str]) -> None:
        if not self.quiet:
            from rich.panel import Panel

            body = _styled("\n").join(_message(line) for line in lines)
            self.console.print(Panel(body, title=_message(title), expand=False))

    def boundary(self, plan: SessionPlan) -> None:
        """The card of what a session is held to, before the agent starts."""
        from dejima.ui.views import boundary_card

        self.card("dejima boundary", boundary_card(plan))

    def findings_left(self, found: Sequence[Stored]) -> None:
        """The worst findings a session left, one line each, in the closing message: cut to the terminal's
        width, never off one (a log keeps the whole line)."""
        from dejima.ui.audit_views import end_of_session

        width = self.console.width if self.console.is_terminal else UNCUT_WIDTH
        for line in end_of_session(list(found), width=width):
            self.console.print(line, crop=False)

    def error(self, exc: DiagnosticError) -> None:
        self.console.print(render_error(exc))

    def notice(self, message: str) -> None:
        """A one-line notice that does not touch the screen another program draws (an agent's TUI
        owns it): the terminal's title. Printable ASCII only, so no text can end the sequence."""
        if self.console.is_terminal and not self.quiet:
            shown = "".join(c for c in escaped(message, limit=200) if " " <= c <= "~")
            self.console.file.write(f"\x1b]2;{shown}\x07")
            self.console.file.flush()

    @contextmanager
    def step(self, title: str, log: str | None = None) -> Iterator[ProgressStep]:
        """A long step (image build, bootstrap): one line, with its latest log line as progress on a
        terminal; its every line is in ``log`` (named), not on the screen."""
        import time

        step = ProgressStep(self, title)
        started = time.monotonic()
        kept = f" (log: {log})" if log else ""
        if self.console.is_terminal and not self.quiet:
            with self.console.status(_message(title), spinner="dots") as status:
                step.status = status
                yield step
        else:
            self.info(f"{title}{kept} ...")
            yield step
        self.info(f"{title}: done in {time.monotonic() - started:.0f} s{kept if self.console.is_terminal else ''}")


class ProgressStep:
    def __init__(self, ui: UI, title: str) -> None:
        self.ui = ui
        self.title = title
        self.status: object | None = None
        self.lines: list[str] = []

    def line(self, text: str) -> None:
        self.lines.append(text)
        del self.lines[:-200]  # keep the tail for error reports
        if self.status is not None:
            self.status.update(_styled(f"{escaped(self.title)} | {escaped(text, limit=100)}"))  # type: ignore[attr-defined]


def render_error(exc: DiagnosticError) -> Text:
    from rich.text import Text

    text = Text()
    text.append("dejima: error", style="bold red")
    text.append(f" [{exc.reference}]: ", style="red")
    text.append(escaped(exc.message, MESSAGE_LIMIT))
    if exc.context:
        for line in exc.context.splitlines():
            text.append("\n  │ ")
            text.append(escaped(line, MESSAGE_LIMIT, keep_tabs=True))
    if exc.hint:
        text.append("\n  hint: ", style="bold")
        text.append(escaped(exc.hint, MESSAGE_LIMIT))
    return text


def _styled(text: str, style: str = "") -> Text:
    from rich.text import Text

    return Text(text, style=style)


def _message(message: str) -> Text:
    return _styled(escaped(message, MESSAGE_LIMIT))


def output_console(stream: IO[str]) -> Console:
    """A console for results on ``stream``: the terminal's width on a terminal, else ``UNCUT_WIDTH``."""
    from rich.console import Console

    console = Console(file=stream, highlight=False, soft_wrap=True)
    if not console.is_terminal:
        console.width = UNCUT_WIDTH
    return console


def plain_console(stream: IO[str], width: int = 100) -> Console:
    """A colourless console for tests and for --json paths."""
    from rich.console import Console

    return Console(file=stream, width=width, color_system=None, highlight=False, soft_wrap=True)


__all__ = ["UI", "UNCUT_WIDTH", "ProgressStep", "render_error", "output_console", "plain_console"]
