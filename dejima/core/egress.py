"""The egress policy: which (name, port) pairs and addresses a session may reach.

Entry grammar (srt's, as a floor):

    example.com            the name itself, any port
    example.com:443        the name, port 443 only
    *.example.com          strict subdomains only (not example.com itself)
    203.0.113.7[:port]     an IPv4 address (every spelling: 0xcb.0.113.7, 3405803783, ...)
    203.0.113.0/24[:port]  an IPv4 network
    [2001:db8::1][:port]   an IPv6 address or network, bracketed

Denied entries beat allowed ones and carry a reason shown to the agent and the user. Names are
normalised (case, trailing dot, IDNA). Overly broad patterns (``*``, ``*.com``, ``*.co.uk``)
are refused. This module is stdlib-only: it also runs inside the filter container.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field

from dejima.errors import InputError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

_LABEL = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)\Z")
# Multi-label public suffixes under which a wildcard would still be far too broad. Not the whole
# public suffix list: the common ones people type. Single-label suffixes are refused by rule.
BROAD_SUFFIXES = frozenset({
    "co.uk", "org.uk", "ac.uk", "gov.uk", "me.uk", "com.au", "net.au", "org.au", "co.jp", "ne.jp", "or.jp",
    "co.nz", "com.br", "com.cn", "com.tw", "com.hk", "co.in", "co.za", "com.mx", "co.kr", "com.sg",
    "github.io", "githubusercontent.com", "herokuapp.com", "appspot.com", "cloudfront.net", "amazonaws.com",
    "azurewebsites.net", "vercel.app", "netlify.app", "pages.dev", "workers.dev", "web.app", "firebaseapp.com",
})


ENTRY_HINT = ("write a name (example.com), a wildcard for subdomains (*.example.com), an IPv4 address or network, "
              "or a bracketed IPv6 one ([2001:db8::1]), each with an optional :port (1-65535)")


class PolicyError(InputError):
    reference = "invalid-egress-entry"

    def __init__(self, message: str, *, rule: str = "", hint: str | None = None, context: str | None = None,
                 exit_code: int | None = None) -> None:
        super().__init__(message, hint=hint, context=context, exit_code=exit_code)
        self.rule = rule  # what is wrong with the entry alone, for messages that say where it was written their own way


@dataclass(frozen=True, slots=True)
class Entry:
    """One parsed allow or deny entry."""

    text: str  # as written, for messages
    kind: str  # "name", "wildcard" or "network"
    name: str = ""  # normalised name; for wildcards the suffix after "*."
    network: IPNetwork | None = None  # addresses are /32 or /128 networks
    port: int | None = None  # None: every port
    origin: str = field(default="", compare=False)  # where the entry was written, for the plan's reader

    def matches_name(self, qname: str) -> bool:
        if self.kind == "name":
            return qname == self.name
        if self.kind == "wildcard":
            return qname.endswith("." + self.name)
        return False

    def matches_address(self, address: IPAddress) -> bool:
        return self.network is not None and address in self.network

    @property
    def canonical(self) -> str:
        if self.kind == "network":
            assert self.network is not None
            single = self.network.num_addresses == 1
            host = str(self.network.network_address) if single else str(self.network)
            host = f"[{host}]" if self.network.version == 6 else host
        else:
            host = ("*." if self.kind == "wildcard" else "") + self.name
        return host if self.port is None else f"{host}:{self.port}"


def _fail(text: str, rule: str, where: str) -> PolicyError:
    return PolicyError(f"{where}: invalid egress entry {text!r}: {rule}", rule=rule, hint=ENTRY_HINT)


def _parse_port(text: str, port: str, where: str) -> int:
    if not port.isdigit() or port.startswith("0") or not 1 <= int(port) <= 65535:
        raise _fail(text, f"port {port!r} must be a number from 1 to 65535 without leading zeros", where)
    return int(port)


def parse_ipv4_spelling(text: str) -> ipaddress.IPv4Address | None:
    """Every spelling inet_aton accepts (127.1, 0x7f.0.0.1, 2130706433, 0177.0.0.1) -> the address."""
    parts = text.split(".")
    if not 1 <= len(parts) <= 4 or any(not p for p in parts):
        return None
    values = []
    for part in parts:
        lowered = part.lower()
        try:
            if lowered.startswith("0x"):
                values.append(int(lowered[2:], 16))
            elif len(part) > 1 and part.startswith("0"):
                values.append(int(part, 8))
            elif part.isdigit():
                values.append(int(part))
            else:
                return None
        except ValueError:
            return None
    *head, last = values
    if any(v > 255 for v in head) or last >= 256 ** (5 - len(values)):
        return None
    number = 0
    for v in head:
        number = number * 256 + v
    number = (number << (8 * (5 - len(values)))) + last
    return ipaddress.IPv4Address(number) if number < 2**32 else None


def normalise_name(text: str) -> str:
    """Lower-case, trailing dot removed, IDNA-encoded; raises ValueError when not a host name."""
    name = text.strip().rstrip(".").lower()
    if not name or len(name) > 253:
        raise ValueError("a name has 1 to 253 characters")
    try:
        name = ".".join(label.encode("idna").decode("ascii") if not label.isascii() else label
                        for label in name.split("."))
    except UnicodeError as exc:
        raise ValueError(f"not a valid international name ({exc})") from None
    for label in name.split("."):
        if not _LABEL.match(label):
            raise ValueError(f"label {label!r} must be 1-63 letters, digits or '-', not starting or ending with '-'")
    return name


def _split_port(text: str, where: str) -> tuple[str, int | None]:
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep:
            raise _fail(text, "an opening '[' needs its closing ']'", where)
        if rest and not rest.startswith(":"):
            raise _fail(text, "only ':port' may follow ']'", where)
        return "[" + host + "]", _parse_port(text, rest[1:], where) if rest else None
    if text.count(":") > 1:
        raise _fail(text, "an IPv6 address must be bracketed, e.g. [2001:db8::1]:443", where)
    host, sep, port = text.partition(":")
    return host, _parse_port(text, port, where) if sep else None


def parse_entry(text: str, where: str = "egress policy") -> Entry:
    raw = text.strip()
    if not raw:
        raise _fail(text, "an entry cannot be empty", where)
    if "://" in raw:
        raise _fail(text, "write the host, not a URL (no scheme)", where)
    host, port = _split_port(raw, where)
    if host.startswith("["):
        try:
            network: IPNetwork = ipaddress.IPv6Network(host[1:-1], strict=True)
        except ValueError as exc:
            raise _fail(text, f"not an IPv6 address or network ({exc})", where) from None
        return Entry(text, "network", network=network, port=port)
    if "/" in host:
        address, _, prefix = host.partition("/")
        parsed = parse_ipv4_spelling(address)
        if parsed is None or not prefix.isdigit():
            raise _fail(text, "a network is an IPv4 address, '/', and a prefix length", where)
        try:
            network = ipaddress.IPv4Network(f"{parsed}/{prefix}", strict=True)
        except ValueError as exc:
            raise _fail(text, f"not a valid network ({exc})", where) from None
        return Entry(text, "network", network=network, port=port)
    address4 = parse_ipv4_spelling(host)
    if address4 is not None:
        return Entry(text, "network", network=ipaddress.IPv4Network(address4), port=port)
    if host == "*":
        raise _fail(text, "'*' alone would allow everything; name the sites, e.g. *.example.com", where)
    wildcard = host.startswith("*.")
    if "*" in (host[2:] if wildcard else host):
        raise _fail(text, "'*' may only be the whole first label, as in *.example.com", where)
    try:
        name = normalise_name(host[2:] if wildcard else host)
    except ValueError as exc:
        raise _fail(text, str(exc), where) from None
    if "." not in name:
        rule = ("a wildcard needs at least two labels after '*.' (*.com is far too broad)" if wildcard
                else "a name needs a dot (single-label names are refused)")
        raise _fail(text, rule, where)
    if wildcard and name in BROAD_SUFFIXES:
        raise _fail(text, f"*.{name} covers everyone's sites under a public suffix; name the site", where)
    if name.replace(".", "").isdigit():
        raise _fail(text, "looks like an address but is not a valid one", where)
    return Entry(text, "wildcard" if wildcard else "name", name=name, port=port)


@dataclass(frozen=True, slots=True)
class Verdict:
    allowed: bool
    reason: str
    ports: frozenset[int] | None = None  # when allowed: None means every port
    entry: str = ""  # the entry that decided


@dataclass(frozen=True, slots=True)
class EgressPolicy:
    allowed: tuple[Entry, ...] = ()
    denied: tuple[tuple[Entry, str], ...] = ()
    # Addresses an allowed name's answer may not point at (host, engine gateway), beyond the classes.
    denied_addresses: tuple[IPNetwork, ...] = field(default_factory=tuple)
    # Private networks an allowed name's answer may point into (an internal mirror, say).
    answer_networks: tuple[IPNetwork, ...] = field(default_factory=tuple)

    def name_verdict(self, qname: str) -> Verdict:
        try:
            name = normalise_name(qname)
        except ValueError as exc:
            return Verdict(False, f"malformed name: {exc}")
        for entry, reason in self.denied:
            if entry.matches_name(name):
                return Verdict(False, reason, entry=entry.text)
        matching = [e for e in self.allowed if e.matches_name(name)]
        if not matching:
            return Verdict(False, f"{name} is not on the allow list")
        if any(e.port is None for e in matching):
            return Verdict(True, "allowed", None, matching[0].text)
        return Verdict(True, "allowed", frozenset(e.port for e in matching if e.port), matching[0].text)

    def denied_reason(self, name: str) -> str | None:
        """The deny list's reason when ``name`` (already normalised) is on it, else None: a name
        met inside an answer's CNAME chain is refused by this, whatever the allow list says."""
        for entry, reason in self.denied:
            if entry.matches_name(name):
                return reason
        return None

    def address_verdict(self, address: IPAddress) -> Verdict:
        """May an allowed name's answer point at ``address``?"""
        for entry, reason in self.denied:
            if entry.matches_address(address):
                return Verdict(False, reason, entry=entry.text)
        for entry in self.allowed:
            if entry.matches_address(address):
                return Verdict(True, "explicitly allowed", entry=entry.text)
        for network in self.denied_addresses:
            if address in network:
                return Verdict(False, f"{address} belongs to this host or the container engine")
        special = address_class(address)
        if special and any(address in n for n in self.answer_networks if n.version == address.version):
            return Verdict(True, f"in an allowed answer network ({special})")
        if special:
            return Verdict(False, f"{address} is a {special} address")
        return Verdict(True, "public address")

    def literal_entries(self) -> tuple[Entry, ...]:
        """Allowed address/network entries, rendered as static rules (minus denied ones)."""
        return tuple(e for e in self.allowed if e.kind == "network")


_METADATA = tuple(ipaddress.ip_network(n) for n in (
    "100.100.100.200/32", "168.63.129.16/32", "192.0.0.192/32", "fd00:ec2::/32", "fd20:ce::254/128",
    "fd00:c1::a9fe:a9fe/128", "fd00:42::42/128", "fd00:a9fe:a9fe::1/128", "fd00:100::100:200/128",
))
_CGNAT = ipaddress.ip_network("100.64.0.0/10")
# Special-purpose ranges (IANA's registries) the stdlib counts as "private" though they are not: each
# named for what it is, so a refusal says why ("203.0.113.80 is a documentation address").
_SPECIAL_PURPOSE = tuple((ipaddress.ip_network(network), kind) for network, kind in (
    ("0.0.0.0/8", "this-network (0.0.0.0/8)"),
    ("192.0.0.0/24", "IETF protocol assignment (192.0.0.0/24)"),
    ("192.0.2.0/24", "documentation (TEST-NET-1, RFC 5737)"),
    ("198.51.100.0/24", "documentation (TEST-NET-2, RFC 5737)"),
    ("203.0.113.0/24", "documentation (TEST-NET-3, RFC 5737)"),
    ("198.18.0.0/15", "benchmarking (RFC 2544)"),
    ("255.255.255.255/32", "broadcast"),
    ("240.0.0.0/4", "reserved (240.0.0.0/4)"),
    ("2001:db8::/32", "documentation (RFC 3849)"),
    ("2001:2::/48", "benchmarking (RFC 5180)"),
    ("100::/64", "discard-only (RFC 6666)"),
    ("2001::/23", "IETF protocol assignment (2001::/23)"),
))


def address_class(address: IPAddress) -> str | None:
    """The denied class an answer address falls in, or None for an ordinary public address."""
    if isinstance(address, ipaddress.IPv6Address):
        embedded = address.ipv4_mapped or address.sixtofour
        if embedded is not None:
            return address_class(embedded) or None
        if address in ipaddress.ip_network("64:ff9b::/96"):
            return address_class(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
    if any(address in n for n in _METADATA if n.version == address.version):
        return "cloud metadata"
    checks = (
        ("loopback", address.is_loopback), ("unspecified", address.is_unspecified),
        ("link-local (cloud metadata)", address.is_link_local), ("multicast", address.is_multicast),
        ("CGNAT", isinstance(address, ipaddress.IPv4Address) and address in _CGNAT),
    )
    for name, hit in checks:
        if hit:
            return name
    if not (address.is_private or address.is_reserved):
        return None
    # Refused as before (the stdlib's lists decide), only named for what each range is.
    for network, kind in _SPECIAL_PURPOSE:
        if address.version == network.version and address in network:
            return kind
    if address.is_private:  # what is left: RFC 1918 and unique-local
        return "unique-local (private)" if address.version == 6 else "private"
    return "reserved"


def parse_policy(allow: list[str], deny: list[tuple[str, str]], where: str = "egress policy",
                 denied_addresses: tuple[IPNetwork, ...] = (),
                 answer_networks: tuple[IPNetwork, ...] = ()) -> EgressPolicy:
    """``deny`` pairs an entry with the reason shown when it blocks something."""
    return EgressPolicy(
        allowed=tuple(parse_entry(text, where) for text in allow),
        denied=tuple((parse_entry(text, where), reason or f"{text} is on the deny list") for text, reason in deny),
        denied_addresses=denied_addresses,
        answer_networks=answer_networks,
    )


def policy_document(policy: EgressPolicy) -> dict[str, list[object]]:
    """The policy as JSON data: what the filter reads at start, and what its control channel lists."""
    return {
        "allow": [e.canonical for e in policy.allowed],
        "deny": [[e.canonical, reason] for e, reason in policy.denied],
        "denied_addresses": [str(n) for n in policy.denied_addresses],
        "answer_networks": [str(n) for n in policy.answer_networks],
    }


def policy_from_document(document: dict[str, list[object]], where: str) -> EgressPolicy:
    """The policy ``policy_document`` wrote; PolicyError (naming ``where``) for an entry it cannot read."""
    return parse_policy(
        [str(text) for text in document["allow"]],
        [(str(pair[0]), str(pair[1])) for pair in document["deny"]],  # type: ignore[index]
        where,
        tuple(ipaddress.ip_network(str(n)) for n in document["denied_addresses"]),
        tuple(ipaddress.ip_network(str(n)) for n in document.get("answer_networks", [])),
    )


def ttl_timeout(ttl: int, floor: int = 60, ceiling: int = 3600) -> int:
    """How long an answer's address stays in the allow set: the TTL, bounded on both sides."""
    return max(floor, min(ceiling, ttl))
