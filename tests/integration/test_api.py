"""The public API (dejima/api.py) against real containers: docs/api.md's example runs as written; a plain Python
script runs a session through the API with its output streamed to the script (while the command runs) and its
exit status returned; the same script grants and revokes a name live in its running session; findings are
listed, block a start, and are acknowledged and restored through the API; a session left without running
leaves nothing behind.

The scripts run as the launcher's user (tests/world.py), as a program embedding dejima would.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from dejima import api
from dejima.adapters.runtime import Runtime
from dejima.adapters.session_dirs import sessions_dir
from dejima.orchestration.selftest import ECHO_PORT
from tests.integration.test_audit import PLANT_HOOK, git_repo, hooks_writable
from tests.integration.test_grants import RETRY_THEN_HOLD
from tests.networld import World
from tests.world import REPO, User, containers_of

DOCS = REPO / "docs" / "api.md"


def run_script(user: User, scope: str, world_dir: Path, name: str, text: str, *args: str,
               timeout: float = 300, **env: str) -> subprocess.CompletedProcess[str]:
    """``text`` as a plain Python script, run by the launcher's user with its own homes."""
    script = world_dir / f"{name}.py"
    script.write_text(text)
    script.chmod(0o644)
    return subprocess.run([user.python, str(script), *args], env=user.env(scope, **env), capture_output=True,
                          text=True, timeout=timeout, cwd=str(world_dir), stdin=subprocess.DEVNULL,
                          **user.popen_kwargs())


def docs_example() -> str:
    (block,) = re.findall(r"^## Example\n.*?^```python\n(.*?)^```$", DOCS.read_text(), re.S | re.M)
    return str(block)


def test_the_docs_example_runs_as_written(runtime: Runtime, images: object, user: User, scope: str,
                                          world_dir: Path) -> None:
    result = run_script(user, scope, world_dir, "docs_example", docs_example())
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert lines[0].startswith("# dejima plan for /") and "(plan hash " in lines[0]
    assert lines[1:] == ["hello from the session", "refused.dejima.invalid: refused", "status: 0",
                         "refused: ['refused.dejima.invalid']"], result.stdout
    assert result.stderr == ""  # the quiet reporter printed nothing; the command wrote nothing there
    assert containers_of(runtime, scope) == []


STREAMED = r"""
import os, sys
from dejima import api

workspace = sys.argv[1]
fifo = os.path.join(workspace, "go")
os.mkfifo(fifo)
seen, errors = [], []

def on_stdout(chunk):
    seen.append(chunk)
    if b"waiting" in chunk:  # the command runs and waits for us: its output came while it runs
        with open(fifo, "w") as go:
            go.write("from the script\n")

command = ["sh", "-c", "echo waiting; read line < go; echo got: $line; echo oops >&2; exit 3"]
with api.Session(api.Request(workspace, command)) as session:
    print("session", session.session_id, session.plan.session.command == tuple(command), flush=True)
    status = session.run(stdout=on_stdout, stderr=errors.append)
print("status", status)
print("stdout", b"".join(seen).decode().split("\n"))
print("stderr", b"".join(errors).decode().split("\n"))
"""


def test_a_script_runs_a_session_through_the_api(runtime: Runtime, images: object, user: User, scope: str,
                                                 world_dir: Path, workspace: Path) -> None:
    result = run_script(user, scope, world_dir, "streamed", STREAMED, str(workspace))
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    session_id = lines[0].split()[1]
    assert lines == [f"session {session_id} True", "status 3", "stdout ['waiting', 'got: from the script', '']",
                     "stderr ['oops', '']"]
    assert containers_of(runtime, scope, session=session_id) == []
    state = user.home / ".local/state/dejima/sessions" / session_id
    assert state.is_dir() and not (state / "run").exists()  # its sockets went with its containers


GRANTING = r"""
import json, sys
from dejima import api

workspace, program, name, port = sys.argv[1:5]
session, pending = None, b""

def on_stdout(chunk):
    global pending
    pending += chunk
    while b"\n" in pending:
        line, pending = pending.split(b"\n", 1)
        print("session:", line.decode(), flush=True)
        if line == b"denied":  # the agent was refused the name: grant it, live
            print("granted", api.grant(session.session_id, [name], reason="the script needs it"), flush=True)
            grants = api.live(session.session_id)["grants"]
            print("live", json.dumps([[g["entry"], g["reason"], g["expires"]] for g in grants]), flush=True)
            print("running", [s.session_id for s in api.running_sessions(workspace)] == [session.session_id])
        elif line == b"connected":
            print("revoked", api.revoke(session.session_id, [name]), flush=True)

with api.Session(api.Request(workspace, ["python3", "-c", program, name, port, "hold"])) as session:
    status = session.run(stdout=on_stdout)
print("status", status)
print("kinds", sorted({r["kind"] for r in api.violations(session.session_id)}))
"""


def test_a_grant_through_the_api_reaches_the_running_session(runtime: Runtime, user: User, scope: str,
                                                             world_dir: Path, workspace: Path, world: World) -> None:
    """The name resolves and connects (to the world's decoy) only after the grant; the revoke cuts it."""
    result = run_script(user, scope, world_dir, "granting", GRANTING, str(workspace), RETRY_THEN_HOLD,
                        "web.dejima.test", str(ECHO_PORT), DEJIMA_SETTINGS=str(world.settings))
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert lines[0] == "session: denied"  # refused before the grant
    assert lines[1:5] == ["granted ['web.dejima.test']", 'live [["web.dejima.test", "the script needs it", null]]',
                          "running True", "session: connected"], result.stdout
    assert "revoked ['web.dejima.test']" in lines
    assert any(line.startswith("session: cut:") for line in lines), result.stdout
    assert "session: new: refused" in lines and "status 0" in lines
    assert any(line.startswith("kinds ") and "'grant'" in line and "'revoke'" in line for line in lines)


def test_findings_are_read_acknowledged_and_restored_through_the_api(
        runtime: Runtime, images: object, user: User, world_dir: Path, workspace: Path, launcher_home: Path) -> None:
    git_repo(workspace, user)
    settings = api.load_settings(hooks_writable(world_dir))
    hook = workspace / ".git" / "hooks" / "pre-commit"
    planted = api.run(api.Request(workspace, ["sh", "-c", PLANT_HOOK], settings=settings),
                      stdout=lambda _: None, stderr=lambda _: None)
    assert planted == 0 and hook.exists()
    (found,) = api.findings(workspace)
    assert (found.finding.rule, found.finding.path, found.finding.severity, found.acked) == (
        "G01", ".git/hooks/pre-commit", "critical", False)
    with pytest.raises(api.SessionError) as refused:
        api.run(api.Request(workspace, ["true"]))
    assert refused.value.reference == "unreviewed-findings"
    assert [s.id for s in api.acknowledge([found.id], "my own hook")] == [found.id]
    assert api.findings(workspace) == []
    (reviewed,) = api.findings(workspace, reviewed=True)
    assert reviewed.acked and reviewed.ack_note == "my own hook"
    # Changed again: a new finding, which restore undoes (the file as the session found it).
    assert api.run(api.Request(workspace, ["sh", "-c", "echo '# more' >> .git/hooks/pre-commit"], settings=settings),
                   stdout=lambda _: None) == 0
    (again,) = api.findings(workspace)
    said: list[str] = []
    assert api.restore([again.id], on_restored=said.append) == said and len(said) == 1
    assert "# more" not in hook.read_text() and "echo pwned" in hook.read_text()
    assert api.findings(workspace) == []
    assert api.run(api.Request(workspace, ["true"]), stdout=lambda _: None) == 0


def test_a_session_left_without_running_leaves_nothing(runtime: Runtime, images: object, scope: str,
                                                       workspace: Path, launcher_home: Path) -> None:
    reporter = api.QuietReporter()
    with api.Session(api.Request(workspace, ["true"]), reporter=reporter) as session:
        directory = sessions_dir() / session.session_id
        assert (directory / "run").is_dir() and (directory / "gate").is_dir() and (directory / "workspace").exists()
    assert not (directory / "run").exists() and not (directory / "gate").exists()
    assert not (directory / "workspace").exists()
    assert containers_of(runtime, scope, session=session.session_id) == []
    assert api.running_sessions() == []
    with pytest.raises(api.UsageError, match="runs its command once"):
        session.run()
    assert not directory.exists()  # not even its claimed id remains
    assert json.dumps(reporter.messages)  # what it reported is plain data
