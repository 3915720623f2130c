#!/usr/bin/python3 -I
"""Why a name is refused: the refusals the resolver names, and ``dejima-why``, which reads them back.

Every refusal of the filter's resolver carries an Extended DNS Error (RFC 8914, option 15) whose
text is ``dejima: KIND: REASON``; ``KINDS`` is the one list of those kinds, with the advice an
agent gets for each. The resolver (resolver.py) writes them; ``dejima-why HOST``, this file copied
into the session image as /usr/local/bin/dejima-why, asks the session's resolver for HOST and says
which kind of refusal it met, or that the name is allowed, in words an agent can act on: a refused
name is policy, not a network fault, and ``dejima-allow`` on the host is how to ask for more.

This file is standard library only and imports nothing of dejima's: the session image holds it
alone. The command talks to one address, the loopback resolver named in /etc/resolv.conf (the
filter's, in a session); anything else there and it sends nothing. What the resolver says is data:
printed with every character outside printable ASCII escaped, so no terminal control passes.
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
import struct
import sys
from typing import NamedTuple

EDE_OPTION = 15  # Extended DNS Errors, RFC 8914
TYPE_A, TYPE_OPT = 1, 41
NOERROR, FORMERR, SERVFAIL, NXDOMAIN, REFUSED = 0, 1, 2, 3, 5
PREFIX = "dejima: "
EDE_TEXT_LIMIT = 200  # characters: a refusal of a 253-character name still fits 512 octets
RESOLV_CONF = "/etc/resolv.conf"
PAYLOAD = 1232
TIMEOUT = 4.0  # seconds per try; the resolver gives its upstream 2.5 s


class RefusalKind(NamedTuple):
    token: str  # the KIND in the EDE text
    code: int  # the EDE info-code
    status: int  # dejima-why's exit status: 1 refused by dejima, 3 allowed but nothing usable
    explain: str  # what dejima-why says, with {host}, {reason} and {grant} (HOST or HOST:PORT)


NOT_ALLOWED = RefusalKind("not-allowed", 18, 1, (
    "refused by dejima's policy: {host} is not on this session's allow list.\n"
    "This is not a network fault: retrying will not help. Ask the user to run `dejima-allow {grant}`\n"
    "on the host; the grant takes effect at once, without a restart."))
DENIED = RefusalKind("denied", 18, 1, (
    "refused by dejima's deny list: {reason}.\n"
    "Retrying will not help, and no grant lifts a deny entry: only the user's settings can."))
CREDENTIAL = RefusalKind("credential", 18, 1, (
    "refused by dejima: the name carries a placeholder or decoy credential of this session ({reason}).\n"
    "Names that could carry a credential out are never resolved. Retrying will not help."))
REVOKED = RefusalKind("revoked", 18, 1, (
    "refused by dejima: the grant for {host} was revoked ({reason}).\n"
    "Ask the user to run `dejima-allow {grant}` on the host if you still need it."))
MALFORMED_QUERY = RefusalKind("malformed-query", 18, 1, "refused by dejima: not an ordinary DNS question ({reason}).")
ALIAS_DENIED = RefusalKind("alias-denied", 15, 1, (
    "refused by dejima's policy: {host} is allowed, but its answer is an alias of a denied name ({reason}).\n"
    "Retrying will not help, and a grant of {host} does not lift it."))
ANSWER_DENIED = RefusalKind("answer-denied", 15, 1, (
    "refused by dejima's policy: {host} is allowed, but it resolves only to addresses a session may\n"
    "not reach ({reason}): loopback, private networks, cloud metadata, the host. Retrying will not help.\n"
    "If the user means you to reach an internal service there, they can add its network to\n"
    "[network] answer_networks in dejima's settings."))
MALFORMED_ANSWER = RefusalKind("malformed-answer", 15, 1, (
    "refused by dejima: {host} is allowed, but the upstream DNS's answer could not be used ({reason})."))
UPSTREAM_FAILED = RefusalKind("upstream-failed", 22, 3, (
    "{host} is allowed, but the upstream DNS gave no usable answer ({reason}).\n"
    "This is a DNS fault outside the session, not dejima's policy: retrying later may help."))
NO_IPV6 = RefusalKind("no-ipv6", 0, 3, (
    "sessions have no IPv6: an AAAA question gets an empty answer ({reason}); use the IPv4 (A) addresses."))
KINDS = {kind.token: kind for kind in (NOT_ALLOWED, DENIED, CREDENTIAL, REVOKED, MALFORMED_QUERY, ALIAS_DENIED,
                                       ANSWER_DENIED, MALFORMED_ANSWER, UPSTREAM_FAILED, NO_IPV6)}


def printable(text: str) -> str:
    """``text`` with every character outside printable ASCII written as an escape: data, never control."""
    if text.isascii() and text.isprintable():  # the common case, at C speed: a refusal is on a hot path
        return text
    return "".join(c if " " <= c <= "~" else f"\\x{ord(c):02x}" if ord(c) < 256 else f"\\u{ord(c):04x}"
                   for c in text)


def ede(kind: RefusalKind, reason: str) -> tuple[int, bytes]:
    """The EDE info-code and text of a refusal of ``kind``: printable ASCII, at most EDE_TEXT_LIMIT."""
    return kind.code, printable(f"{PREFIX}{kind.token}: {reason}")[:EDE_TEXT_LIMIT].encode("ascii")


def read_ede(text: bytes) -> tuple[RefusalKind | None, str]:
    """The kind and reason an EDE text names; (None, the text) when it is not dejima's or names no kind
    this file knows. The reason comes back printable."""
    shown = printable(text.decode("latin-1"))
    if not shown.startswith(PREFIX):
        return None, shown
    token, _, reason = shown[len(PREFIX):].partition(": ")
    kind = KINDS.get(token)
    return (kind, reason) if kind is not None else (None, shown[len(PREFIX):])


# --- the command ------------------------------------------------------------------------------------

LABEL = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)\Z")


class Target(NamedTuple):
    host: str  # lower-case letters, digits, hyphens and dots
    port: int | None


class Usage(ValueError):
    """An argument dejima-why cannot ask about; the message says why (exit 2)."""


def target(argument: str) -> Target:
    """The host (and port) of HOST, HOST:PORT or a URL."""
    text = argument.strip()
    if "://" in text:
        text = text.split("://", 1)[1]
    text = text.split("/", 1)[0].split("?", 1)[0].rsplit("@", 1)[-1]
    port: int | None = None
    if text.count(":") == 1:
        text, _, digits = text.partition(":")
        if not (digits.isascii() and digits.isdigit()) or not 0 < int(digits) < 65536 or digits.startswith("0"):
            raise Usage(f"{printable(argument)}: the port is not a number from 1 to 65535")
        port = int(digits)
    host = text.rstrip(".").lower()
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        pass
    else:
        raise Usage(f"{printable(host)} is an address, and dejima-why asks about names. dejima lets a session reach "
                    "an address\nonly when the policy lists it or an allowed name resolved to it in this session; "
                    "a connection\nrefused there (\"Connection refused\") is dejima's policy. Ask the user to run "
                    f"`dejima-allow {printable(host if port is None else f'{host}:{port}')}`\non the host.")
    try:
        host = host.encode("idna").decode("ascii") if not host.isascii() else host
    except UnicodeError:
        raise Usage(f"{printable(argument)} is not a host name") from None
    labels = host.split(".")
    if not host or len(host) > 253 or not all(LABEL.match(label) for label in labels):
        raise Usage(f"{printable(argument)} is not a host name (letters, digits, hyphens and dots)")
    return Target(host, port)


def resolver_of(resolv_conf: str) -> str:
    """The loopback address of the first nameserver in resolv.conf's text; Usage when it is not one
    (not a dejima session: dejima-why sends nothing anywhere else)."""
    for line in resolv_conf.splitlines():
        fields = line.split()
        if len(fields) >= 2 and fields[0] == "nameserver":
            try:
                address = ipaddress.ip_address(fields[1])
            except ValueError:
                break
            if address.version == 4 and address.is_loopback:
                return str(address)
            raise Usage(f"the resolver in {RESOLV_CONF} is {printable(fields[1])}, not dejima's (127.0.0.1): "
                        "this does not look like a dejima session, and dejima-why asks no other resolver")
    raise Usage(f"{RESOLV_CONF} names no loopback resolver: this does not look like a dejima session")


def query(host: str, qid: int) -> bytes:
    """An A question for ``host`` with recursion desired and EDNS (so refusals carry their reason)."""
    name = b"".join(bytes((len(label),)) + label.encode("ascii") for label in host.split(".")) + b"\x00"
    opt = b"\x00" + struct.pack("!HHIH", TYPE_OPT, PAYLOAD, 0, 0)
    return struct.pack("!HHHHHH", qid, 0x0100, 1, 0, 0, 1) + name + struct.pack("!HH", TYPE_A, 1) + opt


class ResolverReply(NamedTuple):
    rcode: int
    addresses: tuple[str, ...]  # the A records of the answer section
    ede: tuple[int, bytes] | None  # the first Extended DNS Error: info-code, text
    truncated: bool


class Unreadable(ValueError):
    """A reply dejima-why cannot read, or one to another question."""


def _skip_name(data: bytes, at: int) -> int:
    for _ in range(128):
        if at >= len(data):
            raise Unreadable("a name runs past the reply")
        size = data[at]
        if size >= 0xC0:
            return at + 2
        if size > 63:
            raise Unreadable("an unknown label type")
        if size == 0:
            return at + 1
        at += 1 + size
    raise Unreadable("a name of too many labels")


def read_reply(data: bytes, asked: bytes) -> ResolverReply:
    """The reply ``data`` to the query ``asked``: same id, a response, the same question."""
    if len(data) < 12 or data[:2] != asked[:2] or not data[2] & 0x80:
        raise Unreadable("not a reply to this query")
    flags, qd, an, ns, ar = struct.unpack_from("!HHHHH", data, 2)
    section = asked[12:len(asked) - 11]  # the question, before our OPT record
    at = 12
    if qd:
        end = _skip_name(data, at) + 4
        if qd != 1 or data[at:end].lower() != section.lower():
            raise Unreadable("a reply to another question")
        at = end
    addresses: list[str] = []
    found: tuple[int, bytes] | None = None
    for index in range(an + ns + ar):
        at = _skip_name(data, at)
        if at + 10 > len(data):
            raise Unreadable("a record runs past the reply")
        rtype, _rclass, _ttl, size = struct.unpack_from("!HHIH", data, at)
        start, at = at + 10, at + 10 + size
        if at > len(data):
            raise Unreadable("a record runs past the reply")
        if index < an and rtype == TYPE_A and size == 4:
            addresses.append(".".join(str(b) for b in data[start:at]))
        elif index >= an + ns and rtype == TYPE_OPT and found is None:
            found = _ede_of(data[start:at])
    return ResolverReply(flags & 0xF, tuple(addresses), found, bool(flags & 0x0200))


def _ede_of(options: bytes) -> tuple[int, bytes] | None:
    at = 0
    while at + 4 <= len(options):
        code, size = struct.unpack_from("!HH", options, at)
        value = options[at + 4:at + 4 + size]
        if code == EDE_OPTION and len(value) >= 2 and len(value) == size:
            return struct.unpack_from("!H", value)[0], value[2:]
        at += 4 + size
    return None


class Explanation(NamedTuple):
    status: int  # 0 allowed, 1 refused by dejima, 3 allowed but nothing usable
    text: str


def explain(found: Target, reply: ResolverReply) -> Explanation:
    """What ``reply`` says about ``found``, for the agent."""
    host = found.host
    grant = f"{host}:{found.port}" if found.port else host
    if reply.ede is not None:
        kind, reason = read_ede(reply.ede[1])
        if kind is not None:
            return Explanation(kind.status, kind.explain.format(host=host, grant=grant, reason=reason))
        if reply.rcode != NOERROR:
            return Explanation(1 if reply.rcode == REFUSED else 3,
                           f"dejima's resolver answered {_rcode(reply.rcode)} for {host}: {reason}")
    if reply.rcode == NOERROR and reply.addresses:
        port = (f"Port {found.port} is allowed only if the policy names it; a connection there that is refused\n"
                f"(\"Connection refused\") means it is not: ask the user for `dejima-allow {grant}`."
                if found.port else
                "Connections to them go through on the ports the policy allows for the name; one that is refused\n"
                f"(\"Connection refused\") hit a port it does not: ask the user for `dejima-allow {host}:PORT`.")
        return Explanation(0, f"allowed: {host} resolves to {', '.join(reply.addresses)}.\n{port}")
    if reply.rcode == NOERROR:
        return Explanation(3, f"{host} is allowed, but it has no IPv4 address: the upstream DNS answered no A record.")
    if reply.rcode == NXDOMAIN:
        return Explanation(3, f"{host} is allowed, but it does not exist: the upstream DNS answered NXDOMAIN.")
    if reply.rcode == REFUSED:
        return Explanation(1, f"dejima's resolver refused {host} without saying why.")
    return Explanation(3, f"dejima's resolver answered {_rcode(reply.rcode)} for {host} without saying why.")


def _rcode(rcode: int) -> str:
    return {FORMERR: "FORMERR", SERVFAIL: "SERVFAIL", NXDOMAIN: "NXDOMAIN", REFUSED: "REFUSED"}.get(rcode, str(rcode))


def ask(host: str, server: str, port: int = 53, timeout: float = TIMEOUT) -> ResolverReply:
    """Ask ``server`` (the session's resolver) for ``host`` over UDP, then over TCP when truncated.
    OSError or TimeoutError when it does not answer."""
    packet = query(host, int.from_bytes(os.urandom(2), "big"))
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(timeout)
        sock.connect((server, port))
        sock.send(packet)
        for _ in range(8):  # a stray datagram is skipped; its sender can only be in this namespace
            try:
                reply = read_reply(sock.recv(65535), packet)
                break
            except Unreadable:
                continue
        else:
            raise TimeoutError("no reply to this query")
    if not reply.truncated:
        return reply
    with socket.create_connection((server, port), timeout=timeout) as stream:
        stream.sendall(struct.pack("!H", len(packet)) + packet)
        size = struct.unpack("!H", _exactly(stream, 2))[0]
        return read_reply(_exactly(stream, size), packet)


def _exactly(stream: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = stream.recv(size - len(data))
        if not chunk:
            raise ConnectionError("the resolver closed the connection")
        data += chunk
    return data


USAGE = """usage: dejima-why HOST[:PORT]

Says why this dejima session cannot reach HOST, or that it may: asks the session's own resolver
(nothing else) and reads the reason dejima gives. Exit status: 0 allowed, 1 refused by dejima's
policy, 2 bad arguments or not in a dejima session, 3 allowed but the DNS gave no usable answer,
4 dejima's resolver did not answer."""


def main(argv: list[str], resolv_conf: str = RESOLV_CONF, port: int = 53) -> int:
    if len(argv) != 1 or argv[0] in ("-h", "--help"):
        print(USAGE, file=sys.stdout if argv[:1] in (["-h"], ["--help"]) else sys.stderr)
        return 0 if argv[:1] in (["-h"], ["--help"]) else 2
    try:
        found = target(argv[0])
        with open(resolv_conf, encoding="utf-8", errors="replace") as stream:
            server = resolver_of(stream.read())
    except Usage as exc:
        print(f"dejima-why: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"dejima-why: cannot read {resolv_conf}: {printable(exc.strerror or str(exc))}", file=sys.stderr)
        return 2
    try:
        reply = ask(found.host, server, port)
    except (OSError, Unreadable) as exc:  # TimeoutError is an OSError
        print(f"dejima-why: dejima's resolver at {server} did not answer ({printable(str(exc))}): the session's "
              "filter may have stopped", file=sys.stderr)
        return 4
    finding = explain(found, reply)
    print(finding.text)
    return finding.status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
