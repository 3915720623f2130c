"""The filter's resolver against dnsmasq with --nftset, on the same box, with the same upstream.

Everything runs on a network this benchmark makes, with a fake upstream it makes (a small UDP
authority in a container: ``qN.bench.test`` -> 10.224.0.0 + N, one distinct address per name, so
every answer is a real set insertion; no outside resolver is ever asked). dnsmasq 2.90 (Debian's)
runs in a container with its own nft table and set; dejima's filter is the one a real session
starts (`dejima --allow '*.bench.test' WS -- sleep`). The load comes from dnsperf (Debian's), run
in a client container that joins the server's network namespace and asks 127.0.0.1, as a session
does. Sides alternate; each run is checked (answers NOERROR, the nft set grew by the names asked).
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from bench.common import DEJIMA, Env, Row, dejima_images, docker, load, median
from dejima.filter.__main__ import PRUNE_SECONDS
from dejima.filter.nft import SetWriter
from dejima.filter.resolver import TTL_FLOOR

SUBNET_THIRD = 199  # the bench network is 10.199.N.0/24 with N random; answers are in 10.224.0.0/11
ANSWERS = "10.224.0.0/11"
TOOLS_DOCKERFILE = """\
FROM {base}
RUN apt-get update \\
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends dnsmasq-base dnsperf nftables python3 \\
 && rm -rf /var/lib/apt/lists/*
"""

# The fake upstream: answers A for qN.bench.test with 10.224.0.0 + N (TTL 30 s), NXDOMAIN otherwise.
UPSTREAM = r"""
import os, socket, struct, sys
base = int.from_bytes(socket.inet_aton("10.224.0.0"), "big")
TTL = 30  # short, as the sets' floor is (AFTER_SECONDS)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
s.bind((sys.argv[1], int(sys.argv[2])) if len(sys.argv) > 2 else ("0.0.0.0", 53))
for _ in range(2):
    if os.fork() == 0:
        break
print("upstream: listening", flush=True)
while True:
    data, peer = s.recvfrom(4096)
    if len(data) < 17:
        continue
    end = 12
    labels = []
    while end < len(data) and data[end]:
        labels.append(data[end + 1:end + 1 + data[end]])
        end += 1 + data[end]
    question = data[12:end + 5]
    qtype = struct.unpack("!H", data[end + 1:end + 3])[0]
    first = labels[0] if labels else b""
    known = labels[1:] == [b"bench", b"test"] and first[:1] == b"q" and first[1:].isdigit()
    header = data[:2] + struct.pack("!HHHHH", 0x8180 if known else 0x8183, 1, int(known and qtype == 1), 0, 0)
    answer = b""
    if known and qtype == 1:
        address = struct.pack("!I", base + int(first[1:]) % (1 << 21))
        answer = b"\xc0\x0c" + struct.pack("!HHIH", 1, 1, TTL, 4) + address
    s.sendto(header + question + answer, peer)
"""

# One query at a time; prints the round-trip seconds of each, and the rcodes seen.
LATENCY = r"""
import json, socket, struct, sys, time
names = sys.argv[1].split(",")
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(3); s.connect(("127.0.0.1", 53))
times, rcodes = [], {}
for i, name in enumerate(names):
    q = b"".join(bytes([len(p)]) + p for p in name.encode().split(b".")) + b"\0"
    packet = struct.pack("!HHHHHH", i & 0xFFFF, 0x0100, 1, 0, 0, 0) + q + struct.pack("!HH", 1, 1)
    t = time.perf_counter(); s.send(packet); data = s.recv(4096); times.append(time.perf_counter() - t)
    rcodes[data[3] & 15] = rcodes.get(data[3] & 15, 0) + 1
print(json.dumps({"times": times, "rcodes": rcodes}))
"""

# Idle after the load until every answer has expired and left the filter's maps: the sets keep an
# address at least TTL_FLOOR seconds (whatever the TTL), the set writer MARGIN_SECONDS more, and the
# filter prunes every PRUNE_SECONDS.
AFTER_SECONDS = int(TTL_FLOOR + SetWriter.MARGIN_SECONDS + 2 * PRUNE_SECONDS)
NFT_TABLE = "table inet bench { set allow4 { type ipv4_addr; flags timeout; }; }"


@dataclass
class Side:
    name: str
    server: str  # the container whose namespace answers on 127.0.0.1:53
    client: str  # a tools container in that namespace, for dnsperf and the latency probe
    set_ref: tuple[str, str]  # (table, set) to count
    samples: dict[str, list[float]] = field(default_factory=dict)

    def add(self, key: str, value: float | list[float]) -> None:
        self.samples.setdefault(key, []).extend(value if isinstance(value, list) else [value])


def tools_image(base: str) -> str:
    text = TOOLS_DOCKERFILE.format(base=base)
    tag = f"dejima-bench/tools:{hashlib.sha256(text.encode()).hexdigest()[:12]}"  # rebuilt when the base tag moves
    if docker("images", "-q", tag):
        return tag
    subprocess.run(["docker", "build", "-q", "-t", tag, "--label", "dejima.bench=tools", "-"], input=text,
                   text=True, check=True, stdout=subprocess.DEVNULL)
    return tag


def set_size(container: str, table: str, name: str) -> int:
    listing = json.loads(docker("exec", container, "nft", "-j", "list", "set", "inet", table, name))
    for item in listing["nftables"]:
        if "set" in item:
            return len(item["set"].get("elem", []))
    raise RuntimeError(f"no set {table}/{name} in {container}")


def rss_mib(container: str) -> float:
    """Resident memory of every process of the container (docker top), in MiB."""
    lines = docker("top", container, "-eo", "pid,rss").splitlines()[1:]
    return sum(int(line.split()[1]) for line in lines) / 1024


def dnsperf(side: Side, names: list[str], seconds: float, outstanding: int, root: Path,
            server: str = "127.0.0.1") -> dict[str, float]:
    """dnsperf for ``seconds`` (or until the names are used up once, when they are fresh names: a
    second pass would ask them again and count cache hits as misses)."""
    passes = "1000000" if len(names) <= 1000 else "1"
    queries = root / f"q-{side.name}.txt"
    queries.write_text("".join(f"{n} A\n" for n in names))
    queries.chmod(0o644)
    docker("cp", str(queries), f"{side.client}:/tmp/queries.txt")
    out = docker("exec", side.client, "dnsperf", "-s", server, "-d", "/tmp/queries.txt", "-l", f"{seconds:g}",
                 "-q", str(outstanding), "-n", passes, timeout=seconds + 60)
    found = {key: float(re.search(pattern, out).group(1)) for key, pattern in {  # type: ignore[union-attr]
        "sent": r"Queries sent:\s+(\d+)", "completed": r"Queries completed:\s+(\d+)",
        "lost": r"Queries lost:\s+(\d+)", "qps": r"Queries per second:\s+([\d.]+)",
        "latency": r"Average Latency \(s\):\s+([\d.]+)"}.items()}
    noerror = re.search(r"NOERROR (\d+)", out)
    found["noerror"] = float(noerror.group(1)) if noerror else 0.0
    if found["completed"] == 0 or found["noerror"] < 0.99 * found["completed"]:
        raise RuntimeError(f"{side.name}: answers were not NOERROR (a refusal is not a success):\n{out}")
    return found


def latency(side: Side, names: list[str]) -> list[float]:
    result = json.loads(docker("exec", side.client, "python3", "-c", LATENCY, ",".join(names), timeout=120))
    if set(result["rcodes"]) != {"0"}:
        raise RuntimeError(f"{side.name}: one-at-a-time answers were not all NOERROR: {result['rcodes']}")
    return [t * 1000 for t in result["times"]]


class Names:
    """Fresh qN.bench.test names (never asked before in this run: each one a cache miss)."""

    def __init__(self) -> None:
        self.next = 1

    def fresh(self, count: int) -> list[str]:
        start, self.next = self.next, self.next + count
        return [f"q{n}.bench.test" for n in range(start, start + count)]


@contextmanager
def world(env: Env) -> Iterator[tuple[str, str, str]]:
    """The bench network, the fake upstream on it, and the tools image: (network, upstream, image)."""
    import random

    from dejima.adapters.image_builds import find_base
    from dejima.adapters.runtime import connect

    with env.applied():
        from dejima.adapters import host

        base = find_base(connect(), host.load_settings())
    if base is None:
        raise RuntimeError("no base image: run `dejima images build` first")
    image = tools_image(base.ref)
    third = random.randint(16, 250)
    network = f"dejima-bench-{env.scope}"
    docker("network", "create", "--subnet", f"10.{SUBNET_THIRD}.{third}.0/24", "--label",
           f"dejima.scope={env.scope}", network)
    upstream = f"10.{SUBNET_THIRD}.{third}.2"
    docker("run", "-d", "--label", f"dejima.scope={env.scope}", "--network", network, "--ip", upstream, image,
           "python3", "-u", "-c", UPSTREAM)
    yield network, upstream, image


def client(env: Env, image: str, namespace_of: str) -> str:
    return docker("run", "-d", "--label", f"dejima.scope={env.scope}", "--network", f"container:{namespace_of}",
                  "--entrypoint", "sleep", image, "infinity")


def start_dnsmasq(env: Env, image: str, network: str, upstream: str) -> str:
    script = (f"nft '{NFT_TABLE}' && exec dnsmasq -k --conf-file=/dev/null --no-resolv --no-hosts --user=root "
              f"--bind-interfaces --listen-address=127.0.0.1 --server={upstream} --cache-size=10000 "
              "--nftset=/bench.test/4#inet#bench#allow4 --log-facility=/dev/null")
    return docker("run", "-d", "--label", f"dejima.scope={env.scope}", "--cap-add", "NET_ADMIN", "--network",
                  network, "--entrypoint", "sh", image, "-c", script)


@contextmanager
def dejima_session(env: Env) -> Iterator[str]:
    """A real session (sleeping) whose filter answers the load; yields the filter's container id."""
    workspace = env.workspace("dns")
    dejima_images(env, workspace)  # built now if missing, not while the launcher waits
    launcher = subprocess.Popen([*DEJIMA, "-q", "--allow", "*.bench.test", str(workspace), "--", "sleep", "900"],
                                env=env.vars, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and launcher.poll() is None:
            running = docker("ps", "-q", "--filter", f"label=dejima.scope={env.scope}",
                             "--filter", "label=dejima.role=session")
            if running:
                break
            time.sleep(0.2)  # bounded poll for a container another process starts
        filters = docker("ps", "-q", "--no-trunc", "--filter", f"label=dejima.scope={env.scope}",
                         "--filter", "label=dejima.role=filter").split()
        if launcher.poll() is not None or len(filters) != 1:
            raise RuntimeError(f"the dejima session did not start: {launcher.stderr.read() if launcher.stderr else ''}")
        yield filters[0]
    finally:
        launcher.terminate()  # the launcher tears its session down on SIGTERM
        try:
            launcher.wait(timeout=60)
        except subprocess.TimeoutExpired:
            launcher.kill()


def run(env: Env, reps: int, seconds: float) -> tuple[list[Row], dict[str, dict[str, list[float]]]]:
    names = Names()
    hot = [f"q{n}.bench.test" for n in range(50)]  # the repeated names (cache hits after a warm-up)
    with world(env) as (network, upstream, image):
        env.settings.write_text(f'[session]\nnetwork = "{network}"\n\n[network]\nupstream_dns = ["{upstream}"]\n'
                                f'answer_networks = ["{ANSWERS}"]\n')
        masq = start_dnsmasq(env, image, network, upstream)
        with dejima_session(env) as filter_id:
            sides = [Side("dnsmasq", masq, client(env, image, masq), ("bench", "allow4")),
                     Side("dejima", filter_id, client(env, image, filter_id), ("dejima", "allow4"))]
            # The upstream asked directly (from dnsmasq's namespace): it must be far faster than both sides.
            direct = dnsperf(sides[0], names.fresh(40000), 2, 100, env.root, server=upstream)["qps"]
            for side in sides:
                side.add("rss idle", rss_mib(side.server))
                dnsperf(side, hot, 1, 10, env.root)  # warm the repeated names
            before = load()
            for rep in range(reps):
                for side in sides if rep % 2 == 0 else reversed(sides):
                    measure_side(side, names, hot, seconds, env.root)
            time.sleep(AFTER_SECONDS)  # idle until every answer has expired: did the memory come back?
            for side in sides:
                side.add("rss after", rss_mib(side.server))
            after = load()
    return rows(sides, [before, after], direct), {s.name: s.samples for s in sides}


def measure_side(side: Side, names: Names, hot: list[str], seconds: float, root: Path) -> None:
    # Both sets start each run empty: an insert's cost may grow with the set, and dnsmasq, being
    # faster, would otherwise run on a bigger set than dejima. The names are fresh, so nothing is lost.
    docker("exec", side.server, "nft", "flush", "set", "inet", *side.set_ref)
    grown_from = set_size(side.server, *side.set_ref)
    peak: list[float] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.5):
            peak.append(rss_mib(side.server))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        miss = dnsperf(side, names.fresh(int(seconds * 20000)), seconds, 100, root)
    finally:
        stop.set()
        sampler.join()
    grown = set_size(side.server, *side.set_ref) - grown_from
    if grown < 0.99 * miss["noerror"]:
        raise RuntimeError(f"{side.name}: {miss['noerror']:.0f} answers but the nft set grew by {grown}")
    side.add("miss qps", miss["qps"])
    side.add("set growth", float(grown))
    side.add("rss under load", max(peak, default=rss_mib(side.server)))
    side.add("hit qps", dnsperf(side, hot, seconds, 100, root)["qps"])
    side.add("latency miss ms", latency(side, names.fresh(200)))
    side.add("latency hit ms", latency(side, hot * 4))


def rows(sides: list[Side], load_: list[float], upstream_qps: float) -> list[Row]:
    masq, ours = (s.samples for s in sides)

    def pair(key: str) -> dict[str, list[float]]:
        return {"dejima": ours[key], "anchor": masq[key]}

    return [
        Row("resolver, cache misses, 100 in flight (nft set insert)", "q/s", median(ours["miss qps"]),
            median(masq["miss qps"]), "dnsmasq --nftset, cache on", 0.75, better="higher", samples=pair("miss qps"),
            note=f"set grew by {int(sum(ours['set growth']))} (dejima), {int(sum(masq['set growth']))} (dnsmasq); "
                 f"the fake upstream alone answers {upstream_qps:.0f} q/s",
            load=load_),
        Row("resolver, cache hits (50 names), 100 in flight", "q/s", median(ours["hit qps"]), median(masq["hit qps"]),
            "dnsmasq cached", 0.25, better="higher", samples=pair("hit qps"), load=load_),
        Row("resolver, one at a time, miss: median latency", "ms", median(ours["latency miss ms"]),
            median(masq["latency miss ms"]), "dnsmasq", 2.0, samples=pair("latency miss ms"), load=load_),
        Row("resolver, one at a time, hit: median latency", "ms", median(ours["latency hit ms"]),
            median(masq["latency hit ms"]), "dnsmasq", None, samples=pair("latency hit ms"), load=load_),
        Row("filter memory under load (peak RSS)", "MiB", max(ours["rss under load"]), max(masq["rss under load"]),
            "dnsmasq", 64.0, absolute=True, samples=pair("rss under load"), load=load_),
        Row(f"filter memory {AFTER_SECONDS} s after load (every answer expired) / idle", "×",
            ours["rss after"][0] / ours["rss idle"][0], masq["rss after"][0] / masq["rss idle"][0],
            "dnsmasq after/idle", 1.25, absolute=True,
            note=f"dejima idle {ours['rss idle'][0]:.1f} MiB, after {ours['rss after'][0]:.1f} MiB; "
                 f"dnsmasq {masq['rss idle'][0]:.1f} -> {masq['rss after'][0]:.1f} MiB", load=load_),
    ]
