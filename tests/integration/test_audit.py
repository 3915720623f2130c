"""The exit audit around real sessions: findings recorded, start refused until reviewed, crash
recovery by the next run, acknowledgements tied to content."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from dejima.adapters.runtime import Runtime
from dejima.errors import ExitStatus
from tests.world import User, run_dejima, spawn_dejima, wait_for_line

PLANT_HOOK = "printf '#!/bin/sh\\necho pwned\\n' > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit"


def git_repo(workspace: Path, user: User) -> None:
    subprocess.run(["git", "init", "-q", str(workspace)], check=True)
    if os.getuid() == 0:
        subprocess.run(["chown", "-R", f"{user.uid}:{user.gid}", str(workspace)], check=True)


def hooks_writable(world_dir: Path) -> str:
    """A settings file that lets sessions write .git/hooks, so the audit has something to find."""
    path = world_dir / "hooks-writable.toml"
    path.write_text("[session]\nprotect_git_hooks = false\n")
    path.chmod(0o644)
    return str(path)


def dejima_audit(user: User, scope: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([user.python, "-c", "from dejima.cli.audit import main; raise SystemExit(main())", *args],
                          env=user.env(scope), capture_output=True, text=True, timeout=60,
                          **user.popen_kwargs())


def test_git_hooks_are_read_only_in_the_session_by_default(
        runtime: Runtime, images: object, user: User, scope: str, workspace: Path) -> None:
    git_repo(workspace, user)
    result = run_dejima(user, scope, "-q", str(workspace), "--", "sh", "-c", PLANT_HOOK)
    assert result.returncode != 0 and "Read-only file system" in result.stderr
    assert not (workspace / ".git" / "hooks" / "pre-commit").exists()
    assert run_dejima(user, scope, "-q", str(workspace), "--", "true").returncode == 0  # nothing to review


def test_a_planted_hook_is_found_and_blocks_the_next_start_until_acked(
        runtime: Runtime, images: object, user: User, scope: str, workspace: Path, world_dir: Path) -> None:
    git_repo(workspace, user)
    settings = hooks_writable(world_dir)
    first = run_dejima(user, scope, str(workspace), "--", "sh", "-c", PLANT_HOOK, DEJIMA_SETTINGS=settings)
    assert first.returncode == 0, first.stderr
    assert "change(s) that can run code later (worst: critical)" in first.stderr
    refused = run_dejima(user, scope, "-q", str(workspace), "--", "true")
    assert refused.returncode == ExitStatus.UNREVIEWED_FINDINGS and "unreviewed-findings" in refused.stderr
    listed = [json.loads(line) for line in
              dejima_audit(user, scope, "list", "--json", "--workspace", str(workspace)).stdout.splitlines()]
    assert [(f["rule"], f["path"]) for f in listed] == [("G01", ".git/hooks/pre-commit")]
    acked = dejima_audit(user, scope, "ack", str(listed[0]["id"]), "--note", "test")
    assert acked.returncode == 0, acked.stderr
    assert run_dejima(user, scope, "-q", str(workspace), "--", "true").returncode == 0
    # The same hook, changed again: a new finding, and the workspace is refused again.
    run_dejima(user, scope, "-q", str(workspace), "--", "sh", "-c", "echo '# more' >> .git/hooks/pre-commit",
               DEJIMA_SETTINGS=settings)
    assert run_dejima(user, scope, "-q", str(workspace), "--", "true").returncode == ExitStatus.UNREVIEWED_FINDINGS


def test_a_reviewed_autorun_task_given_a_new_command_blocks_the_start_until_put_back(
        runtime: Runtime, images: object, user: User, scope: str, workspace: Path) -> None:
    """Issue 32: an acknowledged task that runs on folder open, pointed at a new command by a later
    session, is critical again (it was medium: a command changed); put back by hand, it closes."""
    git_repo(workspace, user)
    task = ('{"version": "2.0.0", "tasks": [{"label": "lint", "type": "shell", "command": "make lint", '
            '"runOptions": {"runOn": "folderOpen"}}]}')
    plant = f"mkdir -p .vscode && printf '%s' '{task}' > .vscode/tasks.json"
    assert run_dejima(user, scope, "-q", str(workspace), "--", "sh", "-c", plant).returncode == 0
    reviewed = (workspace / ".vscode" / "tasks.json").read_bytes()
    assert dejima_audit(user, scope, "ack", "--all", "--workspace", str(workspace), "--note", "my lint task"
                        ).returncode == 0
    repoint = "sed -i 's/make lint/make lint; id/' .vscode/tasks.json"
    assert run_dejima(user, scope, "-q", str(workspace), "--", "sh", "-c", repoint).returncode == 0
    refused = run_dejima(user, scope, "-q", str(workspace), "--", "true")
    assert refused.returncode == ExitStatus.UNREVIEWED_FINDINGS, refused.stderr
    (workspace / ".vscode" / "tasks.json").write_bytes(reviewed)  # the user undoes it on the host
    assert run_dejima(user, scope, "-q", str(workspace), "--", "true").returncode == 0
    listed = [json.loads(line) for line in
              dejima_audit(user, scope, "list", "--all", "--json", "--workspace", str(workspace)).stdout.splitlines()]
    [closed] = [f for f in listed if f["closed"]]
    assert (closed["severity"], closed["closed_note"]) == (
        "critical", f"closed: restored to its content before session {closed['session']}")


def test_a_session_whose_launcher_was_killed_is_audited_by_the_next_run(
        runtime: Runtime, images: object, user: User, scope: str, workspace: Path, world_dir: Path) -> None:
    git_repo(workspace, user)
    script = f"{PLANT_HOOK}; echo started; exec sleep 300"
    with spawn_dejima(user, scope, "-q", str(workspace), "--", "sh", "-c", script,
                      DEJIMA_SETTINGS=hooks_writable(world_dir)) as proc:
        wait_for_line(proc.stdout, "started")
        proc.kill()
        proc.wait(timeout=30)
    result = run_dejima(user, scope, str(workspace), "--", "true")
    assert "whose launcher ended before it could" in result.stderr
    assert result.returncode == ExitStatus.UNREVIEWED_FINDINGS and "unreviewed-findings" in result.stderr


def test_the_session_home_is_audited_too_and_python_writes_no_bytecode(
        runtime: Runtime, images: object, user: User, scope: str, workspace: Path) -> None:
    (workspace / "mod.py").write_text("X = 1\n")
    if os.getuid() == 0:
        subprocess.run(["chown", "-R", f"{user.uid}:{user.gid}", str(workspace)], check=True)
    script = "python3 -c 'import mod' && mkdir -p ~/.claude && echo '{\"hooks\": {}}' > ~/.claude/settings.json"
    result = run_dejima(user, scope, "-q", str(workspace), "--", "sh", "-c", script)
    assert result.returncode == 0, result.stderr
    assert not (workspace / "__pycache__").exists()
    listed = [json.loads(line) for line in
              dejima_audit(user, scope, "list", "--json", "--workspace", str(workspace)).stdout.splitlines()]
    assert [(f["rule"], f["mount"], f["path"]) for f in listed] == [("M02", "home", ".claude/settings.json")]
