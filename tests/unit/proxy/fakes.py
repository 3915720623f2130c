"""A small world for proxy tests, all on loopback: a test CA, fake upstreams that record what reached
them, and the real ProxyServer running on its own event loop in a thread."""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Coroutine, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, BinaryIO

from dejima.adapters.session_dirs import new_draws
from dejima.core.credentials import Route, parse_upstream
from dejima.core.placeholders import make_placeholder
from dejima.core.secret import Secret
from dejima.proxy.routes import RouteSpec
from dejima.proxy.server import ProxyConfig, ProxyServer
from dejima.proxy.sources import FixedSource
from tests.httpfake import serving

REAL_KEY = "sk-ant-api03-REALrealREALrealREALrealREALrealREALreal0123456789"


def make_test_ca(directory: Path) -> tuple[Path, Path, Path]:
    """(ca.pem, leaf.pem, leaf.key) for 127.0.0.1 and localhost, made with the openssl CLI."""
    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=directory)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
        "-subj", "/CN=dejima test CA")
    run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "leaf.key", "-out", "leaf.csr", "-subj", "/CN=localhost")
    (directory / "ext.cnf").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    run("x509", "-req", "-in", "leaf.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-out", "leaf.pem",
        "-days", "2", "-extfile", "ext.cnf")
    return directory / "ca.pem", directory / "leaf.pem", directory / "leaf.key"


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    connection: int  # which upstream connection carried it


@dataclass
class FakeAPI:
    """A fake Anthropic Messages API (and slow-drip/stall endpoints) that records every request."""

    server: ThreadingHTTPServer
    url: str
    seen: list[Seen] = field(default_factory=list)
    sent_at: list[float] = field(default_factory=list)  # when each drip chunk left the upstream
    connections: int = 0


def _handler(api_ref: list[FakeAPI]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self) -> None:
            super().setup()
            api_ref[0].connections += 1
            self.connection_number = api_ref[0].connections

        def log_message(self, *args: object) -> None:
            pass

        def _body(self) -> bytes:
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                data = b""
                while (size := int(self.rfile.readline().split(b";")[0], 16)):
                    data += self.rfile.read(size)
                    self.rfile.readline()
                self.rfile.readline()
                return data
            return self.rfile.read(int(self.headers.get("Content-Length", "0")))

        def _record(self) -> Seen:
            seen = Seen(self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, self._body(),
                        self.connection_number)
            api_ref[0].seen.append(seen)
            return seen

        def _chunk(self, data: bytes) -> None:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        def do_GET(self) -> None:  # noqa: N802
            self.do_POST()

        def do_POST(self) -> None:  # noqa: N802
            seen = self._record()
            if seen.path.startswith("/v1/messages"):
                return self._messages(seen)
            if seen.path.startswith("/drip"):
                return self._drip(int(seen.path.rsplit("/", 1)[1]))
            if seen.path.startswith("/stall"):
                time.sleep(3)
            body = json.dumps({"path": seen.path}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _messages(self, seen: Seen) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for event, data in (("message_start", {"type": "message_start"}),
                                ("content_block_delta", {"delta": {"type": "text_delta", "text": "hello"}}),
                                ("message_stop", {"type": "message_stop"})):
                self._chunk(f"event: {event}\ndata: {json.dumps(data)}\n\n".encode())
            self._chunk(b"")

        def _drip(self, count: int) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for index in range(count):
                api_ref[0].sent_at.append(time.monotonic())
                self._chunk(f"data: {index}\n\n".encode())
                time.sleep(0.15)  # the upstream is slow: that is the scenario, not synchronisation
            self._chunk(b"")

    return Handler


@contextmanager
def fake_api(tls: tuple[Path, Path] | None = None) -> Iterator[FakeAPI]:
    ref: list[FakeAPI] = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(ref))
    scheme = "http"
    if tls is not None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(tls[0]), str(tls[1]))
        server.socket = context.wrap_socket(server.socket, server_side=True)
        scheme = "https"
    api = FakeAPI(server, f"{scheme}://127.0.0.1:{server.server_port}")
    ref.append(api)
    with serving(server):
        yield api


class LoopThread:
    """An asyncio loop in a thread, so blocking test clients can talk to servers running on it."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, Any], timeout: float = 30) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


def route(name: str, upstream: str, header: str = "x-api-key", scheme: str = "raw",
          username: str | None = None, manifest_host: str = "api.anthropic.com") -> Route:
    return Route(name, parse_upstream(upstream, name), header, scheme,
                 make_placeholder(manifest_host, header, new_draws()), username)


@dataclass
class RunningProxy:
    server: ProxyServer
    loop: LoopThread
    port: int
    ledger: Path
    violations: Path

    def routes(self) -> dict[str, Route]:
        return self.server.routes


@contextmanager
def running_proxy(tmp: Path, specs: list[RouteSpec], unix_path: Path | None = None, tls_tcp_port: int | None = None,
                  **options: Any) -> Iterator[RunningProxy]:
    config = ProxyConfig(tuple(specs), tmp / "ledger.jsonl", tmp / "violations.jsonl", **options)
    loop = LoopThread()
    server = ProxyServer(config)
    loop.run(server.start(unix_path, "127.0.0.1", 0, tls_tcp_port=tls_tcp_port))
    try:
        yield RunningProxy(server, loop, server.tcp_port or 0, config.ledger_path, config.violations_path)
    finally:
        loop.run(server.close())
        loop.stop()


def fixed(value: str = REAL_KEY) -> FixedSource:
    return FixedSource("env TEST_KEY", Secret(value))


def raw_exchange(port: int, data: bytes, timeout: float = 10) -> bytes:
    """Send raw bytes, read until the proxy closes (or until a complete response with a length arrives)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(data)
        chunks = []
        while True:
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                break
            if not chunk:
                break
            chunks.append(chunk)
            joined = b"".join(chunks)
            if b"\r\n\r\n" in joined and _complete(joined):
                break
        return b"".join(chunks)


def _complete(data: bytes) -> bool:
    head, _, body = data.partition(b"\r\n\r\n")
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return len(body) >= int(value)
    return False



@dataclass
class RawUpstream:
    """A hostile upstream on loopback: reads each request whole, as sent (its head, and a chunked body
    chunk by chunk through its trailer section), records the raw bytes, and answers with ``reply``
    (raw bytes, anything at all). ``requests`` holds only requests that arrived complete."""

    reply: bytes
    listener: socket.socket = field(default_factory=lambda: socket.create_server(("127.0.0.1", 0)))
    requests: list[bytes] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.listener.getsockname()[1]}"

    def serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:  # closed: the test is over
                return
            threading.Thread(target=self._connection, args=(conn,), daemon=True).start()

    def _connection(self, conn: socket.socket) -> None:
        with conn, conn.makefile("rb") as stream:
            while request := _read_request(stream):
                self.requests.append(request)
                conn.sendall(self.reply)


def _read_request(stream: BinaryIO) -> bytes | None:
    """One whole request off ``stream``, raw; None when it ends first."""
    head = b""
    while not head.endswith(b"\r\n\r\n"):
        line = stream.readline(1 << 20)
        if not line:
            return None
        head += line
    fields = {n.strip().lower(): v.strip() for n, _, v in (f.partition(b":") for f in head.split(b"\r\n")[1:])}
    if fields.get(b"transfer-encoding", b"").lower() == b"chunked":
        while True:
            line = stream.readline(1 << 20)
            size = int(line.split(b";")[0], 16) if line.strip() else -1
            head += line
            if size < 0:
                return None
            if size == 0:
                break
            data = stream.read(size + 2)
            if len(data) < size + 2:
                return None
            head += data
        while (line := stream.readline(1 << 20)) not in (b"\r\n", b""):  # the trailer section
            head += line
        return head + line if line else None
    body = stream.read(int(fields.get(b"content-length", b"0")))
    return head + body


@contextmanager
def raw_upstream(reply: bytes) -> Iterator[RawUpstream]:
    upstream = RawUpstream(reply)
    thread = threading.Thread(target=upstream.serve, daemon=True)
    thread.start()
    try:
        yield upstream
    finally:
        upstream.listener.shutdown(socket.SHUT_RDWR)  # wakes the accept
        upstream.listener.close()
        thread.join(5)
