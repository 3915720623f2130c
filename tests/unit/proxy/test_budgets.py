"""What one session can take of the launcher through its proxy, tried as a hostile session would: a
flood of refused requests (records bounded on disk, the total exact), more connections than its
budget (503 and a record), and requests past the memory the proxy may hold."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from dejima.adapters.session_dirs import new_draws
from dejima.core.floods import total
from dejima.core.placeholders import make_decoys
from dejima.proxy.records import read_records
from dejima.proxy.routes import RouteSpec
from tests.unit.proxy.fakes import FakeAPI, RunningProxy, fake_api, fixed, raw_exchange, route, running_proxy

FLOOD = 20_000


@pytest.fixture
def api() -> Iterator[FakeAPI]:
    with fake_api() as fake:
        yield fake


@pytest.fixture
def proxy(tmp_path: Path, api: FakeAPI) -> Iterator[RunningProxy]:
    decoys = make_decoys(new_draws(), ["ANTHROPIC_API_KEY"]).values()
    with running_proxy(tmp_path, [RouteSpec(route("anthropic-api-key", api.url), fixed())], decoys=decoys,
                       max_connections=8) as running:
        yield running


def refused_request(proxy: RunningProxy) -> bytes:
    """A request the proxy refuses and records: a decoy in a header (a sign the agent went looking)."""
    decoy = next(iter(proxy.server.config.decoys.values()))
    placeholder = proxy.routes()["anthropic-api-key"].placeholder
    return (f"GET /r/anthropic-api-key/v1/models HTTP/1.1\r\nHost: x\r\nx-api-key: {placeholder}\r\n"
            f"x-stolen: {decoy}\r\n\r\n").encode()


def pipelined(port: int, request: bytes, count: int) -> int:
    """Send ``count`` requests on one connection without waiting, and count the answers."""
    answers = 0
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sender = threading.Thread(target=sock.sendall, args=(request * count,), daemon=True)
        sender.start()
        data = b""
        while answers < count:
            chunk = sock.recv(1 << 20)
            if not chunk:
                break
            data += chunk
            answers += data.count(b"HTTP/1.1 403 ")
            data = data[data.rfind(b"HTTP/1.1 403 ") + 1:] if b"HTTP/1.1 403 " in data else data[-16:]
        sender.join(30)
    return answers


def test_a_flood_of_refused_requests_writes_bounded_records_and_an_exact_total(proxy: RunningProxy,
                                                                               api: FakeAPI) -> None:
    started = time.monotonic()
    assert pipelined(proxy.port, refused_request(proxy), FLOOD) == FLOOD
    seconds = time.monotonic() - started
    proxy.loop.run(proxy.server.close())  # writes what was still counted
    violations, ledger = read_records(proxy.violations), read_records(proxy.ledger)
    assert total(violations) == FLOOD and total(ledger) == FLOOD and api.seen == []
    assert {v["kind"] for v in violations} == {"decoy-used"}
    written = proxy.violations.stat().st_size + proxy.ledger.stat().st_size
    # Per key and second: 10 records whole and one aggregate, in each file (one record each ~300 bytes).
    assert len(violations) <= 11 * (seconds + 2) and len(ledger) <= 11 * (seconds + 2)
    assert written < 2 * 11 * (seconds + 2) * 600, (written, seconds)
    print(f"{FLOOD} refused requests in {seconds:.1f} s: {len(violations)} violation records and {len(ledger)} "
          f"ledger entries, {written} bytes")
    aggregate = next(v for v in violations if "count" in v)
    assert isinstance(aggregate["count"], int), aggregate
    assert aggregate["count"] > 10 and "decoy credential" in str(aggregate["detail"])


def test_connections_past_the_budget_are_turned_away_and_recorded(proxy: RunningProxy, api: FakeAPI) -> None:
    held = []
    for _ in range(8):  # the budget: each connection proven open by an answer on it
        sock = socket.create_connection(("127.0.0.1", proxy.port), timeout=10)
        sock.sendall(refused_request(proxy))
        assert sock.recv(65536).startswith(b"HTTP/1.1 403 ")
        held.append(sock)
    try:
        answer = raw_exchange(proxy.port, refused_request(proxy))
        assert answer.startswith(b"HTTP/1.1 503 ") and b"already has 8 connections open" in answer
        assert [v["kind"] for v in read_records(proxy.violations)][-1] == "budget-exceeded"
        # One held connection asks to be closed: once its end of file arrives, the proxy has let it go.
        last = held.pop()
        last.sendall(refused_request(proxy).replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n"))
        while last.recv(65536):
            pass
        last.close()
        assert raw_exchange(proxy.port, refused_request(proxy)).startswith(b"HTTP/1.1 403 ")
    finally:
        for sock in held:
            sock.close()
