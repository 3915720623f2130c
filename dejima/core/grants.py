"""Live grants, as the host asks for them: the control protocol's version, bounds and messages (pure).

Entries and durations are checked before anything is sent, by the kinds the settings use
(dejima/core/kinds.py: GRANT_ENTRY, ``duration``); the filter checks every message again
(dejima/filter/control.py).
"""

from __future__ import annotations

from dataclasses import dataclass

PROTOCOL = 1
MAX_SECONDS = 30 * 24 * 3600


@dataclass(frozen=True, slots=True)
class Denial:
    """A name the session was refused, as the filter's resolver keeps it and its control socket lists it."""

    name: str
    count: int
    last: float  # wall-clock time of the latest refusal
    reason: str
    grantable: bool  # False when the deny list refused it: no grant can lift that


def grant_message(entries: list[str], seconds: int | None, reason: str) -> dict[str, object]:
    message: dict[str, object] = {"v": PROTOCOL, "op": "grant", "entries": entries, "reason": reason}
    if seconds is not None:
        message["seconds"] = seconds
    return message


def revoke_message(entries: list[str], reason: str) -> dict[str, object]:
    return {"v": PROTOCOL, "op": "revoke", "entries": entries, "reason": reason}


def list_message() -> dict[str, object]:
    return {"v": PROTOCOL, "op": "list"}
