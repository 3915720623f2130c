"""A session's directory, ``$XDG_STATE_HOME/dejima/sessions/<session>/``, and what is kept there:
its id (claimed by the launcher before anything else goes there), its run directory (sockets),
its start gate, the credential proxy's ledger, and its violations.

The filter prints one JSON line per refusal; the launcher appends them to ``violations.jsonl``
there as they arrive (``ViolationStore``), so the record outlives the session (and survives a
crash of the launcher up to the last line written).
"""

from __future__ import annotations

import json
import secrets
import shutil
import threading
from collections import Counter
from pathlib import Path
from typing import Any

from dejima.adapters import host
from dejima.core.floods import count_of
from dejima.core.placeholders import Draws
from dejima.errors import SessionError
from dejima.filter import VIOLATION as PREFIX


def sessions_dir() -> Path:
    return host.state_dir() / "sessions"


RUN_DIR = "run"  # a session's sockets (control, proxy): mounted into its filter alone
GATE = "gate"  # a session's start gate's FIFO: mounted read-only into the session
RECORDS = "violations.jsonl"  # the filter's and the credential proxy's refusals, one JSON line each
LEDGER = "ledger.jsonl"  # the requests the credential proxy carried
WORKSPACE_RECORD = "workspace"  # the session's workspace: the start's record (orchestration/start_plan.py)


def new_session_id() -> str:
    """A fresh session id whose state directory this launcher owns from now on: the owner is
    recorded before anything else goes there, so no other launcher takes it for a dead one's."""
    root = sessions_dir()
    with host.locked(root):
        for _ in range(64):
            session_id = secrets.token_hex(4)
            if not (root / session_id).exists():
                host.claim(root / session_id)
                return session_id
    raise SessionError(f"no unused session id in {root}", hint="remove old session directories there")


def new_draws() -> Draws:
    """The session's randomness, drawn before its plan like its id: its placeholders and decoys follow from it."""
    return Draws(secrets.token_bytes(32))


def live_sessions_on(workspace: str, but: str = "") -> tuple[str, ...]:
    """The sessions on ``workspace`` (as their record says) whose launcher still runs, other than ``but``."""
    try:
        directories = sorted(sessions_dir().iterdir())
    except OSError:
        return ()
    found = []
    for directory in directories:
        if directory.name == but:
            continue
        try:
            recorded = (directory / WORKSPACE_RECORD).read_text()
        except OSError:
            continue
        if recorded == workspace and host.owner_alive(directory):
            found.append(directory.name)
    return tuple(found)


def discard_unstarted(session_id: str) -> None:
    """A start that stopped before its session ran (refused, failed, undone) leaves no state directory: it
    goes when it holds nothing but its owner (a session that ran keeps its records there)."""
    directory = sessions_dir() / session_id
    with host.locked(sessions_dir()):
        try:
            names = {p.name for p in directory.iterdir()}
        except OSError:
            return
        if names <= {host.OWNER_FILE}:
            shutil.rmtree(directory, ignore_errors=True)


def run_dir(session_id: str) -> Path:
    return sessions_dir() / session_id / RUN_DIR


def clear_run_dir(session_id: str) -> None:
    """Once a session's containers are gone: its sockets (the filter's control socket, the proxy's)
    and its configuration FIFO go with them, so no file there says the session is alive."""
    shutil.rmtree(run_dir(session_id), ignore_errors=True)


def gate_dir(session_id: str) -> Path:
    """The session's start gate (adapters/fifo.py): mounted read-only into the session."""
    return sessions_dir() / session_id / GATE


def ledger_path(session_id: str) -> Path:
    return sessions_dir() / session_id / LEDGER


def session_on_record(session_id: str) -> bool:
    """Whether a session of this id has a directory here (it started, or tried to)."""
    return (sessions_dir() / session_id).is_dir()


class ViolationStore:
    def __init__(self, session_id: str) -> None:
        self.path = sessions_dir() / session_id / RECORDS
        self.lock = threading.Lock()

    def append_output(self, output: str) -> None:
        """Record every violation line of a filter's output."""
        for line in output.splitlines():
            self.append_line(line)

    def append_line(self, line: str) -> bool:
        """Record a filter log line if it is a violation; returns whether it was one."""
        if not line.startswith(PREFIX):
            return False
        try:
            record = json.loads(line[len(PREFIX):])
        except ValueError:
            return False
        with self.lock:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            with self.path.open("a") as stream:
                stream.write(json.dumps(record, sort_keys=True) + "\n")
        return True

    def summary(self) -> str | None:
        """One line of totals of everything recorded for the session: the filter's refusals and grants
        (counted as they arrived) and the credential proxy's refusals (it writes the same file)."""
        with self.lock:
            return summarize(_read(self.path))


# What the exit summary names, in order; the rest is counted as "other".
SUMMARY_LABELS = (("dns", "name(s) refused"), ("dns-answer", "answer address(es) dropped"),
                  ("connection", "connection(s) blocked"),
                  ("upstream-proxy", "connection(s) the upstream proxy refused or failed"),
                  ("decoy-used", "decoy credential(s) used"),
                  ("proxy", "request(s) refused by the credential proxy"), ("grant", "grant(s)"),
                  ("revoke", "revoke(s)"), ("grant-expired", "grant(s) expired"))


def summarize(records: list[dict[str, Any]]) -> str | None:
    counts: Counter[str] = Counter()
    for r in records:  # an aggregate (a flood, written as one record) counts what it stands for
        label = str(r.get("kind", "?")) if r.get("source") != "proxy" or r.get("kind") == "decoy-used" else "proxy"
        counts[label] += count_of(r)
    if not counts:
        return None
    parts = [f"{counts[kind]} {label}" for kind, label in SUMMARY_LABELS if counts[kind]]
    other = sum(counts.values()) - sum(counts[kind] for kind, _ in SUMMARY_LABELS)
    parts += [f"{other} other"] if other else []
    return ", ".join(parts)


def read(session_id: str) -> list[dict[str, Any]]:
    return _read(sessions_dir() / session_id / RECORDS)


def _read(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [_parsed(line) for line in path.read_text().splitlines() if line.strip()]


def _parsed(line: str) -> dict[str, Any]:
    try:
        record = json.loads(line)
    except ValueError:  # a line torn by a crash: shown as such, not dropped
        return {"kind": "unreadable-record", "line": line}
    return record if isinstance(record, dict) else {"kind": "unreadable-record", "line": line}


def known_sessions() -> list[str]:
    root = sessions_dir()
    return sorted(p.name for p in root.iterdir() if (p / RECORDS).exists()) if root.exists() else []
