#!/usr/bin/env python3
"""Where the filter's resolver spends its time under load: py-spy on the real filter of a real
session, while dnsperf sends cache misses, then cache hits (the world of bench/dns.py).

    python bench/profile_resolver.py [--seconds S]      (needs py-spy: pip install py-spy)

Prints, for each load, the functions with the most samples on the CPU (self) and on the stack
(inclusive), and writes the raw stacks to bench/results/resolver-{miss,hit}.txt (flamegraph input).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import dns  # noqa: E402
from bench.common import REPO, bench_env, docker  # noqa: E402


def filter_pid(container: str) -> int:
    for line in docker("top", container, "-eo", "pid,args").splitlines()[1:]:
        pid, args = line.split(None, 1)
        if "dejima.filter" in args:
            return int(pid)
    raise RuntimeError("no dejima.filter process in the filter container")


def profile(pid: int, seconds: float, out: Path, load: threading.Thread) -> Counter[str]:
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    recorder = subprocess.Popen([spy, "record", "-p", str(pid), "-d", f"{seconds:g}", "-r", "250", "-f", "raw",
                                 "-o", str(out), "--nonblocking"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    load.start()
    load.join()
    recorder.wait(timeout=seconds + 60)
    return Counter({line.rsplit(" ", 1)[0]: int(line.rsplit(" ", 1)[1])
                    for line in out.read_text().splitlines() if line.strip()})


def summary(stacks: Counter[str], top: int = 22) -> str:
    total = sum(stacks.values()) or 1
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    for stack, count in stacks.items():
        frames = stack.split(";")
        own[frames[-1]] += count
        for frame in set(frames):
            inclusive[frame] += count
    lines = [f"{total} samples", "self (on the CPU):"]
    lines += [f"  {100 * n / total:5.1f} %  {frame}" for frame, n in own.most_common(top)]
    lines.append("inclusive (on the stack), dejima's and dnslib's frames:")
    lines += [f"  {100 * n / total:5.1f} %  {frame}" for frame, n in inclusive.most_common(200)
              if "dejima" in frame or "dnslib" in frame][:top]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=8)
    args = parser.parse_args()
    out = REPO / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    names = dns.Names()
    hot = [f"q{n}.bench.test" for n in range(50)]
    with bench_env() as env, dns.world(env) as (network, upstream, image):
        env.settings.write_text(f'[session]\nnetwork = "{network}"\n\n[network]\nupstream_dns = ["{upstream}"]\n'
                                f'answer_networks = ["{dns.ANSWERS}"]\n')
        with dns.dejima_session(env) as filter_id:
            side = dns.Side("dejima", filter_id, dns.client(env, image, filter_id), ("dejima", "allow4"))
            pid = filter_pid(filter_id)
            dns.dnsperf(side, hot, 1, 10, env.root)
            for name, queries in (("miss", names.fresh(int(args.seconds * 20000))), ("hit", hot)):
                result: dict[str, float] = {}

                def load(queries: list[str] = queries, result: dict[str, float] = result) -> None:
                    result.update(dns.dnsperf(side, queries, args.seconds, 100, env.root))

                stacks = profile(pid, args.seconds, out / f"resolver-{name}.txt", threading.Thread(target=load))
                print(f"== cache {name}es: {result.get('qps', 0):.0f} q/s under py-spy (sampling slows it)")
                print(summary(stacks))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
