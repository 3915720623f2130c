"""Boundary limits, tried from inside real sessions: special allow literals, resource limits,
low ports in the shared namespace, and who the session runs as when dejima runs as root.

Each refusal has its control: the override that lets the literal through, the port above the
floor that binds, the fork and the DNS query that work once the bounded loops are over.
"""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

from dejima.adapters.runtime import Runtime
from dejima.core import labels
from tests.networld import World
from tests.world import User, containers_of, make_user, run_dejima, spawn_dejima, wait_for_line

LOW_PORTS = (1, 22, 53, 54, 80, 443, 853, 1023)
CONTROL_PORTS = (1024, 8053)


def last_json(stdout: str) -> dict[str, object]:
    line = [line for line in stdout.splitlines() if line.startswith("{")][-1]
    found: dict[str, object] = json.loads(line)
    return found


# --- allowed literals that reach special places (promise 3) ---------------------------------------


def test_allowing_the_gateways_network_needs_an_override_that_shows(runtime: Runtime, user: User, scope: str,
                                                                    workspace: Path, world: World) -> None:
    probe = world.probe({"op": "tcp", "host": world.web, "port": 8080})
    refused = run_dejima(user, scope, "--allow", world.subnet, str(workspace), "--", *probe,
                         DEJIMA_SETTINGS=str(world.settings))
    assert refused.returncode == 2, refused.stderr
    assert f"--allow: egress entry '{world.subnet}' reaches {world.gateway}, the container engine's gateway" \
        in refused.stderr
    assert f"--allow-special {world.subnet}" in refused.stderr
    assert "nftables default-deny" not in refused.stderr  # no boundary line: nothing was started
    assert containers_of(runtime, scope, role=labels.ROLE_FILTER) == []

    allowed = run_dejima(user, scope, "--allow", world.subnet, "--allow-special", world.subnet, str(workspace),
                         "--", *probe, DEJIMA_SETTINGS=str(world.settings))
    assert allowed.returncode == 0, allowed.stderr
    (result,) = json.loads([line for line in allowed.stdout.splitlines() if line.startswith("[")][-1])
    assert result["result"] == "connected"  # the control: the literal really opens the network
    assert f"OVERRIDE {world.subnet} (--allow-special): reaches {world.gateway}" in allowed.stderr


def test_metadata_and_everything_are_refused_even_in_settings(user: User, scope: str, workspace: Path,
                                                              world: World, world_dir: Path) -> None:
    settings = world_dir / "special-settings.toml"
    settings.write_text(world.settings.read_text().replace("[network]\n", '[network]\nallow = ["0.0.0.0/0"]\n'))
    settings.chmod(0o644)
    everything = run_dejima(user, scope, str(workspace), "--", "true", DEJIMA_SETTINGS=str(settings))
    assert everything.returncode == 2
    assert f"{settings} network.allow: egress entry '0.0.0.0/0' covers 4,294,967,296 addresses" in everything.stderr
    metadata = run_dejima(user, scope, "--allow", "169.254.169.254", str(workspace), "--", "true",
                          DEJIMA_SETTINGS=str(world.settings))
    assert metadata.returncode == 2 and "is in 169.254.0.0/16, link-local" in metadata.stderr


# --- resource limits (promise 6: the host stays usable, the filter stays up) ----------------------

LIMITS_PROBE = r"""
import errno, json, os, signal, socket, struct, sys
out = {}
# A bounded fork loop: at most 200 children, each parked on a pipe until the loop is over.
r, w = os.pipe()
children, error = [], None
for _ in range(200):
    try:
        pid = os.fork()
    except OSError as e:
        error = e.errno
        break
    if pid == 0:
        os.close(w); os.read(r, 1); os._exit(0)
    children.append(pid)
os.close(w)
for pid in children:
    os.waitpid(pid, 0)
out["forked"], out["fork_error"] = len(children), error
pid = os.fork()
if pid == 0:
    os._exit(7)
out["fork_after"] = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
# A bounded allocation beyond the limit, in a child: 40 x 16 MiB, every page written.
pid = os.fork()
if pid == 0:
    chunks = [b"\x01" * (16 << 20) for _ in range(40)]
    os._exit(0)
out["alloc_status"] = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
# /tmp is a sized tmpfs: at most 32 MiB written.
try:
    with open("/tmp/fill", "wb") as f:
        for _ in range(32):
            f.write(b"\0" * (1 << 20)); f.flush()
    out["tmp"] = "filled"
except OSError as e:
    out["tmp"] = errno.errorcode[e.errno]
os.unlink("/tmp/fill")
# The filter's resolver still answers.
q = b"\xab\xcd\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00" + b"\x03web\x06dejima\x04test\x00" + struct.pack("!HH", 1, 1)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(5); s.connect(("127.0.0.1", 53)); s.send(q)
data = s.recv(512)
out["dns_rcode"], out["dns_answers"] = data[3] & 0xF, struct.unpack("!H", data[6:8])[0]
print("probe-done", json.dumps(out), flush=True)
os.execvp("sleep", ["sleep", "120"])  # held while the test inspects both containers; ended by the test
"""


def test_session_limits_hold_and_the_filter_survives_them(runtime: Runtime, user: User, scope: str,
                                                          workspace: Path, world: World, world_dir: Path) -> None:
    settings = world_dir / "limits-settings.toml"
    settings.write_text(world.settings.read_text() + '\n[limits]\nsession_pids = 64\nsession_memory = "128m"\n'
                        'session_tmp_size = "16m"\n')
    settings.chmod(0o644)
    with spawn_dejima(user, scope, "--allow", "web.dejima.test", str(workspace), "--", "python3", "-c",
                      LIMITS_PROBE, DEJIMA_SETTINGS=str(settings)) as proc:
        seen = json.loads(wait_for_line(proc.stdout, "probe-done", timeout=120).split(" ", 1)[1])
        (filter_id,) = containers_of(runtime, scope, role=labels.ROLE_FILTER)
        (session_id,) = containers_of(runtime, scope, role=labels.ROLE_SESSION)
        filter_info, session_info = runtime.inspect(filter_id) or {}, runtime.inspect(session_id) or {}
        proc.terminate()
        proc.wait(timeout=60)
        stderr = proc.stderr.read() if proc.stderr else ""
    assert seen["fork_error"] == errno.EAGAIN and 16 <= seen["forked"] < 64, seen
    assert seen["fork_after"] == 7  # the children were reaped: forking works again
    assert seen["alloc_status"] == -9, seen  # the allocating child was killed (OOM); the session went on
    assert seen["tmp"] == "ENOSPC", seen
    assert (seen["dns_rcode"], seen["dns_answers"]) == (0, 1), seen  # the filter's resolver still answers
    assert filter_info["State"]["Running"] and not filter_info["State"]["OOMKilled"]
    limits = session_info["HostConfig"]
    assert (limits["PidsLimit"], limits["Memory"], limits["MemorySwap"]) == (64, 128 << 20, 128 << 20)
    assert (filter_info["HostConfig"]["PidsLimit"], filter_info["HostConfig"]["Memory"]) == (512, 256 << 20)
    assert "limits: 64 processes, 128 MiB memory (no swap), CPU weight 512, /tmp 16 MiB" in stderr


# --- low ports and root (promise 5) ---------------------------------------------------------------

BIND_PROBE = r"""
import json, socket, sys
ports = json.loads(sys.argv[1])
out = {"floor": open("/proc/sys/net/ipv4/ip_unprivileged_port_start").read().strip(), "binds": []}
for kind, name in ((socket.SOCK_STREAM, "tcp"), (socket.SOCK_DGRAM, "udp")):
    for host in ("127.0.0.1", "0.0.0.0"):
        for port in ports:
            s = socket.socket(socket.AF_INET, kind)
            try:
                s.bind((host, port)); result = "bound"
            except OSError as e:
                result = e.strerror
            s.close()
            out["binds"].append([name, host, port, result])
print(json.dumps(out))
"""


def test_the_session_cannot_bind_a_port_below_1024_in_the_shared_namespace(user: User, scope: str,
                                                                            workspace: Path, world: World) -> None:
    result = run_dejima(user, scope, "-q", str(workspace), "--", "python3", "-c", BIND_PROBE,
                        json.dumps([*LOW_PORTS, *CONTROL_PORTS]), DEJIMA_SETTINGS=str(world.settings))
    assert result.returncode == 0, result.stderr
    seen = last_json(result.stdout)
    assert seen["floor"] == "1024"
    binds = seen["binds"]
    assert isinstance(binds, list) and len(binds) == 2 * 2 * (len(LOW_PORTS) + len(CONTROL_PORTS))
    for proto, host, port, outcome in binds:
        expected = "bound" if port in CONTROL_PORTS else "Permission denied"  # the control binds
        assert outcome == expected, (proto, host, port, outcome)


def root_user(world_dir: Path) -> User:
    return make_user(world_dir, 0, 0)


def test_a_root_launcher_runs_the_session_as_the_workspace_owner(user: User, scope: str, workspace: Path,
                                                                 world: World, world_dir: Path) -> None:
    settings = str(world.settings)
    script = "id -u; touch made-in-session"
    if os.getuid() != 0:  # a launcher that is not root cannot ask for root
        refused = run_dejima(user, scope, "--as-root", str(workspace), "--", "true", DEJIMA_SETTINGS=settings)
        assert refused.returncode == 2 and "--as-root needs dejima itself to run as root" in refused.stderr
        return
    owner = workspace.stat()
    assert owner.st_uid != 0  # the fixture gives the workspace to the test user
    launcher = root_user(world_dir)
    default = run_dejima(launcher, scope, str(workspace), "--", "sh", "-c", script, DEJIMA_SETTINGS=settings)
    assert default.returncode == 0, default.stderr
    assert default.stdout.split() == [str(owner.st_uid)]
    assert (workspace / "made-in-session").stat().st_uid == owner.st_uid
    assert f"user {owner.st_uid}:{owner.st_gid}, no capabilities" in default.stderr  # the boundary line

    as_root = run_dejima(launcher, scope, "-q", "--as-root", str(workspace), "--", "id", "-u",
                         DEJIMA_SETTINGS=settings)
    assert as_root.returncode == 0, as_root.stderr
    assert as_root.stdout.split() == ["0"]  # the control: the option really gives uid 0

    root_owned = world_dir / "ws-root-owned"
    root_owned.mkdir(exist_ok=True)
    refused = run_dejima(launcher, scope, str(root_owned), "--", "id", "-u", DEJIMA_SETTINGS=settings)
    assert refused.returncode == 2, refused.stderr
    assert f"{root_owned} belongs to root and dejima runs as root" in refused.stderr and "--as-root" in refused.stderr
