#!/usr/bin/env python3
"""Credential proxy: throughput, request rate, streaming delay and memory, as ratios against same-run anchors.

    .venv/bin/python -m bench.proxy [--quick]          (bench/run runs it too: --only proxy)

One upstream process on loopback (plain HTTP, and TLS with a certificate for ``localhost``) serves a
bulk body, a 100-byte body and a slow SSE stream. The ways to it:

- direct (plain and TLS);
- dejima's proxy in its own process: the plain-HTTP route (``/r/bench/...``, header swap) and the TLS
  fallback (TLS to ``bench.test`` with a leaf of a session CA, SNI routing, header swap, then TLS to the
  upstream, verified);
- tinyproxy (a C forward proxy), anchor for the plain route;
- mitmproxy in reverse mode (TLS in with its own CA, a header rewritten, TLS out, verified), anchor
  for the TLS fallback; from ``.venv-mitm/bin/mitmdump``, ``$DEJIMA_BENCH_MITMDUMP`` or the PATH.

Every way is measured by the same clients in this process (sequential keep-alive GETs; curl for
bulk), alternated round by round. Goals: plain bulk and requests/s at least tinyproxy's; TLS
fallback requests/s at least 3 × mitmproxy's; first streamed event within 5 ms of direct; the proxy
process at most 64 MiB resident after the load.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path

from bench.common import REPO, Row, alternate, load, median
from bench.proxywire import UPSTREAM, Way, bulk, first_event_delay, free_port, rss_mib, small, start, wait_port

PLACEHOLDER, TLS_PLACEHOLDER = "sk-ant-api03-benchplaceholder", "sk-ant-api03-benchplaceholdertls"
INTERCEPTED = "bench.test"

PROXY = r'''
import asyncio, sys
from pathlib import Path
from dejima.core.credentials import Route, parse_upstream
from dejima.core.secret import Secret
from dejima.proxy.authority import SessionAuthority
from dejima.proxy.intercept import Interception
from dejima.proxy.routes import RouteSpec
from dejima.proxy.server import ProxyConfig, ProxyServer
from dejima.proxy.sources import FixedSource
up, up_tls, port, tls_port, work, upstream_ca, host = sys.argv[1:8]
plain = Route("bench", parse_upstream(f"http://127.0.0.1:{up}", "bench"), "x-api-key", "raw", sys.argv[8])
tls = Route("bench-tls", parse_upstream(f"https://localhost:{up_tls}", "bench-tls"), "x-api-key", "raw", sys.argv[9])
async def main():
    authority = SessionAuthority.create([host])
    Path(work, "dejima-ca.pem").write_text(authority.ca_pem)
    secret = FixedSource("bench", Secret("real-bench-key"))
    config = ProxyConfig((RouteSpec(plain, secret), RouteSpec(tls, secret)), Path(work, "ledger.jsonl"),
                         Path(work, "violations.jsonl"), extra_ca_file=upstream_ca,
                         interception=Interception(authority, {host: "bench-tls"}))
    server = ProxyServer(config)
    await server.start(None, "127.0.0.1", int(port), tls_tcp_port=int(tls_port))
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


def mitmdump() -> str | None:
    for candidate in (os.environ.get("DEJIMA_BENCH_MITMDUMP"), str(REPO / ".venv-mitm" / "bin" / "mitmdump"),
                      shutil.which("mitmdump")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


def upstream_certificate(work: Path) -> tuple[str, str, str]:
    """(cert, key, CA) for the upstream's ``localhost``, made by the same code as a session CA."""
    from cryptography.hazmat.primitives import serialization

    from dejima.proxy.authority import SessionAuthority, pem

    authority = SessionAuthority.create(["localhost"], "bench upstream CA")
    key, cert = authority.leaf("localhost")
    paths = work / "upstream.pem", work / "upstream.key", work / "upstream-ca.pem"
    paths[0].write_text(pem(cert))
    paths[1].write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    paths[2].write_text(authority.ca_pem)
    return str(paths[0]), str(paths[1]), str(paths[2])


class World:
    """The running processes and the ways to the upstream; ``pids`` for memory readings."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.ways: dict[str, Way] = {}
        self.pids: dict[str, int] = {}
        self.procs: list[subprocess.Popen[str] | subprocess.Popen[bytes]] = []

    def add(self, way: Way, proc: subprocess.Popen[str] | subprocess.Popen[bytes] | None = None) -> None:
        self.ways[way.name] = way
        if proc is not None:
            self.pids[way.name] = proc.pid


@contextmanager
def world(bulk_mib: int) -> Iterator[World]:
    work = Path(tempfile.mkdtemp(prefix="dejima-bench-proxy-"))
    found = World(work)
    up, up_tls, port, tls_port, tiny, mitm = (free_port() for _ in range(6))
    cert, key, upstream_ca = upstream_certificate(work)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    try:
        found.procs.append(start([sys.executable, "-c", UPSTREAM, str(up), str(bulk_mib)]))
        found.procs.append(start([sys.executable, "-c", UPSTREAM, str(up_tls), str(bulk_mib), cert, key]))
        found.add(Way("direct", up, ""))
        found.add(Way("direct TLS", up_tls, "", host="localhost", cafile=upstream_ca))
        proxy = start([sys.executable, "-c", PROXY, str(up), str(up_tls), str(port), str(tls_port), str(work),
                       upstream_ca, INTERCEPTED, PLACEHOLDER, TLS_PLACEHOLDER], env=env)
        found.procs.append(proxy)
        found.add(Way("dejima", port, "/r/bench", f"x-api-key: {PLACEHOLDER}\r\n"), proxy)
        found.add(Way("dejima TLS", tls_port, "", f"x-api-key: {TLS_PLACEHOLDER}\r\n", INTERCEPTED,
                      str(work / "dejima-ca.pem")), proxy)
        if shutil.which("tinyproxy"):
            (work / "tinyproxy.conf").write_text(TINYPROXY_CONF.format(port=tiny, dir=work))
            found.procs.append(subprocess.Popen(["tinyproxy", "-d", "-c", str(work / "tinyproxy.conf")],
                                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            wait_port(tiny)
            found.add(Way("tinyproxy", tiny, f"http://127.0.0.1:{up}"), found.procs[-1])
        if (program := mitmdump()) is not None:
            found.procs.append(subprocess.Popen(
                [program, "-q", "--mode", f"reverse:https://localhost:{up_tls}", "--listen-host", "127.0.0.1",
                 "--listen-port", str(mitm), "--set", f"confdir={work / 'mitm'}", "--set",
                 f"ssl_verify_upstream_trusted_ca={upstream_ca}", "--modify-headers", "/~q/x-api-key/real-bench-key"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            wait_port(mitm)
            found.add(Way("mitmproxy", mitm, "", f"x-api-key: {TLS_PLACEHOLDER}\r\n", INTERCEPTED,
                          str(work / "mitm" / "mitmproxy-ca-cert.pem")), found.procs[-1])
        yield found
    finally:
        for proc in found.procs:
            proc.terminate()
            proc.wait(10)
        shutil.rmtree(work, ignore_errors=True)


def _rate(way: Way, count: int) -> float:
    return small(way, count)[0]


def measure(found: World, quick: bool) -> dict[str, dict[str, float]]:
    """Per way: bulk MB/s, small requests/s, first-event delay (ms); RSS (MiB) of the proxies."""
    rounds, requests, streams, reps = (3, 300, 10, 1) if quick else (5, 2000, 40, 3)
    ways = found.ways
    results: dict[str, dict[str, float]] = {name: {} for name in ways}
    for name, pid in found.pids.items():
        results[name]["rss idle"] = rss_mib(pid)
    rates = alternate({n: partial(_rate, w, requests // rounds) for n, w in ways.items()}, rounds)
    speeds = alternate({n: partial(bulk, w, 1) for n, w in ways.items()}, reps)
    delays = alternate({n: partial(first_event_delay, w, max(1, streams // rounds)) for n, w in ways.items()}, rounds)
    for name in ways:
        results[name].update({"small": median(rates[name]), "bulk": median(speeds[name]),
                              "first event": median(delays[name])})
    for name, pid in found.pids.items():
        results[name]["rss after"] = rss_mib(pid)
    return results


def rows(results: dict[str, dict[str, float]], loads: list[float]) -> list[Row]:
    d, dt = results["dejima"], results["dejima TLS"]
    tiny, mitm = results.get("tinyproxy", {}), results.get("mitmproxy", {})
    plain_note = f"direct {results['direct']['bulk']:,.0f} MB/s, {results['direct']['small']:,.0f} req/s"
    tls_note = f"direct TLS {results['direct TLS']['bulk']:,.0f} MB/s, {results['direct TLS']['small']:,.0f} req/s"
    return [
        Row("proxy: plain route, bulk", "MB/s", d["bulk"], tiny.get("bulk"), "tinyproxy", 1.0, "higher",
            note=plain_note, load=loads),
        Row("proxy: plain route, small keep-alive requests", "req/s", d["small"], tiny.get("small"), "tinyproxy",
            1.0, "higher", load=loads),
        Row("proxy: first streamed event, over direct", "ms", d["first event"] - results["direct"]["first event"],
            results["direct"]["first event"], "direct", 5.0, absolute=True, load=loads),
        Row("proxy: TLS fallback, small keep-alive requests", "req/s", dt["small"], mitm.get("small"), "mitmproxy",
            3.0, "higher", note=tls_note, load=loads),
        Row("proxy: TLS fallback, bulk", "MB/s", dt["bulk"], mitm.get("bulk"), "mitmproxy", 1.0, "higher",
            load=loads),
        Row("proxy: TLS fallback, first streamed event, over direct TLS", "ms",
            dt["first event"] - results["direct TLS"]["first event"], results["direct TLS"]["first event"],
            "direct TLS", 5.0, absolute=True, load=loads),
        Row("proxy: resident memory after the load", "MiB", d["rss after"], mitm.get("rss after"), "mitmproxy",
            64.0, absolute=True, note=f"idle {d['rss idle']:.1f} MiB (mitmproxy {mitm.get('rss idle', 0):.1f}); "
            "the proxy alone in a Python process (in a session it is a thread of the launcher)", load=loads),
    ]


def run(quick: bool) -> list[Row]:
    before = load()
    with world(64 if quick else 256) as found:
        results = measure(found, quick)
    return rows(results, [before, load()])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer requests and a smaller bulk body")
    args = parser.parse_args()
    before = load()
    with world(64 if args.quick else 256) as found:
        missing = {"tinyproxy", "mitmproxy"} - set(found.ways)
        if missing:
            print(f"not installed, rows left without an anchor: {', '.join(sorted(missing))} "
                  "(apt-get install tinyproxy; python3 -m venv .venv-mitm && .venv-mitm/bin/pip install mitmproxy)")
        results = measure(found, args.quick)
    for name, values in results.items():
        print(f"{name:11s} " + "   ".join(f"{k} {v:,.2f}" for k, v in values.items()))
    from bench.__main__ import table

    print()
    print(table(rows(results, [before, load()])))


if __name__ == "__main__":
    main()
