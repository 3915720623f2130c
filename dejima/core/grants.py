"""Live grants, as the host asks for them: entries, durations and the control messages (pure).

The filter checks every message again (dejima/filter/control.py); this side refuses bad input
before it is sent, with the same entry grammar as ``--allow``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from dejima.core.egress import parse_entry
from dejima.errors import DiagnosticError, UsageError

PROTOCOL = 1
MAX_SECONDS = 30 * 24 * 3600
_DURATION = re.compile(r"^(\d+)(s|m|h|d)$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


class GrantError(UsageError):
    """Bad input to dejima-allow (exit 2), said before anything is sent."""

    reference = "invalid-grant"


def parse_duration(text: str) -> int:
    """``90s``, ``30m``, ``2h``, ``1d`` -> seconds (at most 30 days)."""
    match = _DURATION.match(text.strip())
    if not match:
        raise GrantError(f"--for {text!r} is not a duration", hint="write a number and a unit: 90s, 30m, 2h or 1d")
    seconds = int(match.group(1)) * _UNITS[match.group(2)]
    if not 1 <= seconds <= MAX_SECONDS:
        raise GrantError(f"--for {text!r} is out of range", hint="from 1s to 30d")
    return seconds


@dataclass(frozen=True, slots=True)
class Denial:
    """A name the session was refused, as the filter lists it."""

    name: str
    count: int
    last: float
    reason: str
    grantable: bool


def validate_entries(entries: list[str], flag: str = "dejima-allow") -> list[str]:
    """The entries in canonical form; GrantError (naming the entry and the fix) on the first bad one."""
    canonical = []
    for text in entries:
        try:
            entry = parse_entry(text, flag)
        except DiagnosticError as exc:
            raise GrantError(exc.message, hint=exc.hint) from None
        if entry.network is not None and (entry.network.version != 4 or entry.network.num_addresses != 1):
            raise GrantError(f"{flag}: {text!r}: a live grant takes a name, a *.wildcard or one IPv4 address",
                             hint="networks and IPv6 are allowed at the start only (dejima PATH --allow)")
        canonical.append(entry.canonical)
    return canonical


def grant_message(entries: list[str], seconds: int | None, reason: str) -> dict[str, object]:
    message: dict[str, object] = {"v": PROTOCOL, "op": "grant", "entries": entries, "reason": reason}
    if seconds is not None:
        message["seconds"] = seconds
    return message


def revoke_message(entries: list[str], reason: str) -> dict[str, object]:
    return {"v": PROTOCOL, "op": "revoke", "entries": entries, "reason": reason}


def list_message() -> dict[str, object]:
    return {"v": PROTOCOL, "op": "list"}


def denial_entry(denial: Denial) -> str:
    """What granting a listed denial grants: the refused name itself, every port."""
    return denial.name
