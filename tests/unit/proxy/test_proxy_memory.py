"""The proxy in a process of its own, as in a launcher, its memory read from the kernel under a hostile
session's load: three parallel 240 MiB pushes (the packs stream on, each read on its way to prove a
fast-forward), and every connection of the budget sending bodies to an upstream that reads nothing.
The process's peak stays within its budget and a bounded allowance per connection, whatever the
size of what the session sends."""

from __future__ import annotations

import base64
import hashlib
import os
import socket
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from dejima.core.pushrules import FLUSH, pkt
from tests.httpfake import serving

ROOT = Path(__file__).resolve().parents[3]
MiB = 1024 * 1024
PUSHES, BLOBS = 3, 240  # three pushes of 240 one-MiB blobs each
BUDGET = 16 * MiB
CONNECTIONS = 64
PER_CONNECTION = 1 * MiB  # what one connection may take (docs/credentials.md): reads and transport buffers
SLACK = 16 * MiB  # the allocator's and the interpreter's own growth under load
OLD = hashlib.sha1(b"the forge's feature branch").hexdigest()
MAIN = hashlib.sha1(b"the forge's default branch").hexdigest()
EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"


@dataclass
class Sink:
    """A forge that takes pushes and keeps nothing: it counts what reached it."""

    url: str = ""
    received: list[int] = field(default_factory=list)


def _sink_handler(sink: Sink) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def _answer(self, content_type: str, body: bytes) -> None:
            self.send_response(200)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:  # noqa: N802 - the push guard asks which branch is the default
            # A v0 advertisement (the sink ignores Git-Protocol), its default branch elsewhere than feature.
            self._answer("application/x-git-upload-pack-advertisement", pkt(b"# service=git-upload-pack\n") + FLUSH
                         + pkt(f"{MAIN} HEAD\0symref=HEAD:refs/heads/main\n".encode()) + FLUSH)

        def _drop(self, size: int) -> int:
            left = size
            while left:
                left -= len(self.rfile.read(min(left, MiB)))
            return size

        def do_POST(self) -> None:  # noqa: N802
            received = 0
            if "Content-Length" in self.headers:
                received = self._drop(int(self.headers["Content-Length"]))
            else:
                while size := int(self.rfile.readline().split(b";")[0], 16):
                    received += self._drop(size)
                    self.rfile.readline()
                self.rfile.readline()
            sink.received.append(received)
            self._answer("application/x-git-receive-pack-result",
                         pkt(b"unpack ok\n") + pkt(b"ok refs/heads/feature\n") + FLUSH)

    return Handler


@pytest.fixture
def sink() -> Iterator[Sink]:
    found = Sink()
    with serving(ThreadingHTTPServer(("127.0.0.1", 0), _sink_handler(found))) as server:
        found.url = f"http://127.0.0.1:{server.server_port}"
        yield found


def _object(kind: int, content: bytes, level: int = 1) -> bytes:
    size = len(content)
    header = bytearray([(kind << 4) | (size & 0x0F)])
    size >>= 4
    while size:
        header[-1] |= 0x80
        header.append(size & 0x7F)
        size >>= 7
    return bytes(header) + zlib.compress(content, level)


def push_pieces(blobs: int) -> Iterator[bytes]:
    """A push updating refs/heads/feature from OLD to a commit on top of it, with ``blobs`` MiB of blobs."""
    commit = f"tree {EMPTY_TREE}\nparent {OLD}\nauthor a <a@a> 0 +0000\ncommitter a <a@a> 0 +0000\n\nbig\n".encode()
    new = hashlib.sha1(b"commit %d\0" % len(commit) + commit).hexdigest()
    yield pkt(f"{OLD} {new} refs/heads/feature\0report-status\n".encode()) + FLUSH
    digest = hashlib.sha1()
    blob = _object(3, os.urandom(MiB))
    for piece in (b"PACK" + (2).to_bytes(4, "big") + (1 + blobs).to_bytes(4, "big"), _object(1, commit),
                  *(blob for _ in range(blobs))):
        digest.update(piece)
        yield piece
    yield digest.digest()


@dataclass
class ProxyProcess:
    pid: int
    port: int
    git_placeholder: str
    api_placeholder: str

    def status_kib(self, field_name: str) -> int:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith(field_name + ":"):
                return int(line.split()[1])
        raise AssertionError(f"no {field_name} in /proc/{self.pid}/status")

    def measure_from_here(self) -> int:
        """Forget the peak so far (the kernel's VmHWM starts again) and give the resident size now, in bytes."""
        Path(f"/proc/{self.pid}/clear_refs").write_text("5")
        return self.status_kib("VmRSS") * 1024

    def peak(self) -> int:
        return self.status_kib("VmHWM") * 1024


@contextmanager
def proxy_process(forge: str, api: str, directory: Path) -> Iterator[ProxyProcess]:
    process = subprocess.Popen([sys.executable, "-m", "tests.unit.proxy.proxyprocess", forge, api, str(directory),
                                str(BUDGET), str(CONNECTIONS)], cwd=ROOT, stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        port, git_placeholder, api_placeholder = process.stdout.readline().split()
        yield ProxyProcess(process.pid, int(port), git_placeholder, api_placeholder)
    finally:
        process.communicate("", timeout=30)


def chunked_push(proxy: ProxyProcess, answers: list[bytes]) -> None:
    auth = base64.b64encode(f"x-access-token:{proxy.git_placeholder}".encode()).decode()
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=120) as sock:
        sock.sendall((f"POST /r/forge-git/owner/repo.git/git-receive-pack HTTP/1.1\r\nHost: forge\r\n"
                      f"Authorization: Basic {auth}\r\nContent-Type: application/x-git-receive-pack-request\r\n"
                      "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n").encode())
        for piece in push_pieces(BLOBS):
            sock.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
        sock.sendall(b"0\r\n\r\n")
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
        answers.append(data)


def test_parallel_large_pushes_stream_within_the_budget(sink: Sink, tmp_path: Path) -> None:
    with proxy_process(sink.url, sink.url, tmp_path) as proxy:
        warm: list[bytes] = []
        chunked_push(proxy, warm)  # imports and first allocations, before the measure
        assert b"ok refs/heads/feature" in warm[0], warm[0][:300]
        idle = proxy.measure_from_here()
        answers: list[bytes] = []
        threads = [threading.Thread(target=chunked_push, args=(proxy, answers)) for _ in range(PUSHES)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(300)
        growth = proxy.peak() - idle
    assert len(answers) == PUSHES and all(b"ok refs/heads/feature" in a for a in answers), [a[:200] for a in answers]
    assert sink.received[-PUSHES:] == sink.received[:1] * PUSHES and sink.received[0] > BLOBS * MiB  # all of it
    bound = BUDGET + PUSHES * 2 * PER_CONNECTION + SLACK  # each push: its client and upstream connections
    assert growth < bound, f"the proxy grew by {growth / MiB:.0f} MiB under {PUSHES} pushes of {BLOBS} MiB"
    print(f"proxy memory: idle {idle / MiB:.1f} MiB, peak +{growth / MiB:.1f} MiB "
          f"under {PUSHES} parallel pushes of {BLOBS} MiB (bound {bound / MiB:.0f} MiB)")


def stuff(proxy: ProxyProcess, megabytes: int, sent: list[int]) -> socket.socket:
    """A connection that sends a large body until nothing more goes in (the upstream reads nothing)."""
    sock = socket.create_connection(("127.0.0.1", proxy.port), timeout=10)
    sock.sendall((f"POST /r/api/v1/upload HTTP/1.1\r\nHost: x\r\nx-api-key: {proxy.api_placeholder}\r\n"
                  "Transfer-Encoding: chunked\r\n\r\n").encode())
    block = b"%x\r\n%s\r\n" % (MiB, b"x" * MiB)
    sock.settimeout(1.0)  # a send that waits this long means every buffer on the way is full
    total = 0
    try:
        for _ in range(megabytes):
            sock.sendall(block)
            total += MiB
    except TimeoutError:
        pass
    sent.append(total)
    return sock


def proxy_side_open(proxy_port: int, client_port: int) -> bool:
    """Whether the proxy still holds its end of the connection from ``client_port`` (/proc/net/tcp)."""
    wanted = (f"{proxy_port:04X}", f"{client_port:04X}")
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, remote = line.split()[1:3]
        if (local.rpartition(":")[2], remote.rpartition(":")[2]) == wanted:
            return True
    return False


def closed_and_released(proxy: ProxyProcess, sock: socket.socket, timeout: float = 30) -> None:
    """Close a client connection and wait (bounded) until the proxy has let go of it: until then it
    still counts against the proxy's connection limit."""
    client_port = sock.getsockname()[1]
    sock.close()
    deadline = time.monotonic() + timeout
    while proxy_side_open(proxy.port, client_port):
        assert time.monotonic() < deadline, f"the proxy still holds the closed connection after {timeout} s"
        time.sleep(0.05)


def test_every_connection_of_the_budget_stuffing_a_stalled_upstream_stays_bounded(tmp_path: Path) -> None:
    stalled = socket.create_server(("127.0.0.1", 0), backlog=CONNECTIONS * 2)  # accepts (in the kernel), reads nothing
    url = f"http://127.0.0.1:{stalled.getsockname()[1]}"
    with stalled, proxy_process(url, url, tmp_path) as proxy:
        warm: list[int] = []
        closed_and_released(proxy, stuff(proxy, 1, warm))  # else it may still count among the CONNECTIONS
        idle = proxy.measure_from_here()
        sent: list[int] = []
        socks: list[socket.socket] = []
        threads = [threading.Thread(target=lambda: socks.append(stuff(proxy, 64, sent))) for _ in range(CONNECTIONS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        growth = proxy.peak() - idle
        for sock in socks:
            sock.close()
    assert len(sent) == CONNECTIONS and sum(sent) < CONNECTIONS * 64 * MiB  # they were held back, not taken
    bound = CONNECTIONS * PER_CONNECTION + SLACK
    assert growth < bound, f"the proxy grew by {growth / MiB:.0f} MiB under {CONNECTIONS} stuffed connections"
    print(f"proxy memory: idle {idle / MiB:.1f} MiB, peak +{growth / MiB:.1f} MiB with {CONNECTIONS} connections "
          f"stuffing {sum(sent) / MiB:.0f} MiB toward an upstream that reads nothing (bound {bound / MiB:.0f} MiB)")
