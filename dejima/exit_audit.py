"""Runs the exit audit around a session: snapshot at start (kept on disk, so a crashed launcher's
session is audited by the next run), audit after the containers are gone, findings stored."""

from __future__ import annotations

import base64
import json
from pathlib import Path

from dejima.core.audit import SEVERITIES, Finding, audit, watched
from dejima.core.snapshot import Entry, Snapshot
from dejima.findings import FindingStore
from dejima.snapshot import read_kept, take_snapshot
from dejima.ui.console import UI
from dejima.violations import sessions_dir


def _state_file(session_id: str) -> Path:
    return sessions_dir() / session_id / "audit-start.json"


def start(workspace: Path, session_id: str) -> Path:
    """Snapshot the workspace before the session may touch it; returns where it was saved."""
    snapshot = take_snapshot(workspace, hash_path=watched)
    kept = read_kept(workspace, snapshot, watched)
    path = _state_file(session_id)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    document = {"workspace": str(workspace), "entries": [e._asdict() for e in snapshot.values()],
                "kept": {p: base64.b64encode(b).decode() for p, b in kept.items()}}
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(document))
    temporary.replace(path)
    return path


def _load(path: Path) -> tuple[Path, Snapshot, dict[str, bytes]]:
    document = json.loads(path.read_text())
    entries = {e["path"]: Entry(**e) for e in document["entries"]}
    kept = {p: base64.b64decode(b) for p, b in document["kept"].items()}
    return Path(document["workspace"]), entries, kept


def finish(session_id: str, ui: UI, store: FindingStore | None = None) -> list[Finding]:
    """Audit the workspace against its start snapshot, store the findings, and say so."""
    path = _state_file(session_id)
    workspace, before, kept_before = _load(path)
    after = take_snapshot(workspace, previous=before)
    kept_after = read_kept(workspace, after, watched)
    findings = audit(before, after, lambda side, p: (kept_before if side == "before" else kept_after).get(p))
    store = store or FindingStore()
    store.record(session_id, str(workspace), findings)
    path.unlink()
    if findings:
        worst = max(findings, key=lambda f: SEVERITIES.index(f.severity)).severity
        ui.warn(f"session {session_id} left {len(findings)} change(s) that can run code on the host "
                f"(worst: {worst}); review them: dejima-audit")
    return findings


def recover(ui: UI, live_sessions: set[str]) -> None:
    """Audit the sessions whose launcher died before it could (their start snapshot is still there)."""
    root = sessions_dir()
    if not root.exists():
        return
    for state in sorted(root.glob("*/audit-start.json")):
        session_id = state.parent.name
        if session_id in live_sessions:
            continue
        ui.info(f"auditing session {session_id}, whose launcher ended before it could")
        finish(session_id, ui)
