"""Published ports (`--publish`, core/publish.py) with real containers: a server in the session reached from
the host through 127.0.0.1 only; another port of the same session, listening on every address, reached by
nothing; egress after an inbound connection as closed as before; and a prestarted filter (without the binding)
never used for a start that publishes."""

from __future__ import annotations

import json
import socket
from pathlib import Path

from dejima.adapters.runtime import Runtime
from dejima.core import labels
from dejima.orchestration import prestart, start_request
from tests.integration.test_prestart import start_session
from tests.networld import World
from tests.world import User, containers_of, run_dejima, spawn_dejima, wait_for_line

# In the session: a server on 3000 (published) and one on 3001 (not), both on every address, so only the
# filter stands between 3001 and the outside; one on 3002 on the session's loopback only. After two
# connections to 3000 it tries egress: a decoy not allowed, an allowed name (the control), and the address
# the inbound connections came from.
SERVERS = r"""
import json, socket, sys, threading
other, allowed = sys.argv[1], sys.argv[2]
served, peers = threading.Semaphore(0), []
def serve(port, address="0.0.0.0"):
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((address, port)); s.listen(8)
    def loop():
        while True:
            c, peer = s.accept(); peers.append(peer[0]); c.sendall(b"hello from %d\n" % port); c.close()
            served.release()
    threading.Thread(target=loop, daemon=True).start()
serve(3000); serve(3001); serve(3002, "127.0.0.1")
print("listening", flush=True)
for _ in range(2):
    if not served.acquire(timeout=60):
        print(json.dumps({"error": "nothing came in"}), flush=True); sys.exit(3)
def tcp(host, port):
    try:
        socket.create_connection((host, port), timeout=4).close(); return "connected"
    except socket.timeout:
        return "timeout"
    except OSError:
        return "blocked"
print(json.dumps({"peers": sorted(set(peers)), "decoy": tcp(other, 8080), "allowed": tcp(allowed, 8080),
                  "peer": tcp(peers[0], 8080)}), flush=True)
"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def fetch(address: str, port: int, timeout: float = 3.0) -> str:
    """One bounded connection: what the server said, or why there was nothing."""
    try:
        with socket.create_connection((address, port), timeout=timeout) as connection:
            return connection.recv(64).decode(errors="replace")
    except TimeoutError:
        return "timeout"
    except OSError as exc:
        return f"refused: {exc.strerror or exc}"


def test_a_published_port_is_reached_from_the_host_and_nothing_else_is(runtime: Runtime, user: User, scope: str,
                                                                       workspace: Path, world: World) -> None:
    port, loopback_only = free_port(), free_port()
    with spawn_dejima(user, scope, "-q", "--publish", f"{port}:3000", "--publish", f"{loopback_only}:3002",
                      "--allow", "web.dejima.test:8080",
                      str(workspace), "--", "python3", "-c", SERVERS, world.other, "web.dejima.test",
                      DEJIMA_SETTINGS=str(world.settings)) as proc:
        wait_for_line(proc.stdout, "listening")
        (filter_id,) = containers_of(runtime, scope, role=labels.ROLE_FILTER)
        info = runtime.inspect(filter_id) or {}
        # bound on the host's loopback only, and only the published port
        assert info["NetworkSettings"]["Ports"] == {"3000/tcp": [{"HostIp": "127.0.0.1", "HostPort": str(port)}],
                                                    "3002/tcp": [{"HostIp": "127.0.0.1",
                                                                  "HostPort": str(loopback_only)}]}
        address = runtime.address(filter_id, world.network)
        # the session's other port, straight at its address: the filter drops it (the session listens there)
        assert fetch(address, 3001) == "timeout"
        assert fetch("127.0.0.1", port) == "hello from 3000\n"
        assert fetch(address, 3000) == "hello from 3000\n"  # control: the same way in reaches the published port
        # published, but its server listens on the session's own loopback: the engine's side cannot reach it
        assert "hello" not in fetch("127.0.0.1", loopback_only)
        result = json.loads(wait_for_line(proc.stdout, "{", timeout=60))
        assert proc.wait(timeout=60) == 0, proc.stderr.read() if proc.stderr else ""
    # Egress unchanged: the decoy not allowed is refused, the allowed name answers, and the inbound
    # connections' source (the engine's side) cannot be called back.
    assert result["decoy"] == "blocked" and result["allowed"] == "connected", result
    assert result["peer"] == "blocked" and result["peers"], result


def test_a_wide_publish_is_said_on_the_card(user: User, scope: str, workspace: Path, world: World) -> None:
    """0.0.0.0 only when said, and then the card says so; the render shows the same; a bad value is refused
    before anything starts, naming the flag."""
    rendered = run_dejima(user, scope, str(workspace), "--publish", "0.0.0.0:3000:3000", "--render",
                          DEJIMA_SETTINGS=str(world.settings))
    assert rendered.returncode == 0, rendered.stderr
    assert "publishes host 0.0.0.0:3000 -> session port 3000 (WARNING: other machines too; from --publish)" \
        in rendered.stdout
    assert "tcp dport 3000 ct state new accept" in rendered.stdout
    started = run_dejima(user, scope, "-q", str(workspace), "--publish", f"0.0.0.0:{free_port()}:3000", "--", "true",
                         DEJIMA_SETTINGS=str(world.settings))
    assert started.returncode == 0, started.stderr
    assert "warning: the session's port 3000 is published on 0.0.0.0:" in started.stderr  # even with -q
    assert "other machines can reach it" in started.stderr
    refused = run_dejima(user, scope, str(workspace), "--publish", "70000", "--", "true",
                         DEJIMA_SETTINGS=str(world.settings))
    assert refused.returncode == 2 and "--publish has a session port out of range (70000)" in refused.stderr


def test_a_prestarted_filter_without_the_binding_is_never_the_publishing_sessions(
        runtime: Runtime, images: object, scope: str, workspace: Path, launcher_home: Path) -> None:
    assert start_session(runtime, workspace, None, start_request.Options()) == 0  # remembers its filter
    prestarted = prestart.begin(str(workspace))
    assert prestarted is not None and prestarted.created() is not None
    assert start_session(runtime, workspace, prestarted, start_request.Options(publish=(str(free_port()),))) == 0
    assert not prestarted.adopted  # its create request lacks the binding: removed, the plan's filter ran
    assert containers_of(runtime, scope, session=prestarted.session_id) == []
    # the publishing start's filter is remembered, and the next start does not prestart it
    assert prestart.begin(str(workspace)) is None


def test_a_taken_host_port_stops_the_start_and_says_so(runtime: Runtime, user: User, scope: str, workspace: Path,
                                                       world: World) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen(1)
        port = holder.getsockname()[1]
        result = run_dejima(user, scope, "-q", "--publish", f"{port}:3000", str(workspace), "--", "true",
                            DEJIMA_SETTINGS=str(world.settings))
    assert result.returncode == 125, result.stderr
    assert "error [host-port-taken]" in result.stderr and "--publish 8081:3000" in result.stderr, result.stderr
    assert containers_of(runtime, scope, role=labels.ROLE_FILTER) == []  # nothing left behind
