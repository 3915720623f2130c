"""A session's credential route serves that session only: not another session (even holding this one's
placeholder), not a process of another host user. Both sessions hold the same real key on the host, as one
person running two agents does; each gets its own placeholder and its own proxy."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest

from tests.integration.conftest import user_workspace
from tests.integration.test_credentials import REAL_KEY, FakeModel, model, settings  # noqa: F401
from tests.world import User, run_dejima, spawn_dejima, wait_for_line

TRY_FOREIGN = r"""
import json, os, sys, urllib.request, urllib.error
foreign, base = sys.argv[1], os.environ["ANTHROPIC_BASE_URL"]
body = b'{"model":"m","max_tokens":1,"messages":[]}'
request = urllib.request.Request(base + "/v1/messages", method="POST", data=body,
                                 headers={"x-api-key": foreign, "anthropic-version": "2023-06-01",
                                          "content-type": "application/json"})
try:
    status = urllib.request.urlopen(request, timeout=20).status
except urllib.error.HTTPError as e:
    status = e.code
print(json.dumps({"status": status, "own": os.environ["ANTHROPIC_API_KEY"] == foreign,
                  "run_dir": os.path.exists("/run/dejima")}))
"""


def proxy_sockets(user: User) -> set[Path]:
    return set((user.home / ".local/state/dejima/sessions").glob("*/*/proxy.sock"))


def connect_as(uid: int, path: Path) -> str:
    """Connect to a unix socket from a child process running as another uid; what happened."""
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: drop to uid, try, report, exit without running pytest's teardown
        os.close(reader)
        try:
            os.setgid(65534)
            os.setuid(uid)
            with socket.socket(socket.AF_UNIX) as s:
                s.connect(str(path))
            outcome = "connected"
        except OSError as exc:
            outcome = type(exc).__name__
        os.write(writer, outcome.encode())
        os._exit(0)
    os.close(writer)
    with os.fdopen(reader) as pipe:
        outcome = pipe.read()
    os.waitpid(pid, 0)
    return outcome


@pytest.mark.timeout(1800)
def test_a_route_serves_its_own_session_only(user: User, scope: str, workspace: Path, world_dir: Path,
                                             model: FakeModel, settings: str) -> None:  # noqa: F811
    other = user_workspace(world_dir, user, "isolation-other")
    before = proxy_sockets(user)
    model.seen.clear()
    with spawn_dejima(user, scope, "-q", "--harness", "claude-code", str(workspace), "--", "sh", "-c",
                      'echo "KEY=$ANTHROPIC_API_KEY"; exec sleep 300', DEJIMA_SETTINGS=settings,
                      ANTHROPIC_API_KEY=REAL_KEY) as first:
        placeholder = wait_for_line(first.stdout, "KEY=", timeout=300).strip().removeprefix("KEY=")
        assert placeholder.startswith("sk-ant-") and placeholder != REAL_KEY
        [first_socket] = proxy_sockets(user) - before
        # The second session, same host key, its own proxy: the first one's placeholder gets nothing.
        second = run_dejima(user, scope, "-q", "--harness", "claude-code", str(other), "--", "python3", "-c",
                            TRY_FOREIGN, placeholder, DEJIMA_SETTINGS=settings, ANTHROPIC_API_KEY=REAL_KEY)
        # Another host user cannot even connect to the first session's proxy (the launcher's own
        # user can: it holds the key anyway).
        stranger = connect_as(65534, first_socket) if os.getuid() == 0 else "not root: skipped"
        first.terminate()
        first.wait(timeout=60)
    assert second.returncode == 0, second.stderr[-3000:]
    tried = json.loads(second.stdout.strip().splitlines()[-1])
    assert tried == {"status": 403, "own": False, "run_dir": False}, tried
    assert model.seen == [], "a request with another session's placeholder reached the model"
    session = second.stderr.split("dejima violations ")[-1].split()[0]
    listed = run_dejima(user, scope, "violations", session, "--json").stdout
    records = [json.loads(line) for line in listed.splitlines()]
    assert any(r["kind"] == "foreign-credential" for r in records), records
    if os.getuid() == 0:
        assert stranger == "PermissionError", stranger
