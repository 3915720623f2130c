"""Launchers started at once (other workspaces, other terminals, the same workspace) each own
their session's state: none audits another's half-made start state, none dies of it, and no
critical "could not be audited" finding blocks the next start."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

from dejima.adapters.runtime import Runtime
from dejima.core import labels
from tests.integration.test_audit import dejima_audit
from tests.world import REPO, User, containers_of, run_dejima, spawn_dejima, wait_for_line

DEADLINE = 900  # seconds for a whole batch: ten sessions at once on two shared cores are slow
FILES = 3000  # per workspace: a start snapshot that takes a moment, as a real repository's does


def make_workspace(path: Path, user: User) -> Path:
    for index in range(FILES):
        folder = path / f"d{index % 30}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"f{index}.txt").write_text(f"{index}\n")
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    if os.getuid() == 0:
        subprocess.run(["chown", "-R", f"{user.uid}:{user.gid}", str(path)], check=True)
    return path


def launch_at_once(user: User, scope: str, workspaces: list[Path]) -> list[tuple[int, str]]:
    """Start one `dejima WS -- true` per workspace without waiting; return (status, stderr) each."""
    processes = [subprocess.Popen(
        user.command(str(ws), "--", "true"), env=user.env(scope), stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, cwd=str(REPO),
        **user.popen_kwargs(),
    ) for ws in workspaces]
    deadline = time.monotonic() + DEADLINE
    results = []
    try:
        for process in processes:
            _, stderr = process.communicate(timeout=max(1.0, deadline - time.monotonic()))
            results.append((process.returncode, stderr))
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait(timeout=60)
    return results


def findings(user: User, scope: str, workspace: Path) -> list[dict[str, object]]:
    listed = dejima_audit(user, scope, "list", "--all", "--json", "--workspace", str(workspace))
    assert listed.returncode == 0, listed.stderr
    text = listed.stdout.strip()
    if text.startswith("["):  # an array or JSON lines: either way, every finding
        found: list[dict[str, object]] = json.loads(text)
        return found
    return [json.loads(line) for line in text.splitlines()]


def assert_all_clean(results: list[tuple[int, str]], user: User, scope: str, workspaces: list[Path]) -> None:
    for status, stderr in results:
        assert status == 0, stderr
        for symptom in ("could not be audited", "Traceback", "bug in dejima", "FileNotFoundError"):
            assert symptom not in stderr, stderr
    for workspace in set(workspaces):
        assert findings(user, scope, workspace) == [], workspace


def test_ten_sessions_on_ten_workspaces_at_once(runtime: Runtime, images: object, user: User, scope: str,
                                                world_dir: Path) -> None:
    workspaces = [make_workspace(world_dir / "concurrent" / f"ws{index}", user) for index in range(10)]
    results = launch_at_once(user, scope, workspaces)
    assert_all_clean(results, user, scope, workspaces)
    assert containers_of(runtime, scope, role=labels.ROLE_SESSION) == []


def test_two_sessions_on_one_workspace_at_once(runtime: Runtime, images: object, user: User, scope: str,
                                               world_dir: Path) -> None:
    workspace = make_workspace(world_dir / "concurrent" / "shared", user)
    results = launch_at_once(user, scope, [workspace, workspace])
    assert_all_clean(results, user, scope, [workspace])
    again = launch_at_once(user, scope, [workspace])  # nothing blocks the next start
    assert again[0][0] == 0, again[0][1]


def test_launchers_starting_at_once_clean_a_crashed_session_once(
        runtime: Runtime, images: object, user: User, scope: str, world_dir: Path) -> None:
    crashed = make_workspace(world_dir / "concurrent" / "crashed", user)
    others = [make_workspace(world_dir / "concurrent" / f"after{index}", user) for index in range(3)]
    script = "getent hosts refused-name.invalid; echo started; exec sleep 300"
    with spawn_dejima(user, scope, "-q", str(crashed), "--", "sh", "-c", script) as process:
        wait_for_line(process.stdout, "started")
        (session,) = {c.labels[labels.SESSION] for c in runtime.containers({labels.SCOPE: scope})}
        process.kill()  # the launcher dies: its pair, its records and its start state are left
        process.wait(timeout=30)
    results = launch_at_once(user, scope, others)
    assert_all_clean(results, user, scope, [crashed, *others])
    assert sum("removed leftover session" in stderr for _, stderr in results) == 1
    assert sum(f"auditing session {session}" in stderr for _, stderr in results) == 1
    listed = run_dejima(user, scope, "violations", session, "--json")
    assert "refused-name.invalid" in [json.loads(line).get("domain") for line in listed.stdout.splitlines()]
    assert containers_of(runtime, scope) == []
