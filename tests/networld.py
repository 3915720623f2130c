"""The egress test world: a private network with a fake authoritative DNS and decoy servers.

Everything lives on a network this module creates (10.213.N.0/24) and is removed with it. The
fake DNS answers test names (``*.dejima.test``) with the decoys' addresses, and with private,
loopback, metadata and gateway addresses for the refusal cases; it logs every query it receives,
so a test can prove a denied name never reached it.
"""

from __future__ import annotations

import json
import os
import random
from dataclasses import dataclass
from pathlib import Path

from dejima.adapters.runtime import Runtime
from dejima.core import labels
from dejima.core.plan import ContainerSpec
from dejima.orchestration import selftest

WORLD_LABEL = "dejima.test-world"

FAKE_DNS = r"""
import json, sys, time
from dnslib import A, CNAME, QTYPE, RCODE, RR, TXT
from dnslib.server import BaseResolver, DNSLogger, DNSServer
zone = json.loads(sys.argv[1])
class Zone(BaseResolver):
    def resolve(self, request, handler):
        for question in request.questions:  # every question, so a smuggled second one shows
            print("query", str(question.qname).rstrip(".").lower(), QTYPE.get(question.qtype), flush=True)
        name = str(request.q.qname).rstrip(".").lower()
        slow = name == "slow.dejima.test" or name.endswith(".slow.dejima.test")
        if slow:
            # Long enough for a session to see the resolver's upstream socket and race the answer,
            # short of the resolver's 2.5 s upstream timeout.
            time.sleep(1.5)
        reply = request.reply()
        if name == "broken.dejima.test":  # an authority that fails: the resolver's upstream-failed refusal
            reply.header.rcode = RCODE.SERVFAIL
            return reply
        records = zone.get("slow.dejima.test" if slow else name)
        if records is None and name.endswith(".many.dejima.test") and name.split(".")[0][1:].isdigit():
            # nK.many.dejima.test: one distinct address per K, for measuring set insertions
            prefix = zone["web.dejima.test"][0][1].rsplit(".", 1)[0]
            records = [["A", f"{prefix}.{10 + int(name.split('.')[0][1:]) % 200}", 300]]
        if records is None:
            reply.header.rcode = RCODE.NXDOMAIN
            return reply
        for kind, value, ttl in records:
            if kind == "CNAME":
                reply.add_answer(RR(name, QTYPE.CNAME, rdata=CNAME(value), ttl=ttl))
                for k2, v2, t2 in zone.get(value, []):
                    if k2 == "A" and request.q.qtype in (QTYPE.A, QTYPE.ANY):
                        reply.add_answer(RR(value, QTYPE.A, rdata=A(v2), ttl=t2))
            elif kind == "A" and request.q.qtype in (QTYPE.A, QTYPE.ANY):
                reply.add_answer(RR(name, QTYPE.A, rdata=A(value), ttl=ttl))
            elif kind == "TXT" and request.q.qtype == QTYPE.TXT:
                reply.add_answer(RR(name, QTYPE.TXT, rdata=TXT(value), ttl=ttl))
        return reply
logger = DNSLogger(log="-request,-reply,-truncated,-recv,-send,-data,-error", prefix=False)
for tcp in (False, True):
    DNSServer(Zone(), address="0.0.0.0", port=53, tcp=tcp, logger=logger).start_thread()
print("fake-dns: listening", flush=True)
while True:
    time.sleep(3600)
"""

# Runs inside a session: a list of network actions, one JSON result each.
NET_PROBE = r"""
import json, socket, struct, sys, time
def tcp(a):
    t = time.monotonic()
    try:
        s = socket.create_connection((a["host"], a["port"]), timeout=a.get("timeout", 4))
        data = s.recv(64); s.close()
        return {"result": "connected", "data": data.decode(errors="replace")}
    except socket.timeout:
        return {"result": "timeout"}
    except OSError as e:
        return {"result": "blocked", "error": e.strerror or str(e), "seconds": round(time.monotonic() - t, 3)}
def udp(a):
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.settimeout(a.get("timeout", 3))
    try:
        u.sendto(b"\x12\x34hello", (a["host"], a["port"])); u.recvfrom(512)
        return {"result": "answered"}
    except socket.timeout:
        return {"result": "timeout"}
    except OSError as e:
        return {"result": "blocked", "error": e.strerror or str(e)}
def resolve(a):
    try:
        infos = socket.getaddrinfo(a["name"], 80, proto=socket.IPPROTO_TCP)
        return {"result": "resolved", "addresses": sorted({i[4][0] for i in infos})}
    except socket.gaierror as e:
        return {"result": "failed", "error": e.strerror}
def dns(a):
    name = a["name"].encode()
    qname = b"".join(bytes([len(p)]) + p for p in name.split(b".")) + b"\0"
    qtype = {"A": 1, "AAAA": 28, "TXT": 16}[a.get("qtype", "A")]
    opt = b"\0\0\x29\x04\xd0\0\0\0\0\0\0"  # EDNS0 OPT, so the server can add an extended error
    packet = b"\xab\xcd\x01\x00\x00\x01\x00\x00\x00\x00\x00\x01" + qname + struct.pack("!HH", qtype, 1) + opt
    kind = socket.SOCK_STREAM if a.get("tcp") else socket.SOCK_DGRAM
    s = socket.socket(socket.AF_INET, kind); s.settimeout(a.get("timeout", 3))
    try:
        s.connect((a.get("server", "127.0.0.1"), a.get("port", 53)))
        if a.get("tcp"):
            s.sendall(struct.pack("!H", len(packet)) + packet)
            size = struct.unpack("!H", s.recv(2))[0]; data = b""
            while len(data) < size: data += s.recv(size - len(data))
        else:
            s.send(packet); data = s.recv(4096)
    except socket.timeout:
        return {"result": "timeout"}
    except OSError as e:
        return {"result": "blocked", "error": e.strerror or str(e)}
    rcode = data[3] & 0xF
    return {"result": "answered", "rcode": rcode, "ancount": struct.unpack("!H", data[6:8])[0],
            "text": data.decode("latin-1")}
def ipv6(a):
    try:
        s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM); s.settimeout(2)
        s.connect(("::1", 9)); return {"result": "connected"}
    except OSError as e:
        return {"result": "blocked", "error": e.strerror or str(e)}
def icmp(a):
    try:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP); s.settimeout(2)
        s.sendto(b"\x08\x00\xf7\xff\x00\x00\x00\x00", (a["host"], 0)); s.recvfrom(64)
        return {"result": "answered"}
    except socket.timeout:
        return {"result": "timeout"}
    except OSError as e:
        return {"result": "blocked", "error": e.strerror or str(e)}
def listeners():
    found = []
    for proto in ("tcp", "udp"):
        for line in open("/proc/net/" + proto).read().splitlines()[1:]:
            fields = line.split()
            local, state = fields[1], fields[3]
            if proto == "udp" or state == "0A":
                ip_hex, port = local.split(":")
                ip = socket.inet_ntoa(bytes.fromhex(ip_hex)[::-1])
                found.append([proto, ip, int(port, 16)])
    return sorted(found)
def listening(a):
    return {"result": listeners()}
def foreign_listeners(a):
    # Everything listening in the namespace that is not dejima's resolver: try to use it.
    out = []
    for proto, ip, port in listeners():
        if (ip, port) == ("127.0.0.1", 53):
            continue
        if proto == "tcp":
            out.append([proto, ip, port, tcp({"host": ip, "port": port, "timeout": 3})["result"]])
        else:
            out.append([proto, ip, port, dns({"name": "web.dejima.test", "server": ip, "port": port})["result"]])
    return {"result": out}
def rawdns(a):
    # A packet the test built (hex), sent as is: wire tricks no resolver library would make.
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(a.get("timeout", 3))
    try:
        s.sendto(bytes.fromhex(a["packet"]), (a.get("server", "127.0.0.1"), a.get("port", 53)))
        data = s.recv(4096)
    except socket.timeout:
        return {"result": "timeout"}
    except OSError as e:
        return {"result": "blocked", "error": e.strerror or str(e)}
    return {"result": "answered", "rcode": data[3] & 0xF, "ancount": struct.unpack("!H", data[6:8])[0]}
def junk(a):
    # Garbage at the resolver over UDP and TCP; the caller then checks it still answers.
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for packet in (b"", b"\x00", b"\x12\x34" + b"\xff" * 40, b"\x12\x34\x01\x00\x00\x01" + b"\x00" * 6 + b"\xc0\x0c",
                   b"\xab\xcd\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00" + b"\x3f" + b"a" * 63 * 5):
        u.sendto(packet, ("127.0.0.1", 53))
    for packet in (b"\x00\x05hello", b"\xff\xff" + b"x" * 100, b"\x00"):
        t = socket.create_connection(("127.0.0.1", 53), timeout=3); t.sendall(packet); t.close()
    return {"result": "sent"}
def udp_flood(a):
    # A bounded burst: at most a["count"] packets or a["seconds"] seconds, whichever ends first.
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.setblocking(False)
    sent, deadline, target = 0, time.monotonic() + a["seconds"], (a["host"], a["port"])
    payload = bytes.fromhex(a["payload"]) if a.get("payload") else b"flood"
    while sent < a["count"] and time.monotonic() < deadline:
        for _ in range(256):
            try:
                u.sendto(payload, target)
            except OSError:
                pass
            sent += 1
    return {"result": "sent", "packets": sent}
def read(a):
    try:
        return {"result": open(a["path"]).read().strip()}
    except OSError as e:
        return {"result": "error", "error": str(e)}
ops = {"tcp": tcp, "udp": udp, "resolve": resolve, "dns": dns, "ipv6": ipv6, "icmp": icmp,
       "listening": listening, "foreign_listeners": foreign_listeners, "read": read,
       "rawdns": rawdns, "junk": junk, "udp_flood": udp_flood}
print(json.dumps([ops[a["op"]](a) for a in json.loads(sys.argv[1])]))
"""


@dataclass
class World:
    network: str
    subnet: str
    gateway: str
    dns: str
    web: str  # decoy answering TCP 8080 (HTTP), 8443, 53, 853 and UDP 53, 5353
    other: str  # a second decoy no name points at
    dns_container: str
    settings: Path

    def zone(self) -> dict[str, list[tuple[str, str, int]]]:
        return zone_for(self.web, self.gateway)

    def probe(self, *actions: dict[str, object]) -> tuple[str, ...]:
        return ("python3", "-c", NET_PROBE, json.dumps(list(actions)))


def zone_for(web: str, gateway: str) -> dict[str, list[tuple[str, str, int]]]:
    return {
        "web.dejima.test": [("A", web, 300)],
        "other.dejima.test": [("A", web, 300)],
        "a.wild.dejima.test": [("A", web, 300)],
        "bad.wild.dejima.test": [("A", web, 300)],
        "wild.dejima.test": [("A", web, 300)],
        "alias.dejima.test": [("CNAME", "web.dejima.test", 300)],
        "badalias.dejima.test": [("CNAME", "bad.wild.dejima.test", 300)],
        "slow.dejima.test": [("A", web, 300)],
        "private.dejima.test": [("A", "10.1.2.3", 300)],
        "loop.dejima.test": [("A", "127.0.0.1", 300)],
        "meta.dejima.test": [("A", "169.254.169.254", 300)],
        "gateway.dejima.test": [("A", gateway, 300)],
        "mixed.dejima.test": [("A", "127.0.0.1", 300), ("A", web, 300)],
        "txt.dejima.test": [("TXT", "hello", 300)],
    }


def _container(runtime: Runtime, scope: str, name: str, image: str, network: str, command: tuple[str, ...],
               entrypoint: tuple[str, ...] | None = None) -> str:
    spec = ContainerSpec(
        name=f"dejima-{scope}-{name}-{os.urandom(2).hex()}", image=image, command=command, user="0:0",
        labels={labels.SCOPE: scope, labels.ROLE: f"test-{name}", labels.LAUNCHER: "test"},
        network_mode=network, entrypoint=entrypoint,
    )
    container = runtime.create(spec)
    runtime.start(container)
    first = runtime.first_log_line(container)
    assert "listening" in first, f"{name} did not start: {first!r}"
    return container


def build_world(runtime: Runtime, scope: str, filter_image: str, session_image: str, settings_dir: Path) -> World:
    third = random.randint(16, 250)
    subnet = f"10.213.{third}.0/24"
    network = f"dejima-world-{scope}"
    runtime.create_network(network, subnet, {WORLD_LABEL: scope})
    gateway = runtime.gateway(network) or f"10.213.{third}.1"
    created: list[str] = []
    web = selftest.start_decoy(runtime, scope, session_image, network, "test", created)
    other = selftest.start_decoy(runtime, scope, session_image, network, "test", created)
    dns_container = _container(runtime, scope, "fake-dns", filter_image, network,
                               ("-u", "-c", FAKE_DNS, json.dumps(zone_for(web.address, gateway))),
                               entrypoint=("python3",))
    dns = runtime.address(dns_container, network)
    settings = settings_dir / "world-settings.toml"
    settings.write_text(
        f'[session]\nnetwork = "{network}"\n\n'
        f'[network]\nupstream_dns = ["{dns}"]\nanswer_networks = ["{subnet}"]\n'
        'deny = ["bad.wild.dejima.test"]\n'
        'deny_reasons = { "bad.wild.dejima.test" = "a test says this host exfiltrates" }\n'
    )
    settings.chmod(0o644)
    return World(network, subnet, gateway, dns, web.address, other.address, dns_container, settings)


def remove_world(runtime: Runtime, scope: str, world: World) -> None:
    for container in runtime.containers({labels.SCOPE: scope}):
        runtime.remove(container.id)
    runtime.remove_network(world.network)


def queries_seen(runtime: Runtime, world: World) -> list[str]:
    return [line.split()[1] for line in runtime.logs(world.dns_container).splitlines() if line.startswith("query ")]
