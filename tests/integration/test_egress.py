"""The escape battery: from inside a real session, every path out is tried against a test world.

The world (tests/networld.py) is a private network with a fake authoritative DNS and decoys; the
filter forwards to that DNS only. Every "blocked" result is paired with a control that shows the
same destination answering when policy allows it, so the test can fail.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import cast

import pytest

from dejima.adapters.runtime import Runtime
from dejima.core import labels
from tests.integration.conftest import Images
from tests.networld import World, queries_seen
from tests.world import User, containers_of, docker, parse_json_line, run_dejima, spawn_dejima, wait_for_line

REFUSED, NXDOMAIN = 5, 3


def run_probe(user: User, scope: str, workspace: Path, world: World, *actions: dict[str, object],
              allow: tuple[str, ...] = ()) -> list[dict[str, object]]:
    flags = [arg for entry in allow for arg in ("--allow", entry)]
    result = run_dejima(user, scope, "-q", *flags, str(workspace), "--", *world.probe(*actions),
                        DEJIMA_SETTINGS=str(world.settings))
    assert result.returncode == 0, result.stderr
    output = json.loads([line for line in result.stdout.splitlines() if line.startswith("[")][-1])
    assert isinstance(output, list)
    return output


def tcp(host: str, port: int) -> dict[str, object]:
    return {"op": "tcp", "host": host, "port": port}


def resolve(name: str) -> dict[str, object]:
    return {"op": "resolve", "name": name}


def dns(name: str, server: str = "127.0.0.1", **kw: object) -> dict[str, object]:
    return {"op": "dns", "name": name, "server": server, **kw}


# --- names and ports ------------------------------------------------------------------------------


def test_allowed_name_and_port_works_and_other_ports_do_not(user: User, scope: str, workspace: Path,
                                                            world: World) -> None:
    resolved, allowed, other_port = run_probe(
        user, scope, workspace, world, resolve("web.dejima.test"), tcp("web.dejima.test", 8080),
        tcp("web.dejima.test", 8443), allow=("web.dejima.test:8080",))
    assert resolved == {"result": "resolved", "addresses": [world.web]}
    assert allowed["result"] == "connected" and str(allowed["data"]).startswith("HTTP/1.0 200")
    assert other_port["result"] == "blocked"


def test_name_without_port_allows_every_port(user: User, scope: str, workspace: Path, world: World) -> None:
    first, second = run_probe(user, scope, workspace, world, tcp("web.dejima.test", 8080),
                              tcp("web.dejima.test", 8443), allow=("web.dejima.test",))
    assert first["result"] == second["result"] == "connected"


def test_name_not_allowed_fails_at_dns_and_never_reaches_the_authority(
        runtime: Runtime, user: User, scope: str, workspace: Path, world: World) -> None:
    (answer, lookup) = run_probe(user, scope, workspace, world, dns("other.dejima.test"), resolve("other.dejima.test"),
                                 allow=("web.dejima.test",))
    assert answer["rcode"] == REFUSED
    assert "other.dejima.test is not on the allow list" in str(answer["text"])  # the Extended DNS Error
    assert lookup["result"] == "failed"
    assert "other.dejima.test" not in queries_seen(runtime, world)


def test_wildcard_matches_subdomains_only(user: User, scope: str, workspace: Path, world: World) -> None:
    sub, over_tcp, apex = run_probe(user, scope, workspace, world, dns("a.wild.dejima.test"),
                                    dns("a.wild.dejima.test", tcp=True), dns("wild.dejima.test"),
                                    allow=("*.wild.dejima.test",))
    assert sub["rcode"] == 0 and sub["ancount"] == 1
    assert over_tcp["rcode"] == 0 and over_tcp["ancount"] == 1  # dejima's resolver speaks TCP too
    assert apex["rcode"] == REFUSED


def test_deny_beats_allow_and_says_why(user: User, scope: str, workspace: Path, world: World) -> None:
    (denied,) = run_probe(user, scope, workspace, world, dns("bad.wild.dejima.test"), allow=("*.wild.dejima.test",))
    assert denied["rcode"] == REFUSED
    assert "a test says this host exfiltrates" in str(denied["text"])


def test_cname_chain_is_followed_inside_the_allowed_answer(user: User, scope: str, workspace: Path,
                                                           world: World) -> None:
    resolved, connect, target = run_probe(
        user, scope, workspace, world, resolve("alias.dejima.test"), tcp("alias.dejima.test", 8080),
        dns("web.dejima.test"), allow=("alias.dejima.test:8080",))
    assert resolved["addresses"] == [world.web]
    assert connect["result"] == "connected"
    assert target["rcode"] == REFUSED  # the chain's target is not thereby allowed on its own


# What an agent sees: each refusal by dejima-why, one line of status, then the notice and its variable.
WHY_SCRIPT = ('for name in "$@"; do dejima-why "$name"; echo "status=$?"; done; '
              'echo "notice=$DEJIMA_NOTICE session=$DEJIMA_SESSION"; cat "$DEJIMA_NOTICE"')


def test_dejima_why_tells_the_agent_why_each_name_is_refused(runtime: Runtime, user: User, scope: str,
                                                            workspace: Path, world: World) -> None:
    """A refusal the agent can read and act on: from inside a session, dejima-why names the kind of each
    refusal (not allowed, denied, an answer in a denied class, an upstream that failed) and the grant
    to ask for; the notice and $DEJIMA_NOTICE name dejima, dejima-why and dejima-allow."""
    names = ("other.dejima.test", "web.dejima.test", "bad.wild.dejima.test", "private.dejima.test",
             "broken.dejima.test")
    result = run_dejima(user, scope, "-q", "--allow", "web.dejima.test", "--allow", "*.wild.dejima.test",
                        "--allow", "private.dejima.test", "--allow", "broken.dejima.test", str(workspace), "--",
                        "sh", "-c", WHY_SCRIPT, "why", *names, DEJIMA_SETTINGS=str(world.settings))
    assert result.returncode == 0, result.stderr
    said, _, notice = result.stdout.partition("notice=")
    answers = [part.strip() for part in said.split("status=")]
    statuses = [int(answer.split("\n", 1)[0]) for answer in answers[1:]]
    assert statuses == [1, 0, 1, 1, 3], said
    not_allowed, allowed, denied, private, broken = answers[0], *(a.split("\n", 1)[1] for a in answers[1:5])
    assert not_allowed.startswith("refused by dejima's policy: other.dejima.test is not on this session's allow list.")
    assert "not a network fault" in not_allowed and "`dejima-allow other.dejima.test`" in not_allowed
    assert allowed.startswith(f"allowed: web.dejima.test resolves to {world.web}.")
    assert denied.startswith("refused by dejima's deny list: a test says this host exfiltrates.")
    assert private.startswith("refused by dejima's policy: private.dejima.test is allowed, but it resolves only to")
    assert "10.1.2.3 is a private address" in private
    assert broken.startswith("broken.dejima.test is allowed, but the upstream DNS gave no usable answer")
    assert notice.startswith("/etc/dejima/notice session=") and "You are working inside a dejima sandbox" in notice
    assert "dejima-why HOST" in notice and "`dejima-allow HOST`" in notice
    assert "other.dejima.test" not in queries_seen(runtime, world)  # asking why sends nothing upstream


def test_dejima_why_shows_a_deny_reason_as_text_never_as_terminal_control(user: User, scope: str, workspace: Path,
                                                                          world: World) -> None:
    """A deny reason is settings text; in an interactive session the agent's terminal is the user's, so
    what dejima-why prints of it is escaped end to end (the resolver's EDE, then dejima-why)."""
    settings = world.settings.with_name("hostile-reason.toml")
    settings.write_text(world.settings.read_text().replace(
        '"a test says this host exfiltrates"', '"evil\\u001b]2;owned\\u0007\\u001b[2J reason"'))
    settings.chmod(0o644)
    result = run_dejima(user, scope, "-q", "--allow", "*.wild.dejima.test", str(workspace), "--",
                        "dejima-why", "bad.wild.dejima.test", DEJIMA_SETTINGS=str(settings))
    assert result.returncode == 1, result.stderr
    assert result.stdout.startswith("refused by dejima's deny list: evil\\x1b]2;owned\\x07\\x1b[2J reason.")
    assert not re.search(r"[\x00-\x09\x0b-\x1f\x7f-\xff]", result.stdout)


# --- addresses ------------------------------------------------------------------------------------


def test_direct_ip_never_resolved_is_blocked_until_a_name_brings_it_in(user: User, scope: str, workspace: Path,
                                                                       world: World) -> None:
    before, _, after, other = run_probe(
        user, scope, workspace, world, tcp(world.web, 8080), resolve("web.dejima.test"), tcp(world.web, 8080),
        tcp(world.other, 8080), allow=("web.dejima.test:8080",))
    assert before["result"] == "blocked"
    assert after["result"] == "connected"  # learned from the allowed answer
    assert other["result"] == "blocked"  # a decoy no allowed name points at


@pytest.mark.parametrize("name", ["private.dejima.test", "loop.dejima.test", "meta.dejima.test",
                                  "gateway.dejima.test"])
def test_answers_in_denied_classes_are_refused(user: User, scope: str, workspace: Path, world: World,
                                               name: str) -> None:
    (answer,) = run_probe(user, scope, workspace, world, dns(name), allow=(name,))
    assert answer["rcode"] == REFUSED
    assert "resolves to a denied address" in str(answer["text"])


def test_mixed_answer_keeps_only_the_allowed_address(user: User, scope: str, workspace: Path, world: World) -> None:
    (resolved,) = run_probe(user, scope, workspace, world, resolve("mixed.dejima.test"), allow=("mixed.dejima.test",))
    assert resolved["addresses"] == [world.web]


def test_explicitly_allowed_literal_is_reachable(user: User, scope: str, workspace: Path, world: World) -> None:
    allowed, other_port = run_probe(user, scope, workspace, world, tcp(world.other, 8080), tcp(world.other, 8443),
                                    allow=(f"{world.other}:8080",))
    assert allowed["result"] == "connected"
    assert other_port["result"] == "blocked"


# --- other resolvers, other protocols ---------------------------------------------------------------


def test_no_resolver_but_dejimas_answers(user: User, scope: str, workspace: Path, world: World) -> None:
    results = run_probe(
        user, scope, workspace, world,
        dns("web.dejima.test", server=world.web), dns("web.dejima.test", server=world.web, tcp=True),
        dns("web.dejima.test", server=world.web, port=5353), tcp(world.web, 853),
        dns("web.dejima.test", server=world.dns), dns("web.dejima.test", server=world.dns, tcp=True),
        dns("web.dejima.test", server=world.gateway),
        allow=("web.dejima.test",),
    )
    # The rogue resolver (the decoy answers anything), DNS-over-TLS, the filter's own upstream
    # (only the filter's marked sockets may use it) and the engine's gateway: all closed.
    for result in results:
        assert result["result"] in ("blocked", "timeout"), results


def test_udp_ipv6_and_icmp_are_closed(user: User, scope: str, workspace: Path, world: World) -> None:
    udp, v6, icmp, switch, aaaa = run_probe(
        user, scope, workspace, world, {"op": "udp", "host": world.web, "port": 5353}, {"op": "ipv6"},
        {"op": "icmp", "host": world.web}, {"op": "read", "path": "/proc/sys/net/ipv6/conf/all/disable_ipv6"},
        dns("web.dejima.test", qtype="AAAA"), allow=("web.dejima.test",))
    assert udp["result"] in ("blocked", "timeout")
    assert v6["result"] == "blocked"
    assert icmp["result"] in ("blocked", "timeout")
    assert switch["result"] == "1"
    assert aaaa["rcode"] == 0 and aaaa["ancount"] == 0


def test_the_filter_exposes_only_its_resolver(user: User, scope: str, workspace: Path, world: World) -> None:
    listening, foreign = run_probe(user, scope, workspace, world, {"op": "listening"}, {"op": "foreign_listeners"},
                                   allow=("web.dejima.test",))
    assert isinstance(listening["result"], list) and isinstance(foreign["result"], list), (listening, foreign)
    ours = [entry for entry in listening["result"] if entry[1:] == ["127.0.0.1", 53]]
    assert sorted(ours) == [["tcp", "127.0.0.1", 53], ["udp", "127.0.0.1", 53]]
    # On a user-defined network the engine's embedded resolver listens in the namespace too
    # (127.0.0.11). It is in reach of the session's sockets, so the ruleset must refuse it.
    assert foreign["result"], "expected the engine's resolver in the namespace on a user-defined network"
    for _proto, address, _port, outcome in foreign["result"]:
        assert address == "127.0.0.11", foreign
        assert outcome in ("blocked", "timeout"), foreign


def test_controls_reach_the_decoys_without_dejima(runtime: Runtime, images: Images, scope: str,
                                                  world: World) -> None:
    from dejima.orchestration.selftest import control_probe

    for address in (world.web, world.other):
        result = control_probe(runtime, scope, images.session_root, world.network, "test", address)
        assert result.tcp["result"] == "connected" and result.udp["result"] == "answered"


# --- the kernel's view ----------------------------------------------------------------------------


def test_learned_addresses_enter_the_set_with_a_bounded_timeout(runtime: Runtime, user: User, scope: str,
                                                                workspace: Path, world: World) -> None:
    script = "getent hosts web.dejima.test meta.dejima.test >/dev/null; echo started; exec sleep 300"
    with spawn_dejima(user, scope, "-q", "--allow", "web.dejima.test:8080", "--allow", "meta.dejima.test",
                      str(workspace), "--", "sh", "-c", script, DEJIMA_SETTINGS=str(world.settings)) as proc:
        wait_for_line(proc.stdout, "started")
        (filter_id,) = containers_of(runtime, scope, role=labels.ROLE_FILTER)
        ports = docker("exec", filter_id, "nft", "-j", "list", "set", "inet", "dejima", "allow4_port").stdout
        anyport = docker("exec", filter_id, "nft", "-j", "list", "set", "inet", "dejima", "allow4").stdout
        ruleset = docker("exec", filter_id, "nft", "list", "ruleset").stdout.decode()
        proc.terminate()
    elements = [item["elem"] for obj in json.loads(ports)["nftables"] if "set" in obj
                for item in obj["set"].get("elem", [])]
    assert len(elements) == 1
    assert elements[0]["val"]["concat"] == [world.web, 8080]
    assert 60 <= elements[0]["timeout"] <= 300  # the answer's TTL (300), bounded to [60, 3600]
    assert "elem" not in json.dumps(json.loads(anyport))  # meta.dejima.test's 169.254.169.254 never got in
    assert "169.254" not in ruleset


def test_a_violation_record_names_the_refused_domain(user: User, scope: str, workspace: Path, world: World) -> None:
    result = run_dejima(user, scope, str(workspace), "--", *world.probe(resolve("other.dejima.test")),
                        DEJIMA_SETTINGS=str(world.settings))
    assert "name(s) refused" in result.stderr
    session = result.stderr.split("dejima violations ")[-1].split()[0]
    records = run_dejima(user, scope, "violations", session, "--json")
    domains = [parse_json_line(line)["domain"] for line in records.stdout.splitlines()]
    assert "other.dejima.test" in domains


def test_blocked_connections_are_recorded_with_their_domain(user: User, scope: str, workspace: Path,
                                                            world: World) -> None:
    result = run_dejima(user, scope, "--allow", "web.dejima.test:8080", str(workspace), "--",
                        *world.probe(tcp("web.dejima.test", 8443), tcp(world.other, 8080)),
                        DEJIMA_SETTINGS=str(world.settings))
    assert "connection(s) blocked" in result.stderr, result.stderr
    session = result.stderr.split("dejima violations ")[-1].split()[0]
    listed = run_dejima(user, scope, "violations", session, "--json")
    records = [json.loads(line) for line in listed.stdout.splitlines()]
    connections = {(r["address"], r["port"]): r for r in records if r["kind"] == "connection"}
    assert connections[(world.web, 8443)]["domain"] == "web.dejima.test"
    assert connections[(world.web, 8443)]["protocol"] == "tcp"
    assert "domain" not in connections[(world.other, 8080)]


IMPERSONATE = r"""
import json, os, signal
out = {}
try:
    os.kill(1, 0); out["signal_filter"] = "allowed"
except PermissionError:
    out["signal_filter"] = "denied"
for name in ("environ", "mem"):
    try:
        open(f"/proc/1/{name}", "rb").read(16); out[name] = "readable"
    except OSError as e:
        out[name] = "denied"
try:
    os.listdir("/proc/1/root"); out["root"] = "readable"
except OSError:
    out["root"] = "denied"
print(json.dumps(out))
"""


def test_session_cannot_touch_the_filters_processes(user: User, scope: str, workspace: Path, world: World) -> None:
    """The session shares the filter's PID namespace (so it dies with it) but cannot act on it."""
    import os

    if user.uid == os.getuid() == 0:
        pytest.fail("run as root, the suite launches sessions as a test uid; this must not run as uid 0")
    result = run_dejima(user, scope, "-q", str(workspace), "--", "python3", "-c", IMPERSONATE,
                        DEJIMA_SETTINGS=str(world.settings))
    assert parse_json_line(result.stdout) == {"signal_filter": "denied", "environ": "denied", "mem": "denied",
                                              "root": "denied"}


# --- boundary holes a hostile session found (issue 9) -----------------------------------------------

RIDE_THE_RESOLVERS_FLOW = r"""
import json, socket, struct, sys, threading, time
upstream = sys.argv[1]
def query(name, qid):
    qname = b"".join(bytes([len(p)]) + p for p in name.encode().split(b".")) + b"\0"
    return struct.pack("!HHHHHH", qid, 0x0100, 1, 0, 0, 0) + qname + struct.pack("!HH", 1, 1)
remote = socket.inet_aton(upstream)[::-1].hex().upper() + ":0035"
def ask_slow_name():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(6)
    s.sendto(query("slow.dejima.test", 0x1111), ("127.0.0.1", 53)); s.recv(512)
asker = threading.Thread(target=ask_slow_name); asker.start()
ports, deadline = set(), time.monotonic() + 6
while asker.is_alive() and time.monotonic() < deadline:
    # The shared namespace's sockets: the resolver's upstream socket shows with its remote address.
    for line in open("/proc/net/udp").read().splitlines()[1:]:
        fields = line.split()
        if fields[2] == remote:
            ports.add(int(fields[1].split(":")[1], 16))
asker.join()
results = []
for port in sorted(ports):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(2)
    deadline = time.monotonic() + 8
    while True:  # the resolver keeps an idle upstream socket for a moment: wait until it lets go
        try:
            s.bind(("0.0.0.0", port)); break
        except OSError:
            if time.monotonic() > deadline:
                break
            time.sleep(0.05)
    try:
        # The resolver closed it; the flow's conntrack entry lives on.
        s.sendto(query("tunnel.dejima.test", 0x2222), (upstream, 53)); s.recv(512)
        results.append("answered")
    except socket.timeout:
        results.append("timeout")
    except OSError as e:
        results.append("blocked: " + (e.strerror or str(e)))
    results[-1] += " (bound)" if s.getsockname()[1] == port else " (not bound)"
print(json.dumps({"ports": sorted(ports), "results": results}))
"""


def test_session_cannot_ride_the_resolvers_upstream_flow(runtime: Runtime, user: User, scope: str,
                                                         workspace: Path, world: World) -> None:
    """Hole 1: a session that learns the resolver's upstream source port (from /proc/net/udp of the
    shared namespace) sends its own query from that port, on the flow's live conntrack entry."""
    result = run_dejima(user, scope, "--allow", "slow.dejima.test", str(workspace), "--", "python3", "-c",
                        RIDE_THE_RESOLVERS_FLOW, world.dns, DEJIMA_SETTINGS=str(world.settings))
    assert result.returncode == 0, result.stderr
    attack = parse_json_line(result.stdout)
    assert attack["ports"], "the attack never saw the resolver's upstream socket, so it proves nothing"
    outcomes = [str(outcome) for outcome in cast(list[object], attack["results"])]
    assert not any(outcome.startswith("answered") for outcome in outcomes), attack
    # Control: the session did take a port the resolver had used (it keeps an idle socket open for
    # a moment), so what refused the query was the ruleset, not a port still in use.
    assert any(outcome.endswith("(bound)") for outcome in outcomes), attack
    assert "tunnel.dejima.test" not in queries_seen(runtime, world)
    assert "slow.dejima.test" in queries_seen(runtime, world)  # the control: the resolver's own query went
    session = result.stderr.split("dejima violations ")[-1].split()[0]
    listed = run_dejima(user, scope, "violations", session, "--json").stdout
    records = [json.loads(line) for line in listed.splitlines()]
    assert any(r["kind"] == "connection" and r["address"] == world.dns and r.get("port") == 53 for r in records)


FORGE_THE_UPSTREAMS_ANSWER = r"""
import json, socket, struct, sys, threading, time
upstream, forged = sys.argv[1], sys.argv[2]
remote = socket.inet_aton(upstream)[::-1].hex().upper() + ":0035"
def attack(name):
    qname = b"".join(bytes([len(p)]) + p for p in name.encode().split(b".")) + b"\0"
    question = qname + struct.pack("!HH", 1, 1)
    # An answer to the resolver's own query for every id it could have drawn, pointing at an
    # address of our choosing: made before the race so that the race is only sending.
    tail = (struct.pack("!HHHHH", 0x8180, 1, 1, 0, 0) + question
            + b"\xc0\x0c" + struct.pack("!HHIH", 1, 1, 300, 4) + socket.inet_aton(forged))
    forgeries = [struct.pack("!H", qid) + tail for qid in range(65536)]
    answer = {}
    def ask():
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(6)
        s.sendto(struct.pack("!HHHHHH", 0x1111, 0x0100, 1, 0, 0, 0) + question, ("127.0.0.1", 53))
        data = s.recv(512)
        answer["address"] = socket.inet_ntoa(data[-4:]) if struct.unpack("!H", data[6:8])[0] else None
    asker = threading.Thread(target=ask); asker.start()
    targets, deadline = set(), time.monotonic() + 6
    while not targets and asker.is_alive() and time.monotonic() < deadline:
        for line in open("/proc/net/udp").read().splitlines()[1:]:
            fields = line.split()
            local, port = fields[1].split(":")
            # The resolver's upstream sockets: toward the upstream, or any other socket of root's
            # but the filter's listener on port 53 and the engine's resolver on 127.0.0.11 (not
            # ours), should the resolver ever leave them unconnected.
            if fields[2] == remote or (fields[7] == "0" and int(port, 16) != 53 and local != "0B00007F"):
                address = socket.inet_ntoa(bytes.fromhex(local)[::-1])
                targets.add((address if address != "0.0.0.0" else "127.0.0.1", int(port, 16)))
    # Control: the same forgeries reach a socket of ours on the same address (they are deliverable).
    control = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    control.bind((sorted(targets)[0][0] if targets else "127.0.0.1", 0)); control.setblocking(False)
    sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sent = 0
    for qid, packet in enumerate(forgeries):
        for target in sorted(targets):
            try:
                sender.sendto(packet, target); sent += 1
            except OSError:
                pass
        if qid % 4096 == 0:
            sender.sendto(packet, control.getsockname())
    delivered = 0
    while True:
        try:
            control.recv(512); delivered += 1
        except BlockingIOError:
            break
    pending_throughout = asker.is_alive()
    asker.join()
    return {"name": name, "targets": sorted(targets), "sent": sent, "control_delivered": delivered,
            "answer": answer.get("address"), "pending_throughout": pending_throughout}
# Each attempt races a fresh name (no cached answer); on a loaded machine the sending may outlast
# the held answer, so a few attempts, bounded, until one raced the pending query throughout.
attempts = []
for n in range(4):
    attempts.append(attack(f"a{n}.slow.dejima.test"))
    if attempts[-1]["pending_throughout"]:
        break
print(json.dumps({"attempts": attempts}))
"""


def test_forged_answers_from_the_session_do_not_reach_the_resolver(runtime: Runtime, user: User, scope: str,
                                                                   workspace: Path, world: World) -> None:
    """The resolver keeps upstream sockets open across queries. The session sees them in
    /proc/net/udp and can send to their ports from the shared namespace: it forges the answer to
    a pending query, with every id, pointing an allowed name at an address of its choosing. Only
    the upstream's own address and port may answer (the sockets are connected) and only with the
    id and question asked, so the forgeries are dropped and the forged address stays closed."""
    result = run_dejima(user, scope, "-q", "--allow", "*.slow.dejima.test", str(workspace), "--", "sh", "-c",
                        'python3 -c "$1" "$2" "$3" && python3 -c "$4" "$5"', "forge",
                        FORGE_THE_UPSTREAMS_ANSWER, world.dns, world.other, *world.probe(
                            tcp(world.other, 8080), tcp(world.web, 8080))[2:],
                        DEJIMA_SETTINGS=str(world.settings))
    assert result.returncode == 0, result.stderr
    attempts = cast(list[dict[str, object]], parse_json_line(result.stdout)["attempts"])
    for attack in attempts:  # every attempt: the upstream's answer, never the forged one
        assert attack["targets"], "the attack never saw the resolver's upstream socket, so it proves nothing"
        assert attack["answer"] == world.web, attack
    raced = [attack for attack in attempts if attack["pending_throughout"] is True]
    assert raced, attempts  # at least one attempt sent every forgery while the query was pending
    attack = raced[0]
    assert int(str(attack["sent"])) >= 65536 and int(str(attack["control_delivered"])) >= 8, attack
    forged, genuine = json.loads([line for line in result.stdout.splitlines() if line.startswith("[")][-1])
    assert forged["result"] == "blocked", forged  # the forged address never entered the allow set
    assert genuine["result"] == "connected", genuine  # control: the genuine one did


def raw_query(*questions: tuple[list[bytes], int]) -> dict[str, object]:
    from dnslib import DNSHeader, DNSLabel, DNSQuestion, DNSRecord

    record = DNSRecord(DNSHeader(id=0x5151, rd=1))
    for labels_, qtype in questions:
        record.add_question(DNSQuestion(DNSLabel(labels_), qtype))
    return {"op": "rawdns", "packet": bytes(record.pack()).hex()}


def test_resolver_checks_the_name_it_forwards(runtime: Runtime, user: User, scope: str, workspace: Path,
                                              world: World) -> None:
    """Hole 2: a label holding a dot prints like two labels; a second question was never checked."""
    dotted, second, control = run_probe(
        user, scope, workspace, world,
        raw_query(([b"exfil-one.wild", b"dejima", b"test"], 1)),
        raw_query(([b"web", b"dejima", b"test"], 1), ([b"exfil-two", b"dejima", b"test"], 1)),
        raw_query(([b"a", b"wild", b"dejima", b"test"], 1)),
        allow=("*.wild.dejima.test", "web.dejima.test"))
    assert control["rcode"] == 0 and control["ancount"] == 1
    assert dotted["rcode"] in (REFUSED, 1) and second["rcode"] in (REFUSED, 1), (dotted, second)  # 1: FORMERR
    seen = queries_seen(runtime, world)
    assert not any("exfil" in name for name in seen), seen


def test_deny_beats_allow_inside_a_cname_chain(user: User, scope: str, workspace: Path, world: World) -> None:
    """Hole 3: an allowed alias whose CNAME points at a denied name."""
    answer, connect = run_probe(user, scope, workspace, world, dns("badalias.dejima.test"),
                                tcp("badalias.dejima.test", 8080), allow=("badalias.dejima.test",))
    assert answer["rcode"] == REFUSED
    assert "a test says this host exfiltrates" in str(answer["text"])
    assert connect["result"] == "blocked"


def test_a_flood_of_blocked_packets_does_not_kill_the_filter(user: User, scope: str, workspace: Path,
                                                            world: World) -> None:
    """Hole 6: a burst of blocked UDP overflowed the nflog reader's socket and the filter died (137)."""
    flood, after, connect = run_probe(
        user, scope, workspace, world,
        {"op": "udp_flood", "host": world.other, "port": 5353, "count": 400_000, "seconds": 4},
        dns("web.dejima.test"), tcp("web.dejima.test", 8080), allow=("web.dejima.test",))
    assert isinstance(flood["packets"], int), flood
    assert flood["packets"] > 10_000, flood  # a real burst, not a trickle
    assert after["rcode"] == 0 and connect["result"] == "connected"


def test_a_query_flood_and_garbage_do_not_kill_the_resolver(user: User, scope: str, workspace: Path,
                                                           world: World) -> None:
    from dnslib import DNSRecord

    refused_name = bytes(DNSRecord.question("flood.other.test", "A").pack()).hex()
    flood, junk, *after = run_probe(
        user, scope, workspace, world,
        {"op": "udp_flood", "host": "127.0.0.1", "port": 53, "count": 30_000, "seconds": 4, "payload": refused_name},
        # A query that lands while the flood's backlog fills the socket buffer is dropped by the kernel
        # (that is UDP): like any stub resolver, the client asks again.
        {"op": "junk"}, *[dns("web.dejima.test", timeout=5)] * 3, allow=("web.dejima.test",))
    assert isinstance(flood["packets"], int), flood
    assert flood["packets"] >= 5_000 and junk["result"] == "sent"
    answered = [a for a in after if a.get("rcode") == 0 and a.get("ancount") == 1]
    assert answered, (flood, after)


def test_a_filter_that_stops_mid_session_is_reported_plainly(runtime: Runtime, user: User, scope: str,
                                                             workspace: Path, world: World) -> None:
    """Hole 6: when the filter stops, the session dies with it (fail closed), and the user is told why
    instead of seeing a bare 137."""
    with spawn_dejima(user, scope, "-q", str(workspace), "--", "sh", "-c", "echo started; exec sleep 120",
                      DEJIMA_SETTINGS=str(world.settings)) as proc:
        wait_for_line(proc.stdout, "started")
        (filter_id,) = containers_of(runtime, scope, role=labels.ROLE_FILTER)
        runtime.kill(filter_id)
        assert proc.wait(timeout=60) == 125
        assert proc.stderr is not None
        stderr = proc.stderr.read()
    assert "the filter stopped during the session" in stderr, stderr
    assert "lost its network" in stderr
