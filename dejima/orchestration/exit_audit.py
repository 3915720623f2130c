"""Runs the exit audit around a session: every writable mount snapshotted at start (kept on disk,
so a crashed launcher's session is audited by the next run), audited after the containers are
gone, findings stored with the start state of their files (for `dejima-audit show` and
`restore`)."""

from __future__ import annotations

import base64
import json
import os
import shutil
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from dejima.adapters import (
    cargo_cache,
    finding_causes,
    host,
    mount_state,
    npm_cache,
    venv_record,
    wheel_cache,
    yarn_cache,
)
from dejima.adapters.audit_start import Mount as Mount  # the audit's callers name them from here
from dejima.adapters.audit_start import MountState as MountState
from dejima.adapters.audit_start import capture as capture
from dejima.adapters.findings import FileState, FindingStore
from dejima.adapters.fork_workers import gc_paused, stop_behind
from dejima.adapters.mount_state import (
    State,
    decode_state,
    encode_state,
    load_snapshot,
    save_snapshot,
)
from dejima.adapters.pinned_archives import joined
from dejima.adapters.session_dirs import live_sessions_on, sessions_dir
from dejima.adapters.start_contents import KEEP_LIMIT, READ_LIMIT, hashed_paths, read_file
from dejima.adapters.tree_walk import (
    WALK_ATTEMPTS,
    InconsistentWalk,
    Known,
    SnapshotError,
    complete_start,
    walk_changes,
)
from dejima.adapters.walk_shares import shared_out
from dejima.core.audit import SEVERITIES, Finding, cargo_verify, npm_verify, python_verify, yarn_verify
from dejima.core.audit.git import housekeeping
from dejima.core.audit.manifest_watch import Watch
from dejima.core.audit.model import Artifacts, finding, rank
from dejima.core.audit.reviewed import Baseline, judged_against
from dejima.core.audit.venv_facts import SessionPython, VenvFacts
from dejima.core.snapshot import Snapshot, apply_delta, changed_paths, compose
from dejima.orchestration.session_reporter import SessionReporter

_STATE_VERSION = 2
SHARE_AFTER = 2000  # changes from which the rule stages are shared out over processes (both cores)


def _state_dir(session_id: str) -> Path:
    return sessions_dir() / session_id / "audit"


def _read(root: Path, snapshot: Snapshot, path: str, limit: int) -> bytes | None:
    """One regular file's bytes (None if not in ``snapshot``, not a file, or larger than ``limit``)."""
    return read_file(root, path, limit) if path in snapshot else None


def _walk_end(state: MountState, session_id: str, contents: dict[str, bytes],
              listed: dict[str, list[str]]) -> tuple[Snapshot, list[str], list[Finding]]:
    """The end snapshot, and the paths that may have changed (``contents`` and ``listed``: filled
    with the bytes of the files the walk hashed and the directories it listed, when it added up).
    When the tree would not hold still while walked (walked again, and still), entries git's own
    housekeeping rewrites (a host-side `git gc`) are what they are; anything else the walk cannot
    account for is named in a critical finding, the rest audited as usual."""
    try:
        # The start walk's listing digests: a directory that lists the same is not compared child by child.
        trusted = state.start.digests if state.start is not None else None
        return *walk_changes(state.mount.root, previous=state.snapshot, trusted=trusted, children=state.children,
                             sizes=state.sizes, entries=state.end_entries(), contents=contents,
                             listed=listed, listings=state.start_listings()), []
    except InconsistentWalk as exc:
        after, unsure = exc.snapshot, [p for p in exc.paths if not housekeeping(p)]
        for path in exc.paths:
            after.pop(path, None)
    changed = changed_paths(state.snapshot, after)
    if not unsure:
        return after, changed, []
    shown = ", ".join(unsure[:10]) + (f" and {len(unsure) - 10} more" if len(unsure) > 10 else "")
    return after, changed, [finding("X00", "critical", "", f"session {session_id}: {state.mount.root} changed while "
                                    f"it was audited (walked {WALK_ATTEMPTS} times); the audit cannot say what "
                                    f"happened to {shown}: check them by hand, then ack this", "\n".join(unsure))]


def audit_mount(state: MountState, session_id: str = "", npm_caches: list[Path] | None = None,
                cargo_homes: list[Path] | None = None, yarn_caches: list[Path] | None = None,
                wheel_caches: wheel_cache.WheelCaches | None = None,
                venvs: VenvFacts | None = None) -> tuple[list[Finding], Snapshot]:
    """Findings for one mount now (the session must be gone), and the end snapshot. ``npm_caches``,
    ``cargo_homes``, ``yarn_caches``, ``wheel_caches``: where the pinned archives of its trees can be
    read (default: the host user's own); ``venvs``: the session image's record of what its Python
    environments' own files are (None: not verified)."""
    found, after, _ = _audit_mount(state, session_id, _pinned(
        npm_cache.npm_caches(()) if npm_caches is None else npm_caches,
        cargo_cache.cargo_homes(()) if cargo_homes is None else cargo_homes,
        yarn_cache.yarn_caches(()) if yarn_caches is None else yarn_caches),
        wheels=wheel_cache.python_caches(()) if wheel_caches is None else wheel_caches, venvs=venvs)
    return found, after


def _pinned(npm_caches: list[Path], cargo_homes: list[Path], yarn_caches: list[Path]) -> Artifacts:
    """The reader of the packages' pinned archives: npm's and yarn's tarballs, cargo's crates."""
    return joined({cargo_verify.CRATE_PREFIX: cargo_cache.crates(cargo_homes),
                   yarn_verify.YARN_PREFIX: yarn_cache.tarballs(yarn_caches, npm_caches),
                   "": npm_cache.tarballs(npm_caches)})


def _audit_mount(state: MountState, session_id: str, pinned: Artifacts, lineage: Lineage | None = None,
                 wheels: wheel_cache.WheelCaches | None = None,
                 venvs: VenvFacts | None = None) -> tuple[list[Finding], Snapshot, list[str]]:
    # The rules allocate while 200k entries are in memory: a full collection would scan them all.
    state.ready()
    with gc_paused():
        # The workspace is mounted at its own path (executor.audited_mounts): where an environment was.
        python = SessionPython(venvs, str(state.mount.root))
        return _audit_ready(state, session_id, pinned, lineage, wheels or wheel_cache.WheelCaches(), python)


# The paths of a mount with a lineage, and their baselines by (path, content): what an earlier audit flagged.
Lineage = tuple[set[str], Callable[[str, str], Baseline | None]]


def _audit_ready(state: MountState, session_id: str, pinned: Artifacts, lineage: Lineage | None,
                 wheels: wheel_cache.WheelCaches,
                 python: SessionPython) -> tuple[list[Finding], Snapshot, list[str]]:
    root = state.mount.root
    hashed: dict[str, bytes] = {}
    listed: dict[str, list[str]] = {}
    after, changed, unsure = _walk_end(state, session_id, hashed, listed)
    read: dict[str, bytes | None] = {**hashed}  # the bytes the walk hashed: not read again
    # A changed file whose start content an earlier audit flagged is judged against what that audit did.
    before, kept = state.snapshot, state.kept
    if lineage is not None and lineage[0]:
        before, kept = judged_against(before, kept, after, lineage[0].intersection(changed), lineage[1])

    def contents(side: str, path: str) -> bytes | None:
        if side == "before":
            return kept.get(path)
        if path not in read:
            read[path] = _read(root, after, path, READ_LIMIT)
        return read[path]

    top = str(root)

    def listdir(directory: str) -> list[str]:
        if directory in listed:
            return listed[directory]  # listed by the walk (the directories whose entry changed)
        try:
            return os.listdir(os.path.join(top, directory))  # a real directory: the walk went in
        except OSError:
            return []

    from dejima.core.audit.rules import audit  # imported during the session (start): ready, or nearly

    share = shared_out if len(changed) >= SHARE_AFTER else None  # a fork costs more than a few rules
    return [*unsure, *audit(before, after, contents, state.mount.kind, listdir, changed,
                            state.mount.watch, joined({python_verify.WHEEL_PREFIX: wheel_cache.wheels(wheels, root),
                                                       "": pinned}), share, python,
                            state.joined_paths(before))], after, changed


_reading_ahead: list[int] = []  # the processes read_ahead started, ended by the end audit


def read_ahead(states: list[MountState]) -> list[int]:
    """The pinned tarballs the start's npm lockfiles name (kept with the start), read while the
    session runs by a process of their own, their manifests kept: the end audit finds them kept
    instead of inflating them on its critical path (what was not done by then, it does). Which
    lockfile is read proves nothing: a manifest is kept only for bytes that hash to their pin.
    Those not cached at the start are read as the session's install fetches them (a project's first
    session), but for the optional ones: npm fetches those for other platforms never."""
    pins = npm_verify.pinned_integrities(text for _, text in _kept_lockfiles(states, npm_verify.LOCKFILES))
    if not pins:
        return []
    homes = [s.mount.root for s in states if s.mount.kind == "home"]
    awaited = [integrity for integrity, optional in pins.items() if not optional]
    return [pid for pid in (npm_cache.read_ahead(npm_cache.npm_caches(homes), list(pins), awaited),) if pid]


def _import_rules(states: list[MountState]) -> None:
    """The audit's rules (and yaml) imported ahead, and the start's uv.lock files parsed (the
    parser keeps them): the end audit does not wait for them."""
    import dejima.core.audit.rules  # noqa: F401
    for path, text in _kept_lockfiles(states, (python_verify.LOCKFILE,)):
        python_verify.uv_pins(text, path.rpartition("/")[0])


def _kept_lockfiles(states: list[MountState], names: tuple[str, ...]) -> Iterator[tuple[str, str]]:
    """Each file named one of ``names`` the start kept, and its text as the audit reads it (View.text)."""
    for state in states:
        for path, data in state.kept.items():
            if path.rpartition("/")[2] in names:
                yield path, data.decode("utf-8", "surrogateescape")


def start(session_id: str, mounts: list[Mount], image: str = "") -> list[MountState]:
    """Snapshot every writable mount before the session may touch it; the state is also saved, for
    the next run to audit if this launcher dies. ``image``: the session image's id, whose record of
    what a Python environment's own files are the audit reads (venv_record.py)."""
    directory = _state_dir(session_id)
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    states = []
    try:
        # Written first and alone: even a state that cannot be read later names the workspace its
        # unaudited session must block.
        workspace = next((str(m.root) for m in mounts if m.kind == "workspace"), "")
        (directory / "workspace").write_text(workspace)
        described = []
        for index, mount in enumerate(mounts):
            state = capture(mount, defer=True)
            try:
                _save_start(directory, index, state)
            except (OSError, ValueError, SnapshotError):  # its trusted state went away: walked in full
                state = capture(mount, incremental=False)
                _save_start(directory, index, state)
            states.append(state)
            described.append({"kind": mount.kind, "root": str(mount.root), "snapshot": f"{index}.snapshot",
                              "state": f"{index}.state", "watch": [[w.path, w.source] for w in mount.watch],
                              "kept": {p: base64.b64encode(b).decode() for p, b in state.kept.items()}})
        host.write_atomically(directory / "state.json", json.dumps({"version": _STATE_VERSION, "mounts": described,
                                                                    "image": image}).encode())
        _reading_ahead.extend(read_ahead(states))  # forked before any thread of the start's runs
        # The rules (and yaml) are imported while the session runs, not while its filter starts.
        threading.Thread(target=_import_rules, args=(states,), name="audit-rules", daemon=True).start()
    except BaseException:
        shutil.rmtree(directory, ignore_errors=True)  # no session starts without its start state
        raise
    for state in states:  # after every walk: no fork while a thread runs
        state.begin()
    return states


def _save_start(directory: Path, index: int, state: MountState) -> None:
    """The start snapshot, for the next run to audit if this launcher dies: a link to the base
    it was loaded from plus its delta (a full save when there is none)."""
    path, start = directory / f"{index}.snapshot", state.start
    assert start is not None
    try:
        if not start.base.name:
            raise FileNotFoundError("no base")
        os.link(start.base, path)
    except OSError:  # walked in full, or the base is gone or elsewhere: the whole snapshot
        save_snapshot(path, state.ready())
        start.delta = ([], [])
    start.base = path
    walk = {}
    if state.walked is not None and state.walked.known is not None:
        # Not loaded yet: loaded from this link (the mount's own base may be replaced meanwhile);
        # what the walk recorded is kept with the state, applied to it when read back.
        delta, digests = start.delta, state.walked.known.digests
        state.walked.known = Known(digests, lambda: apply_delta(load_snapshot(path), delta))
        walk = {"walk": state.walked.results}
    host.write_atomically(directory / f"{index}.state", encode_state(State(start.identity, path, start.delta,
                                                                      start.digests, {**start.extra, **walk}),
                                                                path.name))


def _image(session_id: str) -> str:
    """The session image's id the start recorded ("" when it recorded none: nothing is verified by it)."""
    try:
        image = json.loads((_state_dir(session_id) / "state.json").read_text()).get("image", "")
    except (OSError, ValueError, AttributeError):
        return ""
    return image if isinstance(image, str) else ""


def _load(session_id: str) -> list[MountState]:
    directory = _state_dir(session_id)
    document = json.loads((directory / "state.json").read_text())
    if document.get("version") != _STATE_VERSION:
        raise ValueError(f"start state version {document.get('version')!r}, this dejima reads {_STATE_VERSION}")
    states = []
    for m in document["mounts"]:
        snapshot, start = load_snapshot(directory / m["snapshot"]), None
        if "state" in m:  # the snapshot is a base plus the delta kept with the digests
            start = decode_state((directory / m["state"]).read_bytes(), directory)
            snapshot = apply_delta(snapshot, start.delta)
            walk = start.extra.pop("walk", None)
            if walk is not None:  # the launcher died before it loaded the trusted entries
                snapshot, changed = complete_start(snapshot, walk)
                start.delta = compose(start.delta, snapshot, changed)
        # A state written before manifests' watch lists were kept has none (the same version:
        # nothing else changed, and an older dejima reading this one only misses them).
        watch = tuple(Watch(str(path), str(source)) for path, source in m.get("watch", ()))
        states.append(MountState(Mount(m["kind"], Path(m["root"]), watch), snapshot,
                                 {p: base64.b64decode(b) for p, b in m["kept"].items()}, start))
    return states


def _file_states(state: MountState, after: Snapshot, found: list[Finding]) -> dict[str, FileState]:
    """The start and end state of each flagged path: what show diffs and restore puts back."""
    states = {}
    for path in {f.path for f in found}:
        before, now = state.snapshot.get(path), after.get(path)
        end = _read(state.mount.root, after, path, KEEP_LIMIT)
        kept = state.kept.get(path)
        if before is not None and before.kind == "symlink" and before.target is not None:
            kept = os.fsencode(before.target)  # restore puts the link back
        states[path] = FileState(
            before_kind=before.kind if before else None, before_mode=before.mode if before else None,
            before=kept, after_kind=now.kind if now else None, after=end,
            after_sha256=now.sha256 if now else None, before_uid=before.uid if before else None,
            before_gid=before.gid if before else None, before_sha256=before.sha256 if before else None,
            after_mode=now.mode if now else None, after_uid=now.uid if now else None,
            after_gid=now.gid if now else None, after_target=now.target if now else None)
    return states


def _remember(state: MountState, changed: list[str]) -> None:
    """Keeps the start state for the next start, less the directories this session changed."""
    if state.start is None:
        return
    # the next start keeps them without loading
    state.start.extra["hashed"] = state.hashed if state.hashed is not None else hashed_paths(state.snapshot)
    try:
        mount_state.remember(state.start, state.snapshot, {path.rpartition("/")[0] for path in changed})
    except (OSError, ValueError):
        mount_state.forget(state.mount.kind, state.mount.root)  # the next start walks in full


def _unauditable(session_id: str, reason: str) -> Finding:
    return finding("X00", "critical", "", f"session {session_id} could not be audited ({reason}); check the "
                   "workspace by hand (git status, .git/hooks, .git/config, .vscode, .claude), then ack this",
                   f"{session_id}:{reason}")


def finish(session_id: str, ui: SessionReporter, store: FindingStore | None = None, workspace: str = "",
           states: list[MountState] | None = None) -> list[Finding]:
    """Audit every mount against its start state (``states``, or the saved one when this launcher
    did not take it), store the findings, and say so."""
    own_store = store is None
    store = store or FindingStore()
    try:
        return _finish(session_id, ui, store, workspace, states)
    finally:
        if own_store:
            store.close()


def _finish(session_id: str, ui: SessionReporter, store: FindingStore, workspace: str,
            states: list[MountState] | None) -> list[Finding]:
    directory = _state_dir(session_id)
    try:
        states = states if states is not None else _load(session_id)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        states = []
        try:
            workspace = workspace or (directory / "workspace").read_text()
        except OSError:
            pass
        found = [_unauditable(session_id, str(exc))]
        store.record(session_id, workspace, "workspace", workspace, found, {})
    else:
        workspace = next((str(s.mount.root) for s in states if s.mount.kind == "workspace"), workspace)
        found = []
        for state in states:  # every start complete before the end walks fork
            state.join()
        while _reading_ahead:  # what it did not read by now, the audit reads: not twice at once
            stop_behind(_reading_ahead.pop())
        # The session's npm cache and cargo home are in its home: the pinned archives its trees are verified against.
        homes = [s.mount.root for s in states if s.mount.kind == "home"]
        pinned = _pinned(npm_cache.npm_caches(homes), cargo_cache.cargo_homes(homes), yarn_cache.yarn_caches(homes))
        # pip's cache is a cache mount of the Python workflow: any mount may be one.
        wheels = wheel_cache.python_caches(homes, [s.mount.root for s in states if s.mount.kind == "cache"])
        image = _image(session_id)
        venvs = venv_record.load(image) if image else None
        for state in states:
            root = str(state.mount.root)
            lineage = (store.lineage_paths(workspace, root),
                       lambda path, content, root=root: store.base_of(workspace, root, path, content))
            try:
                mount_findings, after, changed = _audit_mount(state, session_id, pinned, lineage, wheels, venvs)
                states_of = _file_states(state, after, mount_findings)
            except Exception as exc:  # any failure: an unaudited mount is a finding, never silence
                reason = exc.message if isinstance(exc, SnapshotError) else f"{type(exc).__name__}: {exc}"
                ui.warn(f"the audit of {state.mount.root} failed ({reason}); recorded as a critical finding")
                mount_findings, states_of = [_unauditable(session_id, f"{state.mount.root}: {reason}")], {}
                mount_state.forget(state.mount.kind, state.mount.root)
            else:
                with gc_paused():
                    _remember(state, changed)
            store.record(session_id, workspace, state.mount.kind, str(state.mount.root), mount_findings, states_of)
            found.extend(mount_findings)
    shutil.rmtree(directory, ignore_errors=True)
    closed = finding_causes.settle(store, workspace, but=session_id)  # what earlier sessions left, gone now
    if closed:
        ui.info(f"{closed} earlier finding(s) closed: what they found is gone (dejima-audit --all shows them)")
    _say(session_id, ui, store, workspace, found)
    return found


def _say(session_id: str, ui: SessionReporter, store: FindingStore, workspace: str, found: list[Finding]) -> None:
    """The closing message: how many changes, and the worst ones not reviewed yet, themselves. A change another
    session's audit recorded first (sessions sharing the workspace) is that session's to report: it is only
    counted here, with the session named."""
    shown = [f for f in found if rank(f.severity) >= rank("low")]
    if not shown:
        return
    fingerprints = {f.fingerprint for f in shown}
    pending = [s for s in store.findings(workspace) if s.finding.fingerprint in fingerprints]
    unreviewed = [s for s in pending if s.session == session_id]
    theirs = {s.finding.fingerprint: s.session for s in pending if s.session != session_id}
    own = [f for f in shown if f.fingerprint not in theirs]
    if own:
        worst = max(own, key=lambda f: SEVERITIES.index(f.severity)).severity
        reviewed = f"; {len(own) - len(unreviewed)} reviewed before" if len(unreviewed) < len(own) else ""
        ui.warn(f"session {session_id} left {len(own)} change(s) that can run code later (worst: {worst}{reviewed})"
                + (":" if unreviewed else ""))
        ui.findings_left(unreviewed)
        still = live_sessions_on(workspace, but=session_id)
        if still:
            ui.info(f"session(s) {', '.join(still)} still run on {workspace}: a change listed here may be theirs")
    if theirs:
        reported = f"reported by session(s) {', '.join(sorted(set(theirs.values())))} on the same workspace"
        if own:
            ui.info(f"session {session_id}: {len(theirs)} more change(s) its audit found were {reported}")
        else:  # the only sign this session left anything: said even under -q, as the warning above is
            ui.warn(f"session {session_id}: {len(theirs)} change(s) that can run code later, found by its audit, "
                    f"were {reported}")
    if unreviewed or theirs:
        ui.info("review them one file at a time: dejima-audit ack")


def recover(ui: SessionReporter) -> None:
    """Audit the sessions whose launcher died before it could (their start state is still there).
    Whether a launcher died is judged by the owner token in the session's directory, never by its
    containers: they do not exist yet while the start snapshot is taken."""
    for session_id in _take_orphans():
        directory = sessions_dir() / session_id
        if (directory / "audit").is_dir():
            ui.info(f"auditing session {session_id}, whose launcher ended before it could")
            finish(session_id, ui)
        old = directory / "audit-start.json"  # left by a dejima before the state version 2
        if old.exists():
            _unauditable_old(session_id, old, ui)


def _take_orphans() -> list[str]:
    """The sessions with a start state whose owner is gone, each now owned by this launcher (under
    the lock, so two launchers starting at once never audit the same one)."""
    root = sessions_dir()
    if not root.exists():
        return []
    taken = []
    with host.locked(root):
        for directory in sorted(p for p in root.iterdir() if p.is_dir()):
            if host.owner_alive(directory):
                continue
            if {p.name for p in directory.iterdir()} <= {host.OWNER_FILE}:
                shutil.rmtree(directory, ignore_errors=True)  # a finished session with nothing recorded
            elif (directory / "audit").is_dir() or (directory / "audit-start.json").exists():
                host.claim(directory)
                taken.append(directory.name)
    return taken


def _unauditable_old(session_id: str, old: Path, ui: SessionReporter) -> None:
    try:
        workspace = str(json.loads(old.read_text())["workspace"])
    except (OSError, ValueError, KeyError, TypeError):
        workspace = ""
    store = FindingStore()
    try:
        store.record(session_id, workspace, "workspace", workspace,
                     [_unauditable(session_id, "its start snapshot is from an older dejima")], {})
    finally:
        store.close()
    old.unlink()
    ui.warn(f"session {session_id} in {workspace} could not be audited; review it by hand: dejima-audit")
