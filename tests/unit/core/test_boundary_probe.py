"""The session probe of `dejima doctor --session`, run for real on loopback (no session): each action's result as
the checks read it, the resolver's refusal read with dejima-why's own code, and its output found among noise."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dejima.core.boundary_probe import PROBE, parse_probe
from dejima.filter import dns_wire, why
from dejima.filter.query import read

WHY = str(Path(why.__file__))


def run_probe(actions: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    done = subprocess.run([sys.executable, "-I", "-c", PROBE, json.dumps(actions), "2", WHY],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return parse_probe(done.stdout)


@pytest.fixture
def resolver() -> Iterator[int]:
    """A resolver on loopback that refuses every question as denied, the way the filter's does (its EDE)."""
    server = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    server.bind(("127.0.0.1", 0))
    server.settimeout(10)

    def answer() -> None:
        try:
            packet, peer = server.recvfrom(4096)
        except OSError:
            return
        found = read(packet)
        assert found is not None
        server.sendto(dns_wire.reply(found[0], 5, ede=why.ede(why.DENIED, "a test says no")), peer)

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    server.close()
    thread.join(timeout=10)


def closed_port(kind: int) -> int:
    s = socket.socket(socket.AF_INET, kind)
    s.bind(("127.0.0.1", 0))
    port = int(s.getsockname()[1])
    s.close()
    return port


def test_connections_answer_or_are_refused_at_once() -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    with listener:
        found = run_probe({"open": {"op": "tcp", "host": "127.0.0.1", "port": listener.getsockname()[1]},
                           "closed": {"op": "tcp", "host": "127.0.0.1", "port": closed_port(socket.SOCK_STREAM)},
                           "loopback": {"op": "loopback"}})
    assert found["open"]["result"] == found["loopback"]["result"] == "connected"
    assert found["closed"]["result"] == "blocked" and found["closed"]["error"] == "Connection refused"


def test_a_refusal_of_the_resolver_is_read_with_its_kind_and_reason(resolver: int) -> None:
    found = run_probe({"asked": {"op": "dns", "name": "bad.example.com", "server": "127.0.0.1", "port": resolver,
                                 "tcp": False},
                       "nobody": {"op": "dns", "name": "x.example.com", "server": "127.0.0.1",
                                  "port": closed_port(socket.SOCK_DGRAM), "tcp": False}})
    assert found["asked"] == {"result": "answered", "rcode": 5, "kind": "denied", "reason": "a test says no",
                              "addresses": []}
    assert found["nobody"]["result"] == "blocked"  # nothing listens: refused at once, not silence


def test_the_probe_is_read_from_its_last_object() -> None:
    assert parse_probe('noise\n{"a": {"result": "x"}}\n') == {"a": {"result": "x"}}
    assert parse_probe("Traceback ...\n") == {}
    assert parse_probe('{"a": {"r": 1}}\n{broken\n') == {"a": {"r": 1}}
