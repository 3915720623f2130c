#!/usr/bin/env python3
"""Credential proxy throughput, request rate and streaming delay, as ratios against same-run baselines.

    .venv/bin/python bench/proxy.py [--bulk-mib 256] [--requests 2000] [--streams 40]

One upstream (a small asyncio HTTP server in its own process, on loopback) serves a bulk body, a
100-byte body and a slow SSE stream. Three paths reach it: direct, through dejima's proxy (its own
process, plain-HTTP route, header swap) and, when installed, through tinyproxy (a C forward proxy,
loopback only). Bulk: curl downloads; small requests: one keep-alive connection, sequential GETs from
this process (the same client for every path); streaming: the delay between the upstream's first
event and its arrival at the client, proxy minus direct. Goals (docs: mission): bulk and requests/s
at least tinyproxy's; first event within 5 ms of direct.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

UPSTREAM = r'''
import asyncio, sys, time
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
    server = await asyncio.start_server(serve, "127.0.0.1", int(sys.argv[1]))
    print("ready", flush=True)
    await server.serve_forever()
asyncio.run(main())
'''

PROXY = r'''
import asyncio, sys
from pathlib import Path
from dejima.core.credentials import Route, Secret, parse_upstream
from dejima.proxy.server import ProxyConfig, ProxyServer, RouteSpec
from dejima.proxy.sources import FixedSource
upstream = parse_upstream(f"http://127.0.0.1:{sys.argv[1]}", "bench")
route = Route("bench", upstream, "x-api-key", "raw", "sk-ant-api03-benchplaceholder")
async def main():
    tmp = Path(sys.argv[3])
    server = ProxyServer(ProxyConfig((RouteSpec(route, FixedSource("bench", Secret("real-bench-key"))),),
                                     tmp / "ledger.jsonl", tmp / "violations.jsonl"))
    await server.start(None, "127.0.0.1", int(sys.argv[2]))
    print("ready", flush=True)
    await asyncio.Event().wait()
asyncio.run(main())
'''

TINYPROXY_CONF = """Port {port}
Listen 127.0.0.1
Timeout 600
LogFile "{dir}/tinyproxy.log"
LogLevel Error
PidFile "{dir}/tinyproxy.pid"
MaxClients 200
Allow 127.0.0.1
DisableViaHeader Yes
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start(argv: list[str], **kwargs: object) -> subprocess.Popen[str]:
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, **kwargs)  # type: ignore[call-overload]
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready", argv
    return proc


def wait_port(port: int, seconds: float = 10) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"nothing listens on {port}")


class Path_:
    """How a client reaches the upstream: its connect port, request target and extra headers."""

    def __init__(self, name: str, port: int, prefix: str, headers: str = "") -> None:
        self.name, self.port, self.prefix, self.headers = name, port, prefix, headers

    def curl(self, what: str) -> list[str]:
        command = ["curl", "-s", "-o", "/dev/null", "-w", "%{http_code} %{speed_download}"]
        command += ["-H", self.headers.strip()] if self.headers else []
        if self.prefix.startswith("http://"):  # a forward proxy: absolute URL through -x
            return [*command, "--noproxy", "", "-x", f"http://127.0.0.1:{self.port}", f"{self.prefix}/{what}"]
        return [*command, "--noproxy", "*", f"http://127.0.0.1:{self.port}{self.prefix}/{what}"]


def bulk(path: Path_, reps: int) -> float:
    speeds = []
    for _ in range(reps):
        code, speed = subprocess.run(path.curl("big"), capture_output=True, text=True, check=True).stdout.split()
        assert code == "200", code
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
    assert head.split(b" ")[1] == b"200", head[:40]
    while len(rest) < 100:
        rest += _recv(sock)
    return b"connection: close" not in head.lower() and not head.startswith(b"HTTP/1.0")


def small(path: Path_, count: int) -> tuple[float, int]:
    """Sequential GETs on one keep-alive connection (a new one whenever the server closes it)."""
    request = (f"GET {path.prefix}/small HTTP/1.1\r\nHost: 127.0.0.1\r\n{path.headers}\r\n").encode()
    connections, sock = 0, None
    started = time.perf_counter()
    for _ in range(count):
        for attempt in (0, 1):
            if sock is None:
                sock = socket.create_connection(("127.0.0.1", path.port))
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
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


def first_event_delay(path: Path_, count: int) -> float:
    """Median ms between the upstream writing its first event and this client reading it."""
    request = (f"GET {path.prefix}/stream HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
               f"{path.headers}\r\n").encode()
    delays = []
    for _ in range(count):
        with socket.create_connection(("127.0.0.1", path.port)) as sock:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bulk-mib", type=int, default=256)
    parser.add_argument("--bulk-reps", type=int, default=3)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--streams", type=int, default=40)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="dejima-bench-proxy-"))
    up_port, proxy_port, tiny_port = free_port(), free_port(), free_port()
    procs = [start([sys.executable, "-c", UPSTREAM, str(up_port), str(args.bulk_mib)])]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])}
    procs.append(start([sys.executable, "-c", PROXY, str(up_port), str(proxy_port), str(work)], env=env))
    paths = [Path_("direct", up_port, ""),
             Path_("dejima", proxy_port, "/r/bench", "x-api-key: sk-ant-api03-benchplaceholder\r\n")]
    if shutil.which("tinyproxy"):
        (work / "tinyproxy.conf").write_text(TINYPROXY_CONF.format(port=tiny_port, dir=work))
        procs.append(subprocess.Popen(["tinyproxy", "-d", "-c", str(work / "tinyproxy.conf")],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        wait_port(tiny_port)
        paths.append(Path_("tinyproxy", tiny_port, f"http://127.0.0.1:{up_port}"))
    else:
        print("tinyproxy not installed: its row is left out (apt-get install tinyproxy)")
    try:
        results = {}
        for path in paths:
            rps, connections = small(path, args.requests)
            results[path.name] = (bulk(path, args.bulk_reps), rps, first_event_delay(path, args.streams))
            mbs, rps, delay = results[path.name]
            print(f"{path.name:10s} bulk {mbs:8.0f} MB/s   small {rps:7.0f} req/s ({connections} connections)   "
                  f"first event {delay:6.2f} ms after the upstream sent it", flush=True)
        base = results["direct"]
        for name in ("dejima", "tinyproxy"):
            if name in results and name != "direct":
                mbs, rps, delay = results[name]
                print(f"{name:10s} vs direct: bulk {mbs / base[0]:.2f}x, requests {rps / base[1]:.2f}x, "
                      f"first-event delay +{delay - base[2]:.2f} ms")
        if "tinyproxy" in results:
            d, t = results["dejima"], results["tinyproxy"]
            print(f"dejima vs tinyproxy: bulk {d[0] / t[0]:.2f}x (goal >= 1), requests {d[1] / t[1]:.2f}x (goal >= 1)")
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(10)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
