"""What sessions left: their violations, their credential proxy's ledger, and the exit audit's findings (listed,
acknowledged, restored), as `dejima violations`, `dejima ledger` and `dejima-audit` read them."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from dejima.errors import UsageError

if TYPE_CHECKING:
    from dejima.adapters.findings import FindingStore
    from dejima.adapters.findings import Stored as Finding


def recorded_sessions() -> list[str]:
    """The ids of the sessions that have a violations record, sorted."""
    from dejima.adapters import session_dirs

    return session_dirs.known_sessions()


def violations(session_id: str) -> list[dict[str, Any]]:
    """What a session was refused (and the grants made in it), as `dejima violations SESSION --json` prints
    them: one dict per record, in order; [] when none was recorded."""
    from dejima.adapters import session_dirs

    return session_dirs.read(session_id)


def ledger(session_id: str) -> list[dict[str, Any]]:
    """The requests a session's credential proxy carried (never a secret), as `dejima ledger SESSION --json`
    prints them; ``UsageError`` when there is no such session on record."""
    from dejima.adapters.session_dirs import ledger_path, session_on_record
    from dejima.proxy.records import read_records

    if not session_on_record(session_id):
        raise UsageError(f"no session {session_id!r} on record", hint="`dejima violations` lists the sessions")
    return [dict(record) for record in read_records(ledger_path(session_id))]


@contextmanager
def _store() -> Iterator[FindingStore]:
    from dejima.adapters.findings import FindingStore

    store = FindingStore()
    try:
        yield store
    finally:
        store.close()


def _workspace(workspace: str | os.PathLike[str] | None) -> str | None:
    return os.path.abspath(os.path.expanduser(os.fspath(workspace))) if workspace is not None else None


def findings(workspace: str | os.PathLike[str] | None = None, *, reviewed: bool = False,
             minimum: str = "low") -> list[Finding]:
    """The exit audit's findings (of ``workspace``, or every one), oldest first: the unreviewed ones of severity
    ``minimum`` (info, low, medium, high, critical) or worse, as `dejima-audit list` shows them; ``reviewed``:
    the acknowledged and the closed ones too. A finding whose cause is gone from disk is closed first
    (finding_causes.settle)."""
    from dejima.core.audit import SEVERITIES, rank

    if minimum not in SEVERITIES:
        raise UsageError(f"no severity {minimum!r}", hint=f"one of: {', '.join(SEVERITIES)}")
    from dejima.adapters.finding_causes import settle_all

    with _store() as store:
        settle_all(store, _workspace(workspace))  # what is gone from disk closes, what is back opens again
        found = store.findings(_workspace(workspace), include_acked=reviewed)
    return [s for s in found if rank(s.finding.severity) >= rank(minimum)]


def _known(store: FindingStore, ids: Sequence[int]) -> list[Finding]:
    wanted = store.get(list(ids))
    missing = sorted(set(ids) - {s.id for s in wanted})
    if missing:
        raise UsageError(f"no finding {', '.join(map(str, missing))}", hint="dejima-audit list --all shows every id")
    return wanted


def findings_by_id(ids: Sequence[int]) -> list[Finding]:
    """Findings by id, with their file's start and end states (``state``), as `dejima-audit show` reads them;
    ``UsageError`` naming the ids that are no finding."""
    with _store() as store:
        return _known(store, ids)


def acknowledge(ids: Sequence[int] | None, note: str, *, workspace: str | os.PathLike[str] | None = None
                ) -> list[Finding]:
    """Record the review of unreviewed findings, bound to their content (a later change to the file is a new
    finding): by id, or every one (``ids`` None) of ``workspace`` or of all. Returns those acknowledged (an id
    reviewed already is not one)."""
    if not note.strip():
        raise UsageError("the note is empty", hint="say why the change is fine")
    with _store() as store:
        if ids is not None:
            _known(store, ids)
        return store.ack(list(ids) if ids is not None else None, note,
                         _workspace(workspace) if ids is None else None)


def restore(ids: Sequence[int], *, force: bool = False, note: str = "restored through dejima.api",
            on_restored: Callable[[str], None] | None = None) -> list[str]:
    """Put each finding's file back as it was when its session started (or remove what the session made), never
    following a link, and close the open findings on that file with ``note`` (no review: the same content
    found again is a finding again; a restored finding that was acknowledged is no longer). A file changed
    again since the audit is refused unless ``force``. Returns what was done, in words, one per file (each
    also handed to ``on_restored`` as it is done)."""
    from dejima.adapters.restore import restore as restore_file

    done_paths: set[tuple[str, str]] = set()
    done: list[str] = []
    with _store() as store:
        for stored in _known(store, ids):
            where = (stored.root, stored.finding.path)
            if where in done_paths:
                continue  # another finding on the same file: restoring it once covers both
            said = restore_file(stored, force=force)
            done_paths.add(where)
            same_path = [s.id for s in store.findings(stored.workspace) if (s.root, s.finding.path) == where]
            store.close_findings(same_path or [stored.id], f"closed: {note}: {said}")
            if stored.acked:  # the user undoes what they had reviewed: that content is no longer reviewed
                store.unack(stored)
            done.append(said)
            if on_restored is not None:
                on_restored(said)
    return done
