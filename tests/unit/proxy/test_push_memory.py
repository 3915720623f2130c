"""Three parallel 240 MiB pushes through the proxy, in a process of its own as in a launcher, with its
memory read from the kernel: the packs stream on (each read on its way to prove a fast-forward), and
the process's peak stays within its budget and a bounded allowance per connection, not the pushes' size."""

from __future__ import annotations

import hashlib
import os
import socket
import subprocess
import sys
import threading
import zlib
from collections.abc import Iterator
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
PER_CONNECTION = 2 * MiB  # what a streaming exchange may take (docs/credentials.md): reads and transport buffers
SLACK = 16 * MiB  # the allocator's and the interpreter's own growth under load
OLD = hashlib.sha1(b"the forge's feature branch").hexdigest()
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
            self._answer("application/x-git-upload-pack-advertisement", pkt(b"# service=git-upload-pack\n") + FLUSH
                         + pkt(f"{OLD} HEAD\0symref=HEAD:refs/heads/main\n".encode()) + FLUSH)

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


def chunked_push(port: int, placeholder: str, answers: list[bytes]) -> None:
    import base64

    auth = base64.b64encode(f"x-access-token:{placeholder}".encode()).decode()
    with socket.create_connection(("127.0.0.1", port), timeout=120) as sock:
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


def status_kib(pid: int, field_name: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field_name + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field_name} in /proc/{pid}/status")


def test_parallel_large_pushes_stream_within_the_budget(sink: Sink, tmp_path: Path) -> None:
    proxy = subprocess.Popen([sys.executable, "-m", "tests.unit.proxy.proxyprocess", sink.url, str(tmp_path),
                              str(BUDGET)], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proxy.stdout is not None
        port_text, placeholder = proxy.stdout.readline().split()
        port = int(port_text)
        warm: list[bytes] = []
        chunked_push(port, placeholder, warm)  # imports and first allocations, before the measure
        assert b"ok refs/heads/feature" in warm[0], warm[0][:300]
        Path(f"/proc/{proxy.pid}/clear_refs").write_text("5")  # the peak starts again from here
        idle = status_kib(proxy.pid, "VmRSS")
        answers: list[bytes] = []
        threads = [threading.Thread(target=chunked_push, args=(port, placeholder, answers)) for _ in range(PUSHES)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(300)
        peak = status_kib(proxy.pid, "VmHWM")
    finally:
        proxy.communicate("", timeout=30)
    assert len(answers) == PUSHES and all(b"ok refs/heads/feature" in a for a in answers), [a[:200] for a in answers]
    assert sink.received[-PUSHES:] == sink.received[:1] * PUSHES and sink.received[0] > BLOBS * MiB  # all of it
    growth = (peak - idle) * 1024
    bound = BUDGET + PUSHES * 2 * PER_CONNECTION + SLACK  # each push: its client and upstream connections
    assert growth < bound, f"the proxy grew by {growth / MiB:.0f} MiB under {PUSHES} pushes of {BLOBS} MiB"
    print(f"proxy memory: idle {idle / 1024:.1f} MiB, peak +{growth / MiB:.1f} MiB "
          f"under {PUSHES} parallel pushes of {BLOBS} MiB (bound {bound / MiB:.0f} MiB)")
