"""The filter's nft ruleset: rendered from the egress policy, and what its read-back must show.

Egress is default-deny: loopback inside the session's network namespace, the resolver's own
upstream queries (marked sockets only, established flows included: setting a mark needs
CAP_NET_ADMIN, which the session lacks), and TCP to allowed literals and to addresses the
resolver learned for allowed names.
The expectation travels with the ruleset to the filter, which reads the kernel's state back and
refuses to report ready unless it matches.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, replace
from string import Template

from dejima.core.egress import EgressPolicy
from dejima.templates.nft_ruleset import RULESET

TABLE = "dejima"
RESOLVER_MARK = 0x646A  # "dj": the mark on the resolver's upstream sockets
RELAY_MARK = 0x6472  # "dr": the mark on the relay's sockets to the upstream proxy (filter/relay.py)
NFLOG_GROUP = 7  # blocked packets are logged to this nflog group for the violation record
# Blocked packets recorded per second (and in a burst): beyond it they are still refused, and the
# nflog reader's socket never overflows with the records of a flood.
LOG_RATE, LOG_BURST = 200, 400
SETS = ("allow4", "allow4_port", "revoked4", "upstream4")
ENGINE_RESOLVER = "127.0.0.11"  # Docker's embedded DNS on user-defined networks


@dataclass(frozen=True, slots=True)
class ChainExpectation:
    name: str
    hook: str
    policy: str


@dataclass(frozen=True, slots=True)
class RulesetExpectation:
    """What the kernel must hold once the ruleset is applied: one table, these base chains."""

    family: str
    table: str
    chains: tuple[ChainExpectation, ...]
    sets: tuple[str, ...] = SETS

    def to_json(self) -> dict[str, object]:
        return {
            "family": self.family,
            "table": self.table,
            "chains": [{"name": c.name, "hook": c.hook, "policy": c.policy} for c in self.chains],
            "sets": list(self.sets),
        }


DENY_ALL_EXPECTATION = RulesetExpectation(
    family="inet",
    table=TABLE,
    chains=(
        ChainExpectation("output", "output", "drop"),
        ChainExpectation("input", "input", "drop"),
        ChainExpectation("forward", "forward", "drop"),
    ),
)
# With an upstream proxy: the nat chain that turns allowed connections to the relay, too.
RELAYED_EXPECTATION = replace(DENY_ALL_EXPECTATION, chains=(
    *DENY_ALL_EXPECTATION.chains, ChainExpectation("relay", "output", "accept")))


@dataclass(frozen=True, slots=True)
class LiteralRule:
    network: ipaddress.IPv4Network
    port: int | None

    @property
    def target(self) -> str:
        """The network as nft lists it: a single address without its /32."""
        single = self.network.prefixlen == 32
        return str(self.network.network_address) if single else str(self.network)


def _literals(entries: object) -> list[LiteralRule]:
    rules = []
    for entry in entries:  # type: ignore[attr-defined]
        if isinstance(entry.network, ipaddress.IPv4Network):
            rules.append(LiteralRule(entry.network, entry.port))
    return rules


@dataclass(frozen=True, slots=True)
class ProxyEgress:
    """A pod's credential proxy (core/kubernetes.py): the uid it runs as, which no other process of the
    pod has, and its routes' upstream ports. Its sockets may ask the upstream resolvers and reach those
    ports; nothing else of the pod may."""

    uid: int
    ports: tuple[int, ...]


def _proxy_rules(proxy: ProxyEgress | None) -> str:
    if proxy is None:
        return ""
    ports = proxy.ports[0] if len(proxy.ports) == 1 else "{ " + ", ".join(map(str, sorted(proxy.ports))) + " }"
    return (f"\n\t\tmeta skuid {proxy.uid} ip daddr @upstream4 meta l4proto {{ 6, 17 }} th dport 53 accept"
            f"\n\t\tmeta skuid {proxy.uid} tcp dport {ports} accept")


@dataclass(frozen=True, slots=True)
class RelayEgress:
    """An upstream proxy (core/upstream_proxy.py): the session's new TCP connections to allowed
    destinations are redirected to the filter's relay on ``port``, which alone (its sockets marked) may
    reach the proxy at ``proxy``:``proxy_port``. No allowed destination is reached directly."""

    port: int
    proxy: ipaddress.IPv4Address
    proxy_port: int


def _relay_out(relay: RelayEgress | None) -> str:
    if relay is None:
        return ""
    # A redirected packet keeps the output device it was routed to before the nat chain: `oif "lo"` misses it.
    # A revoked grant's relayed flows are cut by where they were headed (the conntrack entry's original
    # destination): their packets' own destination is the relay.
    return ("\n\t\tct original ip daddr @revoked4 counter goto refuse"
            f"\n\t\tip daddr 127.0.0.1 tcp dport {relay.port} accept"
            f"\n\t\tmeta mark 0x{RELAY_MARK:08x} ip daddr {relay.proxy} tcp dport {relay.proxy_port} accept")


def _relay_chain(relay: RelayEgress | None, allowed: list[LiteralRule], denied: list[LiteralRule]) -> str:
    """The nat chain: the filter's own sockets and refused destinations pass untouched (the output chain
    refuses the latter), allowed ones go to the relay."""
    if relay is None:
        return ""
    to = f"redirect to :{relay.port}"
    lines = [f"meta mark {{ 0x{RESOLVER_MARK:08x}, 0x{RELAY_MARK:08x} }} return", "ip daddr @revoked4 return",
             *(f"ip daddr {r.target}{f' tcp dport {r.port}' if r.port else ''} return" for r in denied),
             f"ip daddr @allow4 meta l4proto 6 {to}", f"ip daddr . tcp dport @allow4_port {to}",
             *(f"ip daddr {r.target} {f'tcp dport {r.port}' if r.port else 'meta l4proto 6'} {to}" for r in allowed)]
    body = "".join(f"\t\t{line}\n" for line in lines)
    return ("\n\t# Upstream proxy: the session's new TCP connections to allowed destinations go to the relay,\n"
            "\t# which sends each on as CONNECT name:port; none leaves directly.\n"
            "\tchain relay {\n\t\ttype nat hook output priority dstnat; policy accept;\n" + body + "\t}\n")


def _published_rule(ports: tuple[int, ...]) -> str:
    if not ports:
        return ""
    unique = sorted(set(ports))
    listed = str(unique[0]) if len(unique) == 1 else "{ " + ", ".join(map(str, unique)) + " }"
    return f"\n\t\ttcp dport {listed} ct state new accept"


def render_ruleset(session_id: str, policy: EgressPolicy | None = None,
                   upstreams: tuple[ipaddress.IPv4Address, ...] = (), proxy: ProxyEgress | None = None,
                   published: tuple[int, ...] = (), relay: RelayEgress | None = None) -> str:
    """The nft ruleset (nft -f syntax) for ``policy``; no policy means no egress at all. ``proxy``: a
    pod's credential proxy, by its uid (none in a local session: its proxy runs on the host).
    ``published``: the session's ports that accept new inbound TCP (core/publish.py); nothing else does.
    ``relay``: an upstream proxy; allowed TCP then goes through the filter's relay only.

    dejima/templates/nft_ruleset.py with its ``${name}`` slots filled; the lists are rendered here,
    one rule per line. A slot without a value is an error, never an empty string (string.Template
    rather than jinja2: a start does not pay ~20 ms to import it).
    """
    policy = policy or EgressPolicy()
    allowed = _literals(policy.literal_entries())
    denied = _literals(entry for entry, _ in policy.denied if entry.kind == "network")
    return Template(RULESET).substitute(
        session_id=session_id,
        table=TABLE,
        upstream_elements=f"\n\t\telements = {{ {', '.join(str(a) for a in upstreams)} }}" if upstreams else "",
        resolver_mark=f"0x{RESOLVER_MARK:08x}",
        proxy_rules=_proxy_rules(proxy) + _relay_out(relay),
        published_ports=_published_rule(published),
        nflog_group=NFLOG_GROUP,
        log_rate=LOG_RATE,
        log_burst=LOG_BURST,
        engine_resolver=ENGINE_RESOLVER,
        denied_literals="".join(f"\n\t\tip daddr {r.target}{f' tcp dport {r.port}' if r.port else ''} "
                                "counter goto refuse" for r in denied),
        direct="" if relay is not None else "".join(
            f"\n\t\tip daddr {r.target} {f'tcp dport {r.port}' if r.port else 'meta l4proto 6'} accept"
            for r in allowed) + "\n\t\tip daddr @allow4 meta l4proto 6 accept"
        "\n\t\tip daddr . tcp dport @allow4_port accept",
        relay_chain=_relay_chain(relay, allowed, denied),
    )
