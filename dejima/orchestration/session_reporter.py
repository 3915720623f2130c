"""What a session's orchestration reports beyond plain messages: the terminal UI implements it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from dejima.core.report import Reporter

if TYPE_CHECKING:
    from dejima.adapters.findings import Stored
    from dejima.core.plan import SessionPlan


class SessionReporter(Reporter, Protocol):
    def boundary(self, plan: SessionPlan) -> None:
        """What the session is held to, before the agent starts."""

    def findings_left(self, found: Sequence[Stored]) -> None:
        """The worst unreviewed findings a session left, in its closing message."""
