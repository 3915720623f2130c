"""dejima's one client for the Docker Engine API: HTTP/1.1 over the engine's socket, JSON in and out.

A session start makes about twenty engine calls; the docker SDK costs ~0.1 s to import and a few
milliseconds per call (requests, urllib3, a connection pool). This client is what dejima needs and
no more: one short connection per request (so calls may run from several threads at once),
Content-Length, chunked and until-EOF bodies both ways (an image build's context, a root file
system streamed in for an import), the engine's streams of JSON progress objects, the multiplexed
stdout/stderr framing of logs and attach, and an upgraded (hijacked) connection for attach.

The engine is found as the docker CLI and SDK find it: ``DOCKER_HOST`` (unix:// or tcp://, TLS
with ``DOCKER_TLS_VERIFY``/``DOCKER_CERT_PATH``), else /var/run/docker.sock.
"""

from __future__ import annotations

import codecs
import json
import os
import socket
import struct
import threading
from collections.abc import Generator, Iterator, Mapping
from typing import IO, Any
from urllib.parse import quote, urlencode

from dejima.errors import EngineError

DEFAULT_SOCKET = "/var/run/docker.sock"
ENGINE_HINT = (
    "start the Docker engine (e.g. `sudo systemctl start docker`, or `dockerd &` as root) and check "
    "that you may use its socket (`docker info`); DOCKER_HOST selects another engine"
)
MAX_HEAD_LINES = 200
STREAM_PIECE = 256 * 1024  # a streamed request body goes out in chunks of this size
STDOUT, STDERR = 1, 2
Frame = tuple[int, bytes]  # (stream: 1 stdout, 2 stderr), data
Frames = Generator[Frame, None, None]  # close() it to hang up early


class APIError(Exception):
    """The engine answered a request with an error status; ``message`` is the engine's own words."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{message} (HTTP {status})")
        self.status = status
        self.message = message

    @property
    def not_found(self) -> bool:
        return self.status == 404


class StreamError(Exception):
    """The engine reported, inside a progress stream it answered 200, that the work failed (its words)."""


class Response:
    """A response head, and its body read as framed (Content-Length, chunked, or until EOF)."""

    def __init__(self, sock: socket.socket, method: str) -> None:
        self.sock = sock
        self.file: IO[bytes] = sock.makefile("rb")
        status_line = self.file.readline(65536)
        parts = status_line.split(None, 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
            raise EngineError(f"the Docker engine sent something other than HTTP: {status_line[:80]!r}",
                              hint=ENGINE_HINT)
        self.status = int(parts[1])
        self.headers: dict[str, str] = {}
        for _ in range(MAX_HEAD_LINES):
            line = self.file.readline(65536)
            if line in (b"\r\n", b"\n", b""):
                break
            name, _, value = line.decode("latin-1").partition(":")
            self.headers[name.strip().lower()] = value.strip()
        self.chunked = "chunked" in self.headers.get("transfer-encoding", "").lower()
        length = self.headers.get("content-length")
        self.remaining: int | None = int(length) if length is not None and not self.chunked else None
        if method == "HEAD" or self.status in (204, 304) or 100 <= self.status < 200:
            self.remaining = 0

    def pieces(self) -> Iterator[bytes]:
        """The body as it arrives, de-chunked."""
        if self.chunked:
            while True:
                size = int(self.file.readline(4096).split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    return
                data = self._exactly(size)
                self.file.readline(4096)  # the CRLF after the chunk
                yield data
        elif self.remaining is not None:
            while self.remaining > 0:
                data = self.file.read1(min(self.remaining, 65536))  # type: ignore[attr-defined]
                if not data:
                    return
                self.remaining -= len(data)
                yield data
        else:
            while data := self.file.read1(65536):  # type: ignore[attr-defined]
                yield data

    def _exactly(self, size: int) -> bytes:
        data = self.file.read(size)
        if len(data) < size:
            raise EngineError("the Docker engine closed the connection in the middle of a response")
        return data

    def read(self) -> bytes:
        return b"".join(self.pieces())

    def json(self) -> Any:
        body = self.read()
        return json.loads(body) if body else None

    def close(self) -> None:
        self.file.close()
        self.sock.close()


class Engine:
    """The engine at ``url``; ``version`` is the API version requests name (the engine's own,
    learnt from the first ping)."""

    def __init__(self, url: str, timeout: float = 120.0, tls: Any = None) -> None:
        self.url = url
        self.timeout = timeout
        self.tls = tls  # an ssl.SSLContext for tcp:// engines with TLS
        self.version = ""
        self.host = "docker"  # the Host header; a unix socket has no name

    @classmethod
    def from_env(cls, timeout: float = 120.0) -> Engine:
        url = os.environ.get("DOCKER_HOST") or f"unix://{DEFAULT_SOCKET}"
        tls = None
        if url.startswith("tcp://") and os.environ.get("DOCKER_TLS_VERIFY"):
            tls = _tls_context(os.environ.get("DOCKER_CERT_PATH") or os.path.expanduser("~/.docker"))
        elif not url.startswith(("unix://", "tcp://")):
            raise EngineError(f"DOCKER_HOST={url} is not an engine dejima can reach: it speaks to unix:// "
                              "sockets and tcp:// addresses", hint=ENGINE_HINT)
        engine = cls(url, timeout, tls)
        if url.startswith("tcp://"):
            engine.host = url[len("tcp://"):].rstrip("/")
        return engine

    # --- requests ---------------------------------------------------------------------------
    def _connect(self, timeout: float | None) -> socket.socket:
        try:
            if self.url.startswith("unix://"):
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                try:
                    sock.settimeout(timeout)
                    sock.connect(self.url[len("unix://"):])
                except BaseException:
                    sock.close()
                    raise
                return sock
            host, _, port = self.url[len("tcp://"):].rstrip("/").rpartition(":")
            raw = socket.create_connection((host.strip("[]"), int(port)), timeout=timeout)
            return self.tls.wrap_socket(raw, server_hostname=host.strip("[]")) if self.tls else raw
        except (OSError, ValueError) as exc:
            raise EngineError(f"cannot reach the Docker engine at {self.url}: {exc}", hint=ENGINE_HINT) from exc

    def request(self, method: str, path: str, params: dict[str, Any] | None = None, body: Any = None,
                timeout: float | None = -1.0, upgrade: bool = False, data: bytes | IO[bytes] | None = None,
                headers: Mapping[str, str] | None = None) -> Response:
        """Send one request on a fresh connection and read the response head. ``body``: JSON;
        ``data``: a tar, whole or as a stream (sent chunked as it is read). ``timeout`` -1: the
        engine's default; None: wait as long as it takes (a session's wait, a followed log, a build)."""
        timeout = self.timeout if timeout == -1.0 else timeout
        target = f"/v{self.version}{path}" if self.version else path
        if params:  # a tuple is a parameter given once per value (an import's changes); a list is JSON
            target += "?" + urlencode([(k, _param(item)) for k, v in params.items() if v is not None
                                       for item in (v if isinstance(v, tuple) else (v,))])
        payload = json.dumps(body).encode() if body is not None else data if isinstance(data, bytes) else b""
        head = [f"{method} {target} HTTP/1.1", f"Host: {self.host}", "User-Agent: dejima"]
        head += [f"{name}: {value}" for name, value in (headers or {}).items()]
        if body is not None:
            head += ["Content-Type: application/json", f"Content-Length: {len(payload)}"]
        elif isinstance(data, bytes):
            head += ["Content-Type: application/x-tar", f"Content-Length: {len(payload)}"]
        elif data is not None:
            head += ["Content-Type: application/x-tar", "Transfer-Encoding: chunked"]
        elif method in ("POST", "PUT"):
            head.append("Content-Length: 0")
        head += ["Connection: Upgrade", "Upgrade: tcp"] if upgrade else ["Connection: close"]
        sock = self._connect(timeout)
        try:
            sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + payload)
            if data is not None and not isinstance(data, bytes):
                while piece := data.read(STREAM_PIECE):
                    sock.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
                sock.sendall(b"0\r\n\r\n")
            response = Response(sock, method)
        except BaseException:
            sock.close()
            raise
        if response.status >= 400:
            try:
                raise APIError(response.status, _message(response.read()))
            finally:
                response.close()
        return response

    def call(self, method: str, path: str, params: dict[str, Any] | None = None, body: Any = None,
             timeout: float | None = -1.0) -> Any:
        """A request whose answer is JSON (or nothing)."""
        response = self.request(method, path, params, body, timeout)
        try:
            return response.json()
        finally:
            response.close()

    def ping(self) -> None:
        """Reach the engine once and learn its API version (the SDK's "auto")."""
        response = self.request("GET", "/_ping")
        try:
            response.read()
            self.version = response.headers.get("api-version", "")
        finally:
            response.close()

    def progress(self, method: str, path: str, params: dict[str, Any] | None = None,
                 data: bytes | IO[bytes] | None = None,
                 headers: Mapping[str, str] | None = None) -> Generator[dict[str, Any], None, None]:
        """A request whose answer is a stream of JSON objects (a build's, a pull's, an import's
        progress), each as it arrives; no time limit, as such work takes what it takes. An object
        with an ``error`` is the work failing: StreamError. close() it (contextlib.closing) to hang
        up when stopping early."""
        response = self.request(method, path, params, timeout=None, data=data, headers=headers)
        try:
            for event in json_objects(response.pieces()):
                if not isinstance(event, dict):
                    continue
                if event.get("error"):
                    raise StreamError(str(event["error"]).strip())
                yield event
        finally:
            response.close()

    # --- streams ----------------------------------------------------------------------------
    def frames(self, path: str, params: dict[str, Any], tty: bool = False) -> Frames:
        """A followed log (or any multiplexed stream) as (stream, data) frames, until it ends."""
        response = self.request("GET", path, params, timeout=None)
        return _closing(response, _demux(response.pieces(), tty))

    def attach(self, container: str, tty: bool = False, stdin: IO[bytes] | None = None) -> Frames:
        """The container's output from its start (logs=1 catches what came before this call),
        on a hijacked connection: ask before starting the container and nothing is lost. With
        ``stdin`` (a container created with its stdin open), what it reads goes to the container's
        stdin on a thread of its own, then end of file (the write half closed: the engine closes the
        container's stdin), as `docker run -i` does; the output is read meanwhile, so neither side
        waits for the other however much there is."""
        if stdin is not None and self.tls is not None:  # Python's TLS socket cannot close its write half alone
            raise EngineError("a command's input cannot be forwarded to an engine reached over TLS",
                              hint="give the input as a file in the workspace, or run dejima where the engine's "
                              "unix socket is")
        streams = {"logs": 1, "stream": 1, "stdout": 1, "stderr": 1, "stdin": 1 if stdin is not None else None}
        response = self.request("POST", f"/containers/{quote(container)}/attach", streams, timeout=None, upgrade=True)
        if stdin is not None:
            threading.Thread(target=_copy_in, args=(stdin, response.sock), name="session-input", daemon=True).start()
        # After 101 (or a 200 from older engines) the connection carries the raw stream.
        return _closing(response, _demux(_until_eof(response), tty))

    def exec_run(self, container: str, command: list[str], user: str, timeout: float) -> tuple[int, bytes, bytes]:
        """Run ``command`` in a running container as ``user`` (no TTY, no stdin) and wait for it:
        (exit status, stdout, stderr). ``timeout`` bounds each read of its output."""
        created = self.call("POST", f"/containers/{quote(container)}/exec",
                            body={"Cmd": command, "User": user, "AttachStdin": False, "AttachStdout": True,
                                  "AttachStderr": True, "Tty": False})
        exec_id = quote(str(created["Id"]), safe="")
        response = self.request("POST", f"/exec/{exec_id}/start", body={"Detach": False, "Tty": False},
                                timeout=timeout, upgrade=True)
        out: dict[int, list[bytes]] = {STDOUT: [], STDERR: []}
        try:
            for stream, data in _demux(_until_eof(response), tty=False):
                out.setdefault(stream, []).append(data)
        finally:
            response.close()
        status = self.call("GET", f"/exec/{exec_id}/json").get("ExitCode")
        return (-1 if status is None else int(status)), b"".join(out[STDOUT]), b"".join(out[STDERR])


def json_objects(pieces: Iterator[bytes]) -> Iterator[Any]:
    """The JSON objects of a byte stream that holds them one after another (whitespace between, an
    object split across pieces or several in one)."""
    decoder = json.JSONDecoder()
    text = codecs.getincrementaldecoder("utf-8")(errors="replace")  # a character may be cut between pieces
    buffer = ""
    for piece in pieces:
        buffer += text.decode(piece)
        while True:
            buffer = buffer.lstrip()
            if not buffer:
                break
            try:
                value, end = decoder.raw_decode(buffer)
            except json.JSONDecodeError:
                break  # the rest of the object is in a later piece
            buffer = buffer[end:]
            yield value
    if buffer.strip():
        raise EngineError(f"the Docker engine's progress stream ended inside an object: {buffer[:80]!r}")


def _copy_in(source: IO[bytes], sock: socket.socket) -> None:
    """``source`` to the engine as it comes (no framing: stdin is raw bytes), then end of file. A
    container that ends before reading it all closes the connection: the copy stops there."""
    read = getattr(source, "read1", source.read)  # what is there, not a full buffer: a pipe's lines as typed
    try:
        while piece := read(STREAM_PIECE):
            sock.sendall(piece)
    except (OSError, ValueError):  # the container ended (its connection closed), or the source failed
        pass
    try:
        sock.shutdown(socket.SHUT_WR)  # end of file for the command, whichever way the copy ended
    except OSError:
        pass


def _until_eof(response: Response) -> Iterator[bytes]:
    while data := response.file.read1(65536):  # type: ignore[attr-defined]
        yield data


def _closing(response: Response, frames: Iterator[Frame]) -> Frames:
    try:
        yield from frames
    finally:
        response.close()


def _demux(pieces: Iterator[bytes], tty: bool) -> Iterator[Frame]:
    """Split the engine's 8-byte-headed frames (stream, 0, 0, 0, length) out of a byte stream;
    a TTY container's output is not framed and is all stdout."""
    if tty:
        for piece in pieces:
            yield STDOUT, piece
        return
    buffer = b""
    for piece in pieces:
        buffer += piece
        while len(buffer) >= 8:
            stream, length = struct.unpack(">BxxxL", buffer[:8])
            if len(buffer) < 8 + length:
                break
            yield stream, buffer[8:8 + length]
            buffer = buffer[8 + length:]


def _param(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, (dict, list)):
        return json.dumps(value)
    return str(value)


def _message(body: bytes) -> str:
    try:
        found = json.loads(body)
    except ValueError:
        found = None
    if isinstance(found, dict) and isinstance(found.get("message"), str):
        return str(found["message"])
    return body.decode(errors="replace").strip()[:500] or "no reason given"


def _tls_context(cert_path: str) -> Any:
    import ssl

    context = ssl.create_default_context(cafile=os.path.join(cert_path, "ca.pem"))
    context.load_cert_chain(os.path.join(cert_path, "cert.pem"), os.path.join(cert_path, "key.pem"))
    return context
