"""What bench/proxy.py runs and measures with: the loopback upstream, the processes, and the clients.

A ``Way`` is how a client reaches the upstream (port, request prefix, Host, extra headers, TLS or
not); the same client code measures every way, so only the path in between differs.
"""

from __future__ import annotations

import socket
import ssl
import statistics
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

# The upstream: a bulk body, a 100-byte body and a slow SSE stream; TLS when given a cert and key.
UPSTREAM = r'''
import asyncio, ssl, sys, time
BIG = int(sys.argv[2]) * 1024 * 1024
BLOCK = b"x" * (1024 * 1024)
SMALL = b"s" * 100
async def serve(reader, writer):
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            target = head.split(b" ")[1]
            if target.endswith(b"/big"):
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % BIG)
                for _ in range(BIG // len(BLOCK)):
                    writer.write(BLOCK)
                    await writer.drain()
            elif target.endswith(b"/stream"):
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                             b"Transfer-Encoding: chunked\r\n\r\n")
                await writer.drain()
                await asyncio.sleep(0.02)
                event = b"data: %.9f\n\n" % time.time()
                writer.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(event), event))
            else:
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" + SMALL)
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    writer.close()
async def main():
    context = None
    if len(sys.argv) > 3:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(sys.argv[3], sys.argv[4])
    server = await asyncio.start_server(serve, "127.0.0.1", int(sys.argv[1]), ssl=context)
    print("ready", flush=True)
    await server.serve_forever()
asyncio.run(main())
'''


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start(argv: list[str], **kwargs: object) -> subprocess.Popen[str]:
    proc: subprocess.Popen[str] = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True,
                                                   **kwargs)  # type: ignore[call-overload]
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready", argv
    return proc


def wait_port(port: int, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"nothing listens on {port}")


def rss_mib(pid: int) -> float:
    """Resident memory of a process, from /proc (VmRSS)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise SystemExit(f"no VmRSS for {pid}")


@dataclass
class Way:
    """How a client reaches the upstream: its connect port, request prefix and extra headers; with
    ``cafile``, over TLS to ``host`` (the name it verifies, as SNI and Host)."""

    name: str
    port: int
    prefix: str
    headers: str = ""
    host: str = "127.0.0.1"
    cafile: str | None = None

    def curl(self, what: str) -> list[str]:
        command = ["curl", "-s", "-o", "/dev/null", "-w", "%{http_code} %{speed_download}"]
        command += ["-H", self.headers.strip()] if self.headers else []
        if self.cafile:
            return [*command, "--noproxy", "*", "--cacert", self.cafile, "--resolve",
                    f"{self.host}:{self.port}:127.0.0.1", f"https://{self.host}:{self.port}{self.prefix}/{what}"]
        if self.prefix.startswith("http://"):  # a forward proxy: absolute URL through -x
            return [*command, "--noproxy", "", "-x", f"http://127.0.0.1:{self.port}", f"{self.prefix}/{what}"]
        return [*command, "--noproxy", "*", f"http://127.0.0.1:{self.port}{self.prefix}/{what}"]

    def connect(self) -> socket.socket:
        sock = socket.create_connection(("127.0.0.1", self.port))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.cafile is None:
            return sock
        return ssl.create_default_context(cafile=self.cafile).wrap_socket(sock, server_hostname=self.host)


def bulk(way: Way, reps: int) -> float:
    """Median MB/s of a curl download of the upstream's bulk body."""
    speeds = []
    for _ in range(reps):
        code, speed = subprocess.run(way.curl("big"), capture_output=True, text=True, check=True).stdout.split()
        assert code == "200", (way.name, code)
        speeds.append(float(speed) / 1e6)
    return statistics.median(speeds)


def _recv(sock: socket.socket) -> bytes:
    data = sock.recv(65536)
    if not data:
        raise ConnectionError("closed")
    return data


def read_response(sock: socket.socket) -> bool:
    """Read one 100-byte response; True when the server keeps the connection open."""
    buffer = b""
    while b"\r\n\r\n" not in buffer:
        buffer += _recv(sock)
    head, _, rest = buffer.partition(b"\r\n\r\n")
    assert head.split(b" ")[1] == b"200", head[:200]
    while len(rest) < 100:
        rest += _recv(sock)
    return b"connection: close" not in head.lower() and not head.startswith(b"HTTP/1.0")


def small(way: Way, count: int) -> tuple[float, int]:
    """Sequential GETs on one keep-alive connection (a new one whenever the server closes it)."""
    request = f"GET {way.prefix}/small HTTP/1.1\r\nHost: {way.host}\r\n{way.headers}\r\n".encode()
    connections, sock = 0, None
    started = time.perf_counter()
    for _ in range(count):
        for attempt in (0, 1):
            if sock is None:
                sock = way.connect()
                connections += 1
            try:
                sock.sendall(request)
                keep = read_response(sock)
                break
            except ConnectionError:  # closed after its last answer without saying so (tinyproxy)
                sock.close()
                sock = None
                if attempt:
                    raise
        if not keep and sock is not None:
            sock.close()
            sock = None
    if sock is not None:
        sock.close()
    return count / (time.perf_counter() - started), connections


def first_event_delay(way: Way, count: int) -> float:
    """Median ms between the upstream writing its first event and this client reading it."""
    request = (f"GET {way.prefix}/stream HTTP/1.1\r\nHost: {way.host}\r\nConnection: close\r\n"
               f"{way.headers}\r\n").encode()
    delays = []
    for _ in range(count):
        with way.connect() as sock:
            sock.sendall(request)
            data = b""
            while b"data: " not in data or b"\n\n" not in data.split(b"data: ", 1)[1]:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                data += chunk
            arrived = time.time()
            sent = float(data.split(b"data: ", 1)[1].split(b"\n", 1)[0])
            delays.append((arrived - sent) * 1000)
    return statistics.median(delays)
