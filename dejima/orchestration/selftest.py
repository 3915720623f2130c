"""The boundary self-test shared by `dejima doctor` and the test suite.

A *decoy* container (started by the caller, on the filter's network) listens on TCP and UDP and
answers anything. A *probe* runs inside a session and tries to reach it. A control probe from an
unfiltered container proves the decoy answers, so a blocked probe from the session shows the
boundary held, not that the decoy was down. Nothing here sends a packet beyond the decoy.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass

from dejima.adapters.runtime import Runtime
from dejima.core import labels
from dejima.core.plan import ContainerSpec

DECOY_TCP_PORT = 8080
DECOY_UDP_PORT = 53
ECHO_PORT = 7007

# Runs in the decoy container: accept TCP connections (answer HTTP 200) and echo UDP datagrams,
# on the ports a probe uses and on the ones an escape would try (DNS 53, DNS-over-TLS 853, ...);
# and a TCP echo that keeps its connections open (port 7007), to show long-lived flows being cut.
DECOY_SERVER = f"""
import socket, threading
def serve_tcp(s):
    while True:
        c, _ = s.accept()
        try: c.sendall(b"HTTP/1.0 200 OK\\r\\nContent-Length: 5\\r\\n\\r\\ndecoy")
        finally: c.close()
def echo(c):
    try:
        while (data := c.recv(4096)):
            c.sendall(data)
    except OSError:
        pass
    finally:
        c.close()
def serve_echo(s):
    while True:
        c, _ = s.accept()
        threading.Thread(target=echo, args=(c,), daemon=True).start()
def serve_udp(u):
    while True:
        data, peer = u.recvfrom(4096); u.sendto(data, peer)
# Bind everything before saying "listening", so that a probe never races the decoy.
for port in ({DECOY_TCP_PORT}, 8443, 53, 853):
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", port)); s.listen(64)
    threading.Thread(target=serve_tcp, args=(s,), daemon=True).start()
e = socket.socket(); e.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
e.bind(("0.0.0.0", {ECHO_PORT})); e.listen(64)
threading.Thread(target=serve_echo, args=(e,), daemon=True).start()
for port in ({DECOY_UDP_PORT}, 5353):
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind(("0.0.0.0", port))
    threading.Thread(target=serve_udp, args=(u,), daemon=True).start()
print("decoy: listening", flush=True)
threading.Event().wait()
"""

# Runs in a session (or a control container): one TCP connect and one DNS-shaped UDP query.
PROBE = """
import json, socket, sys, time
host, tcp_port, udp_port, timeout = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
def tcp():
    t = time.monotonic()
    try:
        s = socket.create_connection((host, tcp_port), timeout=timeout)
        data = s.recv(64); s.close()
        return {"result": "connected", "data": data.decode(errors="replace"), "seconds": time.monotonic() - t}
    except socket.timeout:
        return {"result": "timeout", "seconds": time.monotonic() - t}
    except OSError as e:
        return {"result": "blocked", "error": e.strerror or str(e), "seconds": time.monotonic() - t}
def udp():
    # A DNS query for dejima.test. A (id 0x1234), so a real resolver would answer it too.
    query = bytes.fromhex("12340100000100000000000006646a696d610474657374000001 0001".replace(" ", ""))
    t = time.monotonic()
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.settimeout(timeout)
    try:
        u.sendto(query, (host, udp_port)); u.recvfrom(4096)
        return {"result": "answered", "seconds": time.monotonic() - t}
    except socket.timeout:
        return {"result": "timeout", "seconds": time.monotonic() - t}
    except OSError as e:
        return {"result": "blocked", "error": e.strerror or str(e), "seconds": time.monotonic() - t}
def loopback():
    srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(1)
    try:
        c = socket.create_connection(srv.getsockname(), timeout=timeout); c.close()
        return {"result": "connected"}
    except OSError as e:
        return {"result": "blocked", "error": e.strerror or str(e)}
print(json.dumps({"tcp": tcp(), "udp": udp(), "loopback": loopback()}))
"""


def probe_command(host: str, timeout: float = 3.0) -> tuple[str, ...]:
    return ("python3", "-c", PROBE, host, str(DECOY_TCP_PORT), str(DECOY_UDP_PORT), str(timeout))


def decoy_command() -> tuple[str, ...]:
    return ("python3", "-u", "-c", DECOY_SERVER)


@dataclass(frozen=True, slots=True)
class ProbeResult:
    tcp: dict[str, object]
    udp: dict[str, object]
    loopback: dict[str, object]

    @classmethod
    def parse(cls, output: str) -> ProbeResult:
        last = [line for line in output.splitlines() if line.startswith("{")][-1]
        data = json.loads(last)
        return cls(tcp=data["tcp"], udp=data["udp"], loopback=data["loopback"])

    @property
    def egress_blocked(self) -> bool:
        return self.tcp["result"] == "blocked" and self.udp["result"] in ("blocked", "timeout")


@dataclass(frozen=True, slots=True)
class Decoy:
    container: str
    address: str


def _helper_spec(scope: str, image: str, network: str, command: tuple[str, ...], role: str,
                 launcher: str) -> ContainerSpec:
    return ContainerSpec(
        name=f"dejima-{role}-{secrets.token_hex(3)}", image=image, command=command, user="0:0",
        labels={labels.SCOPE: scope, labels.SESSION: role, labels.ROLE: role, labels.LAUNCHER: launcher},
        network_mode=network,
    )


def start_decoy(runtime: Runtime, scope: str, image: str, network: str, launcher: str, created: list[str]) -> Decoy:
    """Start a decoy on ``network`` and return once it listens. Its id is appended to ``created``."""
    container = runtime.create(_helper_spec(scope, image, network, decoy_command(), "selftest-decoy", launcher))
    created.append(container)
    runtime.start(container)
    first = runtime.first_log_line(container)
    if "listening" not in first:
        raise RuntimeError(f"the decoy did not start: {first!r}")
    return Decoy(container, runtime.address(container, network))


def control_probe(runtime: Runtime, scope: str, image: str, network: str, launcher: str, address: str) -> ProbeResult:
    """The same probe from a container with no filter in front of it: proves the decoy answers."""
    container = runtime.create(_helper_spec(scope, image, network, probe_command(address), "selftest-control",
                                            launcher))
    try:
        runtime.start(container)
        runtime.wait(container, timeout=60)
        return ProbeResult.parse(runtime.logs(container))
    finally:
        runtime.remove(container)
