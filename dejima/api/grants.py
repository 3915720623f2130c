"""A running session's live grants: the sessions that take them, their entries and durations checked as
`dejima-allow` checks them, and the grants made, listed, revoked or kept for the next session."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from dejima.errors import GrantRefused, UsageError

if TYPE_CHECKING:
    from dejima.adapters.control_client import RunningSession


def running_sessions(directory: str | os.PathLike[str] | None = None) -> list[RunningSession]:
    """The sessions running on this host (of any scope) whose filter takes grants, oldest id first; with
    ``directory``: those whose workspace is it or holds it. Needs no engine."""
    from dejima.adapters import control_client

    sessions = control_client.running_sessions()
    return sessions if directory is None else control_client.sessions_for(Path(directory), sessions)


def running_session(session_id: str) -> RunningSession:
    """The running session of that id; ``UsageError`` when none runs (it ended, or never was)."""
    match = [s for s in running_sessions() if s.session_id == session_id]
    if not match:
        raise UsageError(f"no running session {session_id!r}",
                         hint="`dejima sessions` lists them; a session that ended takes no grants")
    return match[0]


def _running(session: str | RunningSession) -> RunningSession:
    return running_session(session) if isinstance(session, str) else session


def _send(session: RunningSession, message: dict[str, object]) -> dict[str, Any]:
    from dejima.adapters import control_client

    answer = control_client.send(session, message)
    if not answer.get("ok"):
        raise GrantRefused(f"session {session.session_id} refused: {answer.get('error', 'no reason given')}",
                           hint="nothing was changed")
    return answer


def check_grant_entry(text: str, name: str = "the entry") -> str:
    """A live grant's entry (a name, *.wildcard or IPv4 address, with an optional :port), checked as
    `dejima-allow` checks it, in its canonical form; ``InputError`` naming ``name`` when it is not one."""
    from dejima.core.kinds import GRANT_ENTRY
    from dejima.core.schema import check_flag

    checked: str = check_flag(GRANT_ENTRY, text, name)
    return checked


def check_duration(text: str, name: str = "duration") -> int:
    """A grant's duration (90s, 30m, 2h, 1d; at most 30 days) in seconds; ``InputError`` naming ``name``."""
    from dejima.core import grants
    from dejima.core.kinds import duration
    from dejima.core.schema import check_flag

    seconds: int = check_flag(duration(grants.MAX_SECONDS), text, name)
    return seconds


def live(session: str | RunningSession) -> dict[str, Any]:
    """A running session's live grants and the names it was refused, as its filter lists them:
    ``{"grants": [{"entry", "since", "expires", "reason"}...], "denials": [{"name", "count", "last", "reason",
    "grantable", "granted_by"}...]}`` (times are Unix seconds; ``expires`` None: until the session ends; denials
    newest first; a denial's ``granted_by`` is the live grant that lets its name through now, else None)."""
    from dejima.core import grants

    listing = _send(_running(session), grants.list_message())
    for denial in listing.get("denials", []):
        denial["granted_by"] = grants.granted_by(str(denial.get("name", "")), listing.get("grants", []))
    return listing


def grant(session: str | RunningSession, entries: Sequence[str], *, duration: str | None = None,
          reason: str = "", allow_special: Sequence[str] = (),
          spelling: Literal["keywords", "flags"] = "keywords") -> list[str]:
    """Grant ``entries`` to a running session (its next connection gets through); for ``duration`` (90s, 30m...)
    or until the session ends. Returns the entries granted, canonical. An address that reaches a special place
    (this host, the engine's gateway, cloud metadata: the start's rule for ``Request.allow``) needs an override
    naming it exactly in ``allow_special``. ``GrantRefused`` when its filter refuses (a name on the deny list, a
    special address without its override: named ``allow_special=[...]``, or ``--allow-special`` with
    ``spelling="flags"``, as `dejima-allow` asks), ``SessionEnded`` when it ended first: either way nothing changed."""
    from dejima.core import grants

    checked = [check_grant_entry(entry) for entry in entries]
    special = [check_grant_entry(entry, "the override") for entry in allow_special]
    seconds = check_duration(duration) if duration is not None else None
    message = grants.grant_message(checked, seconds, reason, special)
    try:
        granted: list[str] = _send(_running(session), message)["granted"]
    except GrantRefused as exc:
        if spelling == "keywords":  # the filter names the command line's override
            from dejima.api.plans import _in_keywords

            exc.message = _in_keywords(exc.message)
            exc.args = (exc.message,)
        raise
    return granted


def revoke(session: str | RunningSession, entries: Sequence[str], *,
           reason: str = "revoked through dejima.api") -> list[str]:
    """Take grants back: new connections fail, open ones are cut. Returns the entries revoked."""
    from dejima.core import grants

    checked = [check_grant_entry(entry) for entry in entries]
    revoked: list[str] = _send(_running(session), grants.revoke_message(checked, reason))["revoked"]
    return revoked


def persist_grants(session: str | RunningSession, entries: Sequence[str]) -> Path:
    """Add ``entries`` to the user's policy for the session's workspace (comments and order kept), so the next
    session there has them from the start; returns the policy file's path."""
    from dejima.adapters import projects

    running = _running(session)
    return projects.persist_allow(Path(running.workspace), [check_grant_entry(entry) for entry in entries])
