"""dejima.adapters.engine against a fake engine on a real unix socket: what goes on the wire, and how each
way of framing a response (length, chunks, until EOF, an upgraded stream) is read back."""

from __future__ import annotations

import io
import json
import socket
import struct
import threading
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from dejima.adapters.engine import STDERR, STDOUT, APIError, Engine
from dejima.adapters.runtime import Runtime, create_body
from dejima.core.limits import ContainerLimits
from dejima.core.plan import Bind, ContainerSpec
from dejima.errors import EngineError


class FakeEngine:
    """Answers each connection with the next canned response and keeps what was asked."""

    def __init__(self, path: Path, responses: list[bytes]) -> None:
        self.requests: list[bytes] = []
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(str(path))
        self.server.listen(8)
        self.thread = threading.Thread(target=self.serve, args=(responses,), daemon=True)
        self.thread.start()

    def serve(self, responses: list[bytes]) -> None:
        for response in responses:
            conn, _ = self.server.accept()
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    data += conn.recv(65536)
                head, _, body = data.partition(b"\r\n\r\n")
                if b"transfer-encoding: chunked" in head.lower():  # read to the last chunk, keep it de-chunked
                    while not body.endswith(b"0\r\n\r\n"):
                        body += conn.recv(65536)
                    body = dechunk(body)
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                while len(body) < length:
                    body += conn.recv(65536)
                self.requests.append(head + b"\r\n\r\n" + body)
                conn.sendall(response)


def dechunk(body: bytes) -> bytes:
    whole = b""
    while True:
        size_line, _, body = body.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            return whole
        whole, body = whole + body[:size], body[size + 2:]


@pytest.fixture
def engine_at(tmp_path: Path) -> Iterator[tuple[Engine, list[FakeEngine]]]:
    made: list[FakeEngine] = []
    yield Engine(f"unix://{tmp_path / 'engine.sock'}", timeout=5), made
    for fake in made:
        fake.server.close()


def serve(tmp_path: Path, made: list[FakeEngine], *responses: bytes) -> FakeEngine:
    fake = FakeEngine(tmp_path / "engine.sock", list(responses))
    made.append(fake)
    return fake


def frame(stream: int, data: bytes) -> bytes:
    return struct.pack(">BxxxL", stream, len(data)) + data


def chunked(*pieces: bytes) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"


Fixture = tuple[Engine, list[FakeEngine]]


def test_json_answer_and_the_version_learnt_from_ping(tmp_path: Path, engine_at: Fixture) -> None:
    engine, made = engine_at
    fake = serve(tmp_path, made, b"HTTP/1.1 200 OK\r\nApi-Version: 1.41\r\nContent-Length: 2\r\n\r\nOK",
                 b'HTTP/1.1 200 OK\r\nContent-Length: 15\r\n\r\n[{"Id": "abc"}]')
    engine.ping()
    found = Runtime(engine).containers({"dejima.scope": "t", "dejima.role": ""})
    assert [c.id for c in found] == ["abc"]
    request = fake.requests[1].split(b"\r\n")[0].decode()
    assert request.startswith("GET /v1.41/containers/json?all=1&filters=")
    query = parse_qs(urlsplit(request.split()[1]).query)
    assert json.loads(query["filters"][0]) == {"label": ["dejima.scope=t", "dejima.role"]}


def test_chunked_log_frames_split_across_chunks(tmp_path: Path, engine_at: Fixture) -> None:
    engine, made = engine_at
    stream = frame(STDOUT, b"dejima-filter: ready\n") + frame(STDERR, b"oops\n") + frame(STDOUT, b"")
    body = chunked(stream[:5], stream[5:30], stream[30:])  # cuts through a header and a payload
    serve(tmp_path, made, b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + body)
    assert list(engine.frames("/containers/x/logs", {"follow": 1})) == [
        (STDOUT, b"dejima-filter: ready\n"), (STDERR, b"oops\n"), (STDOUT, b"")]


def test_attach_reads_the_upgraded_stream_until_eof(tmp_path: Path, engine_at: Fixture) -> None:
    engine, made = engine_at
    fake = serve(tmp_path, made, b"HTTP/1.1 101 UPGRADED\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n\r\n"
                 + frame(STDOUT, b"out\n") + frame(STDERR, b"err\n"))
    runtime = Runtime(engine)
    assert list(runtime.attach("c1")) == [(b"out\n", None), (None, b"err\n")]
    head = fake.requests[0].decode()
    assert head.startswith("POST /containers/c1/attach?logs=1&stream=1&stdout=1&stderr=1 HTTP/1.1")
    assert "Upgrade: tcp" in head


def test_exec_runs_as_the_user_asked_and_returns_status_and_both_streams(tmp_path: Path, engine_at: Fixture) -> None:
    """`doctor --session`'s probe: an exec made (as the session's user, no TTY, no stdin), started on an upgraded
    connection whose frames are split by stream, and its exit status read once its output ended."""
    engine, made = engine_at
    fake = serve(tmp_path, made, b'HTTP/1.1 201 Created\r\nContent-Length: 13\r\n\r\n{"Id": "e/1"}',
                 b"HTTP/1.1 101 UPGRADED\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n\r\n"
                 + frame(STDOUT, b'{"a": ') + frame(STDERR, b"warn\n") + frame(STDOUT, b"1}\n"),
                 b'HTTP/1.1 200 OK\r\nContent-Length: 15\r\n\r\n{"ExitCode": 3}')
    assert Runtime(engine).exec("c1", ("python3", "-c", "x"), "4242:4242") == (3, '{"a": 1}\n', "warn\n")
    created, started, inspected = (request.decode() for request in fake.requests)
    assert created.startswith("POST /containers/c1/exec HTTP/1.1")
    assert json.loads(created.split("\r\n\r\n", 1)[1]) == {
        "Cmd": ["python3", "-c", "x"], "User": "4242:4242", "AttachStdin": False, "AttachStdout": True,
        "AttachStderr": True, "Tty": False}
    assert started.startswith("POST /exec/e%2F1/start HTTP/1.1") and "Upgrade: tcp" in started
    assert inspected.startswith("GET /exec/e%2F1/json HTTP/1.1")


def test_attach_with_stdin_sends_it_raw_then_its_end(tmp_path: Path, engine_at: Fixture) -> None:
    """The container's stdin is the connection's raw bytes; its end is the write half closed. This fake
    echoes each piece back as stdout and ends only at that end of file."""
    engine, _ = engine_at
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(tmp_path / "engine.sock"))
    server.listen(1)
    heads: list[bytes] = []

    def echo() -> None:
        conn, _ = server.accept()
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            head, _, rest = data.partition(b"\r\n\r\n")
            heads.append(head)
            conn.sendall(b"HTTP/1.1 101 UPGRADED\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n\r\n")
            while rest or (rest := conn.recv(65536)):
                conn.sendall(frame(STDOUT, rest))
                rest = b""

    threading.Thread(target=echo, daemon=True).start()
    data = bytes(range(256)) * 1024  # more than one piece
    try:
        echoed = b"".join(out or b"" for out, _ in Runtime(engine).attach("c1", stdin=io.BytesIO(data)))
    finally:
        server.close()
    assert echoed == data
    assert heads[0].startswith(b"POST /containers/c1/attach?logs=1&stream=1&stdout=1&stderr=1&stdin=1 HTTP/1.1")


def test_stdin_is_refused_toward_an_engine_over_tls() -> None:
    """Its end of file is the write half closed, which Python's TLS socket cannot do alone: said, before any
    connection, rather than a command waiting for an end that never comes."""
    engine = Engine("tcp://127.0.0.1:9", timeout=1, tls=object())
    with pytest.raises(EngineError, match="cannot be forwarded to an engine reached over TLS"):
        engine.attach("c1", stdin=io.BytesIO(b"x"))


def test_errors_carry_the_engines_words(tmp_path: Path, engine_at: Fixture) -> None:
    engine, made = engine_at
    message = b'{"message": "No such container: nope"}'
    serve(tmp_path, made, b"HTTP/1.1 404 Not Found\r\nContent-Length: %d\r\n\r\n%s" % (len(message), message),
          b"HTTP/1.1 404 Not Found\r\nContent-Length: %d\r\n\r\n%s" % (len(message), message),
          b'HTTP/1.1 500 Server Error\r\nContent-Type: application/json\r\n\r\n{"message": "exec: \\"x\\": '
          b'executable file not found in $PATH"}')
    runtime = Runtime(engine)
    assert runtime.inspect("nope") is None
    with pytest.raises(APIError) as caught:
        engine.call("POST", "/containers/nope/start")
    assert caught.value.not_found and caught.value.message == "No such container: nope"
    with pytest.raises(EngineError, match="executable file not found"):
        runtime.start("c1")  # an until-EOF body, read whole


def test_an_absent_engine_is_named_with_the_way_to_start_it(tmp_path: Path) -> None:
    engine = Engine(f"unix://{tmp_path / 'absent.sock'}", timeout=1)
    with pytest.raises(EngineError) as caught:
        engine.ping()
    assert "cannot reach the Docker engine" in caught.value.message and "docker info" in (caught.value.hint or "")


def test_from_env_refuses_an_engine_it_cannot_speak_to(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "ssh://builder")
    with pytest.raises(EngineError, match="unix:// sockets and tcp://"):
        Engine.from_env()


def test_create_body_keeps_every_restriction() -> None:
    spec = ContainerSpec(
        name="s", image="img", command=("true",), user="1000:1000", labels={"a": "b"}, environment={"K": "V"},
        binds=(Bind("/w", "/w", read_only=False), Bind("/w/.git/hooks", "/w/.git/hooks", read_only=True)),
        tmpfs={"/tmp": "size=1m"}, network_mode="container:f", pid_mode="container:f", read_only_rootfs=True,
        hostname="ignored", limits=ContainerLimits(pids=64, memory=2**30, cpu_shares=512),
    )
    body = create_body(spec)
    host = body["HostConfig"]
    assert host["CapDrop"] == ["ALL"] and "CapAdd" not in host
    assert host["SecurityOpt"] == ["no-new-privileges:true"]
    assert host["Binds"] == ["/w:/w:rw", "/w/.git/hooks:/w/.git/hooks:ro"]
    assert host["Memory"] == host["MemorySwap"] == 2**30 and host["PidsLimit"] == 64 and host["CpuShares"] == 512
    assert host["NetworkMode"] == host["PidMode"] == "container:f" and host["ReadonlyRootfs"] is True
    assert body["Hostname"] is None  # a joined namespace has the filter's name
    assert body["Env"] == ["K=V"] and body["User"] == "1000:1000" and body["Tty"] is False


JSON_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
IMAGE = b'HTTP/1.1 200 OK\r\nContent-Length: 20\r\n\r\n{"Id": "sha256:abc"}'


def test_json_objects_split_across_pieces_or_several_in_one() -> None:
    from dejima.adapters.engine import json_objects

    pieces = [b'{"stream": "Step 1/2\\n"}\r\n{"str', b'eam": "apt: \xc3', b'\xa9t\\u00e9\\n"}{"aux": 1}\n', b"  "]
    assert list(json_objects(iter(pieces))) == [{"stream": "Step 1/2\n"}, {"stream": "apt: \u00e9t\u00e9\n"},
                                                {"aux": 1}]
    with pytest.raises(EngineError, match="ended inside an object"):
        list(json_objects(iter([b'{"stream": "cut'])))


def test_a_build_sends_its_context_and_streams_its_lines(tmp_path: Path, engine_at: Fixture) -> None:
    import io
    import tarfile

    from dejima.core.images import ImageRecipe

    engine, made = engine_at
    events = b'{"stream": "Step 1/2 : FROM base\\n"}{"stream": "apt line\\nanother\\n"}{"aux": {"ID": "x"}}'
    fake = serve(tmp_path, made, JSON_HEAD + chunked(events[:20], events[20:]), IMAGE)
    recipe = ImageRecipe("session", "FROM base\n", (("ca/corp.crt", b"PEM"),), "sha256:base")
    lines: list[str] = []
    assert Runtime(engine).build(recipe, lines.append) == "sha256:abc"
    assert lines == ["Step 1/2 : FROM base", "apt line", "another"]
    head, _, body = fake.requests[0].partition(b"\r\n\r\n")
    query = parse_qs(urlsplit(head.split(b"\r\n")[0].split()[1].decode()).query)
    assert query["t"] == [recipe.tag] and json.loads(query["labels"][0]) == recipe.labels
    assert query["rm"] == ["1"] and query["forcerm"] == ["1"] and query["pull"] == ["0"]
    with tarfile.open(fileobj=io.BytesIO(body)) as tar:
        assert {m.name: tar.extractfile(m).read() for m in tar.getmembers()} == {  # type: ignore[union-attr]
            "Dockerfile": b"FROM base\n", "ca/corp.crt": b"PEM"}


def test_a_build_error_is_an_image_error_with_the_engines_words(tmp_path: Path, engine_at: Fixture) -> None:
    from dejima.core.images import ImageRecipe
    from dejima.errors import ImageError

    engine, made = engine_at
    serve(tmp_path, made, JSON_HEAD + chunked(b'{"stream": "Step 1/1"}{"error": "apt-get failed: exit 100"}'))
    with pytest.raises(ImageError, match="building the filter image failed: apt-get failed: exit 100"):
        Runtime(engine).build(ImageRecipe("filter", "FROM x\n", (), "sha256:base"), lambda line: None)


def test_an_import_streams_the_tar_in_chunks_as_it_is_read(tmp_path: Path, engine_at: Fixture) -> None:
    import os

    engine, made = engine_at
    fake = serve(tmp_path, made, JSON_HEAD + chunked(b'{"status": "sha256:abc"}'), IMAGE)
    data = os.urandom(700 * 1024)  # three chunks of a pipe's reading
    read, write = os.pipe()
    def feed() -> None:
        os.write(write, data)
        os.close(write)

    writer = threading.Thread(target=feed, daemon=True)
    writer.start()
    with open(read, "rb") as stream:
        assert Runtime(engine).import_rootfs(stream, "dejima/base:trixie", {"dejima.role": "base"}) == "sha256:abc"
    head, _, body = fake.requests[0].partition(b"\r\n\r\n")
    assert b"transfer-encoding: chunked" in head.lower() and body == data
    query = parse_qs(urlsplit(head.split(b"\r\n")[0].split()[1].decode()).query)
    assert query["fromSrc"] == ["-"] and query["repo"] == ["dejima/base"] and query["tag"] == ["trixie"]
    assert query["changes"] == ["LABEL dejima.role=base", 'CMD ["/bin/bash"]']  # one parameter per change


def test_a_pull_sends_the_clis_credentials_and_returns_the_engines_reason(tmp_path: Path, engine_at: Fixture,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    import base64

    config = tmp_path / "docker-config"
    config.mkdir()
    (config / "config.json").write_text(json.dumps({"auths": {"ghcr.io": {
        "auth": base64.b64encode(b"me:s3cret").decode()}}}))
    monkeypatch.setenv("DOCKER_CONFIG", str(config))
    engine, made = engine_at
    fake = serve(tmp_path, made, JSON_HEAD + chunked(b'{"status": "Pulling"}{"error": "manifest unknown"}'))
    assert Runtime(engine).pull("ghcr.io/me/base:1") == "manifest unknown"
    head = fake.requests[0].split(b"\r\n\r\n")[0].decode()
    query = parse_qs(urlsplit(head.split("\r\n")[0].split()[1]).query)
    assert query == {"fromImage": ["ghcr.io/me/base"], "tag": ["1"]}
    [auth] = [line.split(": ", 1)[1] for line in head.split("\r\n") if line.lower().startswith("x-registry-auth:")]
    assert json.loads(base64.urlsafe_b64decode(auth)) == {"username": "me", "password": "s3cret",
                                                          "serveraddress": "ghcr.io"}
