"""Live grants against a real session: dejima-allow opens a name while the agent retries, revokes
it (cutting an open connection), lets it expire, and nothing inside the session can do the same.

The world (tests/networld.py) answers test names with its decoys' addresses; the decoy keeps an
echo port (7007) whose connections stay open, so a cut is visible.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from contextlib import AbstractContextManager
from pathlib import Path

from dejima.adapters.runtime import Runtime
from dejima.orchestration.selftest import ECHO_PORT
from tests.integration.conftest import user_workspace
from tests.networld import World
from tests.world import User, containers_of, parse_json_line, run_dejima, spawn_dejima, wait_for_line

ALLOW_MAIN = "import sys; from dejima.cli.allow import main; sys.exit(main())"


def allow(user: User, scope: str, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The real dejima-allow, as the launcher's user, from ``cwd``."""
    return subprocess.run([user.python, "-c", ALLOW_MAIN, *args], env=user.env(scope), capture_output=True,
                          text=True, timeout=60, cwd=str(cwd), stdin=subprocess.DEVNULL,
                          **user.popen_kwargs())


# Runs in the session: what an agent does when a name is refused — retry, bounded in time.
RETRY_THEN_HOLD = r"""
import socket, sys, time
name, port, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def attempt():
    try:
        return socket.create_connection((name, port), timeout=3)
    except OSError as e:
        return None
deadline = time.monotonic() + 90
conn = attempt()
print("denied" if conn is None else "open-at-start", flush=True)
while conn is None and time.monotonic() < deadline:
    time.sleep(0.05)  # an agent retries with a pause; a spinning loop would starve the host's own commands
    conn = attempt()
if conn is None:
    print("gave up", flush=True); sys.exit(1)
print("connected", flush=True)
if mode == "hold":  # keep the flow busy until it is cut, then try a new one
    conn.settimeout(3)
    try:
        while time.monotonic() < deadline:
            conn.sendall(b"ping\n")
            if not conn.recv(64):
                break
            time.sleep(0.05)
        print("still-open", flush=True)
    except OSError as e:
        print("cut:", e.strerror or e, flush=True)
    print("new:", "connected" if attempt() else "refused", flush=True)
elif mode == "expire":  # keep resolving until the name is refused again
    while time.monotonic() < deadline:
        try:
            socket.getaddrinfo(name, port)
        except socket.gaierror:
            print("expired", flush=True); break
        time.sleep(0.1)
"""


def session_with_retry(user: User, scope: str, workspace: Path, world: World, name: str, port: int,
                       mode: str) -> AbstractContextManager[subprocess.Popen[str]]:
    return spawn_dejima(user, scope, "-q", str(workspace), "--", "python3", "-c", RETRY_THEN_HOLD, name, str(port),
                        mode, DEJIMA_SETTINGS=str(world.settings))


def test_a_grant_lets_the_agents_retry_through_and_a_revoke_cuts_its_open_connection(
        user: User, scope: str, workspace: Path, world: World) -> None:
    with session_with_retry(user, scope, workspace, world, "web.dejima.test", ECHO_PORT, "hold") as proc:
        wait_for_line(proc.stdout, "denied")
        granted = allow(user, scope, workspace, "web.dejima.test", "--reason", "the test needs it")
        assert granted.returncode == 0, granted.stderr
        assert "granted web.dejima.test" in granted.stdout  # the answer: stdout
        wait_for_line(proc.stdout, "connected", timeout=30)
        listed = allow(user, scope, workspace, "--list", "--json")
        grants = [json.loads(line)["grant"] for line in listed.stdout.splitlines() if '"grant"' in line]
        assert [(g["entry"], g["reason"], g["expires"]) for g in grants] == [
            ("web.dejima.test", "the test needs it", None)]
        revoked = allow(user, scope, workspace, "web.dejima.test", "--revoke")
        assert revoked.returncode == 0, revoked.stderr
        wait_for_line(proc.stdout, "cut:", timeout=30)
        new = wait_for_line(proc.stdout, "new:", timeout=30)
        assert "refused" in new
        assert proc.wait(timeout=60) == 0
        assert proc.stderr is not None
        stderr = proc.stderr.read()
    session = stderr.split("dejima violations ")[-1].split()[0] if "dejima violations " in stderr else None
    assert session is not None, stderr
    violations = run_dejima(user, scope, "violations", session, "--json").stdout
    records = [json.loads(line) for line in violations.splitlines()]
    kinds = [r["kind"] for r in records]
    assert "grant" in kinds and "revoke" in kinds, kinds


def test_a_grant_for_a_while_expires_on_its_own(user: User, scope: str, workspace: Path, world: World) -> None:
    with session_with_retry(user, scope, workspace, world, "web.dejima.test", 8080, "expire") as proc:
        wait_for_line(proc.stdout, "denied")
        granted = allow(user, scope, workspace, "web.dejima.test", "--for", "3s")
        assert granted.returncode == 0, granted.stderr
        wait_for_line(proc.stdout, "connected", timeout=30)
        wait_for_line(proc.stdout, "expired", timeout=30)
        assert proc.wait(timeout=60) == 0


def test_a_denied_name_cannot_be_granted_and_bad_input_is_refused(user: User, scope: str, workspace: Path,
                                                                 world: World) -> None:
    with spawn_dejima(user, scope, "-q", str(workspace), "--", "sh", "-c", "echo started; exec sleep 120",
                      DEJIMA_SETTINGS=str(world.settings)) as proc:
        wait_for_line(proc.stdout, "started")
        denied = allow(user, scope, workspace, "bad.wild.dejima.test")
        assert denied.returncode == 1
        assert "a test says this host exfiltrates" in denied.stderr
        for bad in ("*", "http://x.example.com", "a..b", "10.0.0.0/8"):
            result = allow(user, scope, workspace, bad)
            assert result.returncode == 2, (bad, result.stderr)
        unknown = allow(user, scope, workspace, "web.dejima.test", "--session", "nosuchid")
        assert unknown.returncode == 2 and "no running session 'nosuchid'" in unknown.stderr
        elsewhere = allow(user, scope, Path("/"), "web.dejima.test")
        assert elsewhere.returncode == 2 and "no running session has /" in elsewhere.stderr
        listed = allow(user, scope, workspace, "--list", "--json")
        assert '"grant"' not in listed.stdout  # nothing of the refused attempts was applied
        proc.terminate()


def test_two_sessions_in_one_workspace_make_dejima_allow_ask(user: User, scope: str, workspace: Path,
                                                            world: World) -> None:
    sleeper = ("sh", "-c", "echo started; exec sleep 120")
    with spawn_dejima(user, scope, "-q", str(workspace), "--", *sleeper, DEJIMA_SETTINGS=str(world.settings)) as a, \
            spawn_dejima(user, scope, "-q", str(workspace), "--", *sleeper, DEJIMA_SETTINGS=str(world.settings)) as b:
        wait_for_line(a.stdout, "started")
        wait_for_line(b.stdout, "started")
        result = allow(user, scope, workspace, "web.dejima.test")
        assert result.returncode == 2 and "several sessions run here" in result.stderr
        assert "--session ID" in result.stderr
        a.terminate()
        b.terminate()


# Runs in the session: try to reach the control channel from inside, every way the session can see.
SELF_GRANT = r"""
import json, os, socket, sys
message = (json.dumps({"v": 1, "op": "grant", "entries": ["other.dejima.test"]}) + "\n").encode()
tried = []
def listeners(proto):
    for line in open("/proc/net/" + proto).read().splitlines()[1:]:
        local = line.split()[1]
        ip_hex, port = local.split(":")
        yield socket.inet_ntoa(bytes.fromhex(ip_hex)[::-1]), int(port, 16)
for proto, kind in (("tcp", socket.SOCK_STREAM), ("udp", socket.SOCK_DGRAM)):
    for ip, port in set(listeners(proto)):
        s = socket.socket(socket.AF_INET, kind); s.settimeout(2)
        try:
            s.connect((ip if ip != "0.0.0.0" else "127.0.0.1", port)); s.send(message); s.recv(512)
            tried.append([proto, port, "answered"])
        except OSError as e:
            tried.append([proto, port, "no"])
for line in open("/proc/net/unix").read().splitlines()[1:]:
    fields = line.split()
    if len(fields) < 8:
        continue
    path = fields[7]
    address = "\0" + path[1:] if path.startswith("@") else path
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); s.settimeout(2)
    try:
        s.connect(address); s.send(message); s.recv(512); tried.append(["unix", path, "answered"])
    except OSError:
        tried.append(["unix", path, "no"])
seen = {p: os.path.exists(p) for p in ("/run/dejima", "/run/dejima/control.sock", "/proc/1/root/run/dejima")}
try:
    socket.getaddrinfo("other.dejima.test", 80); after = "resolved"
except socket.gaierror:
    after = "refused"
print(json.dumps({"tried": tried, "seen": seen, "after": after}))
"""


def test_the_session_cannot_grant_itself_anything(user: User, scope: str, workspace: Path, world: World) -> None:
    result = run_dejima(user, scope, "-q", str(workspace), "--", "python3", "-c", SELF_GRANT,
                        DEJIMA_SETTINGS=str(world.settings))
    assert result.returncode == 0, result.stderr
    attempt = parse_json_line(result.stdout)
    assert attempt["tried"], "the session saw nothing to try, so the test proves nothing"
    assert attempt["after"] == "refused", attempt
    seen = attempt["seen"]
    assert isinstance(seen, dict), attempt
    assert not any(seen.values()), attempt


def test_a_grant_to_one_session_is_invisible_to_another(user: User, scope: str, world_dir: Path, world: World) -> None:
    first, second = (user_workspace(world_dir, user, name) for name in ("grant-first", "grant-second"))
    with session_with_retry(user, scope, first, world, "web.dejima.test", 8080, "once") as a, \
            session_with_retry(user, scope, second, world, "web.dejima.test", 8080, "once") as b:
        wait_for_line(a.stdout, "denied")
        wait_for_line(b.stdout, "denied")
        assert allow(user, scope, first, "web.dejima.test").returncode == 0
        wait_for_line(a.stdout, "connected", timeout=30)
        listed = allow(user, scope, second, "--list", "--json")
        assert '"grant"' not in listed.stdout
        check = allow(user, scope, second, "--json")
        assert "web.dejima.test" in check.stdout  # the second session was refused it, and still is
        b.terminate()


def test_dejima_allow_racing_the_sessions_end_says_so_and_the_end_leaves_no_socket(
        user: User, scope: str, workspace: Path, world: World, runtime: Runtime) -> None:
    """The session's filter goes away while its launcher has not yet cleaned up (the launcher is held
    still, right where a grant races the end): dejima-allow says the session ended, with its own exit
    status; once the launcher goes on, the session's run directory holds no socket."""
    with spawn_dejima(user, scope, "-q", str(workspace), "--", "sh", "-c", "echo started; exec sleep 120",
                      DEJIMA_SETTINGS=str(world.settings)) as proc:
        wait_for_line(proc.stdout, "started")
        sessions = user.home / ".local" / "state" / "dejima" / "sessions"
        [run] = [d / "run" for d in sessions.iterdir() if (d / "run" / "control.sock").exists()]
        os.kill(proc.pid, signal.SIGSTOP)
        try:
            for container in containers_of(runtime, scope, session=run.parent.name, role="filter"):
                runtime.remove(container)
            raced = allow(user, scope, workspace, "web.dejima.test")
        finally:
            os.kill(proc.pid, signal.SIGCONT)
        assert raced.returncode == 4, raced.stderr
        assert f"session {run.parent.name} has ended (its filter is gone): nothing was changed in it" in raced.stderr
        proc.wait(timeout=60)
    assert not run.exists() or not [p for p in run.iterdir() if p.is_socket()], list(run.iterdir())
    after = allow(user, scope, workspace, "web.dejima.test")
    assert after.returncode == 2 and "no running session has" in after.stderr
