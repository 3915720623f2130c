"""The credential proxy's upstreams behind an upstream (corporate) proxy: a real tinyproxy on loopback
(a process this test starts) carries CONNECT localhost:PORT, the real key reaches the upstream over TLS
inside that tunnel, verified as directly; a CONNECT the proxy refuses is a 502 naming the refusal, and the
key goes nowhere."""

from __future__ import annotations

import shutil
import socket
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from dejima.proxy.routes import RouteSpec
from tests.unit.proxy.fakes import REAL_KEY, FakeAPI, fake_api, fixed, make_test_ca, route, running_proxy
from tests.unit.proxy.test_server import client, placeholder, post_messages


@dataclass
class Tinyproxy:
    port: int
    lines: list[str]  # its log (stdout), read by a thread until it ends: complete only once it has

    def requests(self) -> list[str]:
        return [line.rsplit("): ", 1)[1].strip() for line in self.lines if "Request (file descriptor" in line]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.fixture
def tls_api(tmp_path: Path) -> Iterator[tuple[FakeAPI, Path]]:
    ca, leaf, key = make_test_ca(tmp_path)
    with fake_api((leaf, key)) as api:
        yield api, ca


def tinyproxy(tmp_path: Path, connect_port: int) -> Iterator[Tinyproxy]:
    binary = shutil.which("tinyproxy")
    if binary is None:  # under DEJIMA_REQUIRE_DOCKER a skip fails the run (scripts/setup-machine installs it)
        pytest.skip("tinyproxy is not installed (apt-get install tinyproxy)")
    port = free_port()
    conf = tmp_path / "tinyproxy.conf"
    conf.write_text(f"Port {port}\nListen 127.0.0.1\nTimeout 30\nLogLevel Info\nMaxClients 10\nAllow 127.0.0.1\n"
                    f"ConnectPort {connect_port}\n")
    process = subprocess.Popen([binary, "-d", "-c", str(conf)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True)
    assert process.stdout is not None
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(process.stdout or ()), daemon=True)
    try:
        for line in process.stdout:  # ends when it does: it says when it listens
            lines.append(line)
            if "listening on fd" in line:
                break
        assert "listening on fd" in "".join(lines), "".join(lines)
        reader.start()
        yield Tinyproxy(port, lines)
    finally:
        process.terminate()
        process.wait(timeout=10)
        if reader.is_alive():
            reader.join(10)
        process.stdout.close()


def test_the_key_reaches_its_upstream_through_the_proxy_as_connect(tmp_path: Path,
                                                                   tls_api: tuple[FakeAPI, Path]) -> None:
    api, ca = tls_api
    api_port = int(api.url.rsplit(":", 1)[1])
    upstream = f"https://localhost:{api_port}"
    for corporate in tinyproxy(tmp_path, api_port):
        with running_proxy(tmp_path, [RouteSpec(route("anthropic-api-key", upstream), fixed())],
                           extra_ca_file=str(ca), upstream_proxy=("127.0.0.1", corporate.port)) as proxy:
            response = post_messages(client(proxy), placeholder(proxy))
            assert response.status == 200, response.read()
            response.read()
        assert api.seen[-1].headers["x-api-key"] == REAL_KEY
    # Read once tinyproxy has ended and its whole log is in: its reader thread may lag the reply.
    assert corporate.requests() == [f"CONNECT localhost:{api_port} HTTP/1.1"]


def test_a_connect_the_proxy_refuses_is_a_502_and_the_key_goes_nowhere(tmp_path: Path,
                                                                       tls_api: tuple[FakeAPI, Path]) -> None:
    api, ca = tls_api
    api_port = int(api.url.rsplit(":", 1)[1])
    for corporate in tinyproxy(tmp_path, free_port()):  # CONNECT allowed to another port only
        with running_proxy(tmp_path, [RouteSpec(route("anthropic-api-key", f"https://localhost:{api_port}"),
                                                fixed())],
                           extra_ca_file=str(ca), upstream_proxy=("127.0.0.1", corporate.port)) as proxy:
            response = post_messages(client(proxy), placeholder(proxy))
            body = response.read().decode()
            assert response.status == 502
            assert "refused CONNECT localhost" in body and "403" in body, body
        assert api.seen == []
    assert corporate.requests() == [f"CONNECT localhost:{api_port} HTTP/1.1"]
