#!/usr/bin/env python3
"""The filter's resolver alone, on this host's loopback (mark 0, the set writer a counter, as in
tests/unit/filter/test_resolver.py), under dnsperf: how fast its Python is, with and without
cProfile, next to a bare UDP server on the same loop that answers from a dict of bytes (the
ceiling of this design on this box).

    python bench/resolver_loopback.py [--seconds S] [--profile]

The fake upstream (bench/dns.py's) runs on 127.0.0.1; dnsperf runs in the bench's tools image
with the host's network, and talks to 127.0.0.1 only. Nothing leaves the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import ipaddress
import os
import pstats
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import cast

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import dns  # noqa: E402
from bench.common import bench_env, docker  # noqa: E402
from dejima.core.egress import parse_policy  # noqa: E402
from dejima.filter.dns_upstream import Forwarder  # noqa: E402
from dejima.filter.dnsserver import start_servers  # noqa: E402
from dejima.filter.nft import SetWriter  # noqa: E402
from dejima.filter.resolver import PolicyResolver  # noqa: E402
from dejima.filter.setbatch import BatchedSets  # noqa: E402


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Ceiling:
    """Answers a known question from a dict of packed replies, id patched: no parsing, no policy;
    read as the resolver's UDP server reads (dnsserver.py: up to 64 datagrams a wake-up)."""

    def __init__(self, answers: dict[bytes, bytes], sock: socket.socket) -> None:
        self.answers, self.sock = answers, sock
        asyncio.get_running_loop().add_reader(sock.fileno(), self.readable)

    def readable(self) -> None:
        for _ in range(64):
            try:
                data, addr = self.sock.recvfrom(65535)
            except BlockingIOError:
                return
            reply = self.answers.get(data[12:].lower())
            if reply is not None:
                self.sock.sendto(data[:2] + reply, addr)


def serve(kind: str, upstream_port: int, ready: threading.Event, state: dict[str, object]) -> None:
    loop = asyncio.new_event_loop()

    async def main() -> None:
        stop = asyncio.Event()
        state["stop"] = (loop, stop)
        if kind == "ceiling":
            answers = {}
            for n in range(50):
                question = bytes(dns_question(f"q{n}.bench.test"))
                answers[question] = b"\x81\x80\x00\x01\x00\x01\x00\x00\x00\x00" + question + \
                    b"\xc0\x0c\x00\x01\x00\x01\x00\x00\x01\x2c\x00\x04" + bytes([10, 224, 0, n])
            sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            sock.setblocking(False)
            sock.bind(("127.0.0.1", 0))
            Ceiling(answers, sock)
            state["port"] = sock.getsockname()[1]
            ready.set()
            await stop.wait()
            loop.remove_reader(sock.fileno())
            sock.close()
            return
        policy = parse_policy(["*.bench.test"], [], answer_networks=(ipaddress.ip_network(dns.ANSWERS),))
        added = [0, 0]  # set elements inserted, nft transactions

        class CountingNft:  # the set writer's kernel side, counted (no nft on the host)
            def cmd(self, text: str) -> tuple[int, str, str]:
                added[0] += text.count(" timeout ")
                added[1] += 1
                return 0, "", ""

        state["added"] = added
        sets = BatchedSets(SetWriter("inet", "bench", handle=CountingNft()))
        resolver = PolicyResolver(policy, Forwarder(["127.0.0.1"], mark=0, port=upstream_port), sets, lambda r: None)
        async with asyncio.TaskGroup() as tasks:
            udp, tcp = await start_servers(resolver, tasks.create_task, port=0)
            state["port"] = tcp.sockets[0].getsockname()[1]
            ready.set()
            await stop.wait()
            udp.close()
            tcp.close()

    profiler = cProfile.Profile() if state.get("profile") else None
    if profiler:
        profiler.enable()
    loop.run_until_complete(main())
    if profiler:
        profiler.disable()
        state["profiler"] = profiler
    loop.close()


def dns_question(name: str) -> bytes:
    return b"".join(bytes([len(p)]) + p for p in name.encode().split(b".")) + b"\0\x00\x01\x00\x01"


def dnsperf(image: str, port: int, names: list[str], seconds: float) -> float:
    with tempfile.TemporaryDirectory() as work:
        (Path(work) / "q.txt").write_text("".join(f"{n} A\n" for n in names))
        Path(work).chmod(0o755)
        out = docker("run", "--rm", "--network", "host", "-v", f"{work}:/q:ro", image, "dnsperf", "-s", "127.0.0.1",
                     "-p", str(port), "-d", "/q/q.txt", "-l", f"{seconds:g}", "-q", "100",
                     "-n", "1000000" if len(names) <= 1000 else "1",
                     timeout=seconds + 60)
    if not re.search(r"NOERROR \d+ \(100", out):
        raise RuntimeError(f"answers were not all NOERROR:\n{out}")
    return float(re.search(r"Queries per second:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]


def measure(kind: str, mode: str, image: str, upstream_port: int, seconds: float, profile: bool) -> float:
    ready, state = threading.Event(), {"profile": profile}
    thread = threading.Thread(target=serve, args=(kind, upstream_port, ready, state), daemon=True)
    thread.start()
    assert ready.wait(10)
    port = int(str(state["port"]))
    hot = [f"q{n}.bench.test" for n in range(50)]
    if mode == "hit":
        dnsperf(image, port, hot, 1)  # warm
        qps = dnsperf(image, port, hot, seconds)
    else:
        qps = dnsperf(image, port, [f"q{n}.bench.test" for n in range(100, 100 + int(seconds * 30000))], seconds)
    if "added" in state:
        elements, transactions = cast(list[int], state["added"])
        print(f"  set inserts: {elements} elements in {transactions} transactions")
    loop, stop = cast(tuple[asyncio.AbstractEventLoop, asyncio.Event], state["stop"])
    loop.call_soon_threadsafe(stop.set)
    thread.join(10)
    if profile and "profiler" in state:
        text = io.StringIO()
        pstats.Stats(state["profiler"], stream=text).sort_stats("tottime").print_stats(18)  # type: ignore[arg-type]
        print(f"--- cProfile, {kind} {mode} (tottime) ---")
        print("\n".join(line[:150] for line in text.getvalue().splitlines()[6:30]))
    return qps


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=5)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    upstream_port = free_port()
    with bench_env() as env:
        with env.applied():
            from dejima.adapters import host
            from dejima.adapters.image_builds import find_base
            from dejima.adapters.runtime import connect

            base = find_base(connect(), host.load_settings())
        assert base is not None, "no base image: dejima images build"
        image = dns.tools_image(base.ref)
        upstream = subprocess.Popen([sys.executable, "-c", dns.UPSTREAM, "127.0.0.1", str(upstream_port)],
                                    stdout=subprocess.PIPE, text=True, start_new_session=True)
        try:
            assert upstream.stdout is not None and "listening" in upstream.stdout.readline()
            for kind, mode in (("resolver", "miss"), ("resolver", "hit"), ("ceiling", "hit")):
                qps = measure(kind, mode, image, upstream_port, args.seconds, args.profile)
                print(f"{kind:8s} {mode:4s} {qps:9.0f} q/s{' (under cProfile)' if args.profile else ''}", flush=True)
        finally:
            os.killpg(upstream.pid, signal.SIGTERM)  # its own group: the upstream and the workers it forked
            upstream.wait(10)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
