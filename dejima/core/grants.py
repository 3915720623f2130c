"""Live grants, as the host asks for them: the control protocol's version, bounds and messages (pure).

Entries and durations are checked before anything is sent, by the kinds the settings use
(dejima/core/kinds.py: GRANT_ENTRY, ``duration``); the filter checks every message again
(dejima/filter/control.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dejima.core.egress import PolicyError, parse_entry

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


def grant_message(entries: list[str], seconds: int | None, reason: str,
                  special: list[str] | None = None) -> dict[str, object]:
    """``special``: overrides for entries that reach a special place (core/special_entries.py), each
    naming one of ``entries`` exactly, as ``--allow-special`` does at the start."""
    message: dict[str, object] = {"v": PROTOCOL, "op": "grant", "entries": entries, "reason": reason}
    if seconds is not None:
        message["seconds"] = seconds
    if special:
        message["special"] = special
    return message


def granted_by(name: str, grants: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The live grant (as the filter lists it) that lets ``name`` through now, or None: a name the
    session was refused, then granted, is listed with the grant that opened it."""
    for grant in grants:
        try:
            entry = parse_entry(str(grant.get("entry", "")), "grant")
        except PolicyError:
            continue
        if entry.matches_name(name):
            return grant
    return None


def revoke_message(entries: list[str], reason: str) -> dict[str, object]:
    return {"v": PROTOCOL, "op": "revoke", "entries": entries, "reason": reason}


def list_message() -> dict[str, object]:
    return {"v": PROTOCOL, "op": "list"}
