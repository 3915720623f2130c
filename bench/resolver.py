#!/usr/bin/env python3
"""DNS answer latency through the filter's resolver, with and without the nft set update, and
the filter's memory; against the fake authority queried directly, in the same run.

    python bench/resolver.py [--queries N]

Builds the test world of tests/networld.py (a private network, a fake authoritative DNS and a
decoy), then from inside a session: N sequential A queries for an allowed name (forwarded, and
the answer's address added to the nft set before the reply; distinct names, distinct addresses)
and N TXT queries (forwarded,
no set update). The baseline is the same N A queries sent straight to the fake authority from an
unfiltered container. Prints medians and ratios. Traffic stays on the world's network.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from dejima import host  # noqa: E402
from dejima.core import labels  # noqa: E402
from dejima.core.settings import Settings  # noqa: E402
from dejima.imaging import ensure_image, recipes, resolve_base  # noqa: E402
from dejima.runtime import connect  # noqa: E402
from dejima.ui.console import UI  # noqa: E402
from tests.networld import build_world, remove_world  # noqa: E402

TIMER = r"""
import json, socket, struct, sys, time
server, name, qtype, count = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
def encode(name):
    return b"".join(bytes([len(p)]) + p for p in name.encode().split(b".")) + b"\0"
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(3); s.connect((server, 53))
times = []
for i in range(count):
    qname = encode(name.replace("{i}", str(i)))
    packet = struct.pack("!HHHHHH", i & 0xFFFF, 0x0100, 1, 0, 0, 0) + qname + struct.pack("!HH", qtype, 1)
    t = time.perf_counter(); s.send(packet); s.recv(4096); times.append(time.perf_counter() - t)
print(json.dumps(times))
"""


def median_ms(output: str) -> float:
    line = [ln for ln in output.splitlines() if ln.startswith("[")][-1]
    return statistics.median(json.loads(line)) * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--queries", type=int, default=200, help="at most 200: one address each")
    args = parser.parse_args()
    runtime, ui, settings = connect(), UI(quiet=True), Settings()
    base = resolve_base(runtime, settings, ui)
    filter_image, session_image = (ensure_image(runtime, r, ui) for r in recipes(base, settings, host.identity()))
    scope = f"bench-{os.getpid()}"
    workdir = Path(tempfile.mkdtemp(prefix="dejima-bench-"))  # the session's workspace; removed below
    world = build_world(runtime, scope, filter_image, session_image, workdir)
    try:
        n = str(args.queries)
        direct = runtime.client.containers.run(
            session_image, ["python3", "-c", TIMER, world.dns, "n{i}.many.dejima.test", "1", n],
            network=world.network, remove=True).decode()
        env = dict(os.environ, DEJIMA_SETTINGS=str(world.settings), DEJIMA_SCOPE=scope)
        # Distinct names with distinct addresses: every A answer is a real set insertion.
        script = (f"python3 -c '{TIMER}' 127.0.0.1 'n{{i}}.many.dejima.test' 1 {n}; "
                  f"python3 -c '{TIMER}' 127.0.0.1 txt.dejima.test 16 {n}; echo measured; sleep 30")
        process = subprocess.Popen(
            [sys.executable, "-m", "dejima", "-q", "--allow", "*.many.dejima.test", "--allow", "txt.dejima.test",
             str(workdir), "--",
             "sh", "-c", script],
            env=env, stdout=subprocess.PIPE, text=True, cwd=str(REPO))
        assert process.stdout is not None
        lines = []
        for line in process.stdout:
            lines.append(line)
            if line.startswith("measured"):
                break
        (filter_id,) = [c.id for c in runtime.containers({labels.SCOPE: scope, labels.ROLE: labels.ROLE_FILTER})]
        stats = runtime.api.stats(filter_id, stream=False)["memory_stats"]
        process.terminate()
        process.wait(timeout=60)
        with_set, without_set = (median_ms(line) for line in lines if line.startswith("["))
        base_ms = median_ms(direct)
        rss = stats.get("stats", {}).get("rss") or stats.get("stats", {}).get("anon") or stats.get("usage", 0)
        print(f"direct to the authority (baseline):   median {base_ms:.3f} ms")
        print(f"through dejima, A (nft set update):   median {with_set:.3f} ms  ({with_set / base_ms:.2f} x baseline)")
        print(f"through dejima, TXT (no set update):  median {without_set:.3f} ms  ({without_set / base_ms:.2f} x)")
        print(f"set update share: {with_set - without_set:.3f} ms per answer")
        print(f"filter memory: rss {rss / 2**20:.1f} MiB (cgroup usage {stats.get('usage', 0) / 2**20:.1f} MiB)")
    finally:
        remove_world(runtime, scope, world)
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
