"""The filter's resolver: the only DNS the session can use.

A name that is not allowed is answered REFUSED at once and never leaves the filter (no DNS
tunnelling through it). An allowed name is forwarded to the upstream resolvers on sockets that
carry the resolver mark, the only traffic to port 53 the ruleset lets out. In the answer:

- A records pointing at a denied address class (loopback, private, link-local/metadata, the host,
  the engine's gateway, ...) are dropped unless that exact address is allowed; when nothing
  survives, the answer becomes REFUSED.
- Surviving addresses go into the nft allow sets, with the allowed ports and a timeout derived
  from the TTL, *before* the answer reaches the client.
- CNAME chains are followed inside the answer of the allowed name: the addresses at the end of
  the chain count for the name that was asked, and the chain's other names are not thereby
  allowed for queries of their own.
- AAAA records are removed: sessions have no IPv6.

Refusals carry an Extended DNS Error (RFC 8914) with the reason when the client speaks EDNS.
"""

from __future__ import annotations

import ipaddress
import json
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from dnslib import EDNS0, QTYPE, RCODE, DNSRecord, EDNSOption
from dnslib.server import BaseResolver, DNSLogger, DNSServer

from dejima.core.egress import EgressPolicy, ttl_timeout
from dejima.filter import VIOLATION

SO_MARK = 36
SELF_CHECK_NAME = "dejima-self-check.invalid"  # ".invalid" can never be allowed: always refused
EDE_OPTION = 15
EDE_BLOCKED = 15
EDE_PROHIBITED = 18

Record = Callable[[dict[str, Any]], None]


class Forwarder:
    """Sends a query to the upstream resolvers (UDP, then TCP when the answer is truncated)."""

    def __init__(self, upstreams: list[str], mark: int, timeout: float = 3.0) -> None:
        self.upstreams, self.mark, self.timeout = upstreams, mark, timeout

    def _socket(self, kind: int) -> socket.socket:
        sock = socket.socket(socket.AF_INET, kind)
        sock.setsockopt(socket.SOL_SOCKET, SO_MARK, self.mark)
        sock.settimeout(self.timeout)
        return sock

    def _udp(self, packet: bytes, upstream: str) -> bytes:
        with self._socket(socket.SOCK_DGRAM) as sock:
            sock.connect((upstream, 53))
            sock.send(packet)
            while True:
                data = sock.recv(65535)
                if data[:2] == packet[:2]:
                    return data

    def _tcp(self, packet: bytes, upstream: str) -> bytes:
        with self._socket(socket.SOCK_STREAM) as sock:
            sock.connect((upstream, 53))
            sock.sendall(struct.pack("!H", len(packet)) + packet)
            length = struct.unpack("!H", _recv_exact(sock, 2))[0]
            return _recv_exact(sock, length)

    def query(self, packet: bytes) -> bytes:
        error: Exception = OSError("no upstream resolver configured")
        for upstream in self.upstreams:
            try:
                data = self._udp(packet, upstream)
                if DNSRecord.parse(data).header.tc:
                    data = self._tcp(packet, upstream)
                return data
            except (OSError, ValueError) as exc:
                error = exc
        raise OSError(f"no upstream answered: {error}")


def _recv_exact(sock: socket.socket, count: int) -> bytes:
    data = b""
    while len(data) < count:
        chunk = sock.recv(count - len(data))
        if not chunk:
            raise OSError("upstream closed the connection")
        data += chunk
    return data


class PolicyResolver(BaseResolver):  # type: ignore[misc]
    def __init__(self, policy: EgressPolicy, forwarder: Forwarder, add_addresses: Callable[..., None],
                 record: Record, ttl_floor: int = 60, ttl_ceiling: int = 3600) -> None:
        self.policy, self.forwarder, self.add_addresses, self.record = policy, forwarder, add_addresses, record
        self.ttl_floor, self.ttl_ceiling = ttl_floor, ttl_ceiling
        self.names: dict[str, str] = {}  # address -> the name it was last answered for

    def domain_of(self, address: str) -> str | None:
        return self.names.get(address)

    def _refuse(self, request: DNSRecord, reason: str, code: int) -> DNSRecord:
        reply = request.reply()
        reply.header.rcode = RCODE.REFUSED
        if any(rr.rtype == QTYPE.OPT for rr in request.ar):
            text = f"dejima: {reason}"[:200].encode("ascii", "replace")
            reply.add_ar(EDNS0(opts=[EDNSOption(EDE_OPTION, struct.pack("!H", code) + text)]))
        return reply

    def resolve(self, request: DNSRecord, handler: object) -> DNSRecord:
        qname = str(request.q.qname).rstrip(".")
        qtype = QTYPE.get(request.q.qtype, str(request.q.qtype))
        verdict = self.policy.name_verdict(qname)
        if not verdict.allowed and qname == SELF_CHECK_NAME:
            return self._refuse(request, verdict.reason, EDE_PROHIBITED)  # the filter's own probe
        if not verdict.allowed:
            self.record({"kind": "dns", "domain": qname, "qtype": qtype, "reason": verdict.reason})
            return self._refuse(request, verdict.reason, EDE_PROHIBITED)
        if request.q.qtype == QTYPE.AAAA:
            return request.reply()  # no IPv6 in sessions: an empty answer, nothing forwarded
        try:
            upstream = DNSRecord.parse(self.forwarder.query(request.pack()))
        except (OSError, ValueError) as exc:
            reply = request.reply()
            reply.header.rcode = RCODE.SERVFAIL
            self.record({"kind": "dns-upstream", "domain": qname, "qtype": qtype, "reason": str(exc)})
            return reply
        return self._filter_answer(request, upstream, qname, qtype, verdict.ports)

    def _filter_answer(self, request: DNSRecord, upstream: DNSRecord, qname: str, qtype: str,
                       ports: frozenset[int] | None) -> DNSRecord:
        reply = request.reply()
        reply.header.rcode = upstream.header.rcode
        kept: list[str] = []
        refused: list[tuple[str, str]] = []
        ttls: list[int] = []
        for rr in upstream.rr:
            if rr.rtype == QTYPE.AAAA:
                continue
            if rr.rtype == QTYPE.A:
                address = ipaddress.ip_address(str(rr.rdata))
                verdict = self.policy.address_verdict(address)
                self.names[str(address)] = qname
                if not verdict.allowed:
                    refused.append((str(address), verdict.reason))
                    continue
                kept.append(str(address))
                ttls.append(rr.ttl)
            reply.add_answer(rr)
        for dropped, reason in refused:
            self.record({"kind": "dns-answer", "domain": qname, "qtype": qtype, "address": dropped, "reason": reason})
        if refused and not kept:
            return self._refuse(request, f"{qname} resolves to a denied address ({refused[0][1]})", EDE_BLOCKED)
        if kept:
            timeout = ttl_timeout(min(ttls), self.ttl_floor, self.ttl_ceiling)
            # Into the allow sets before the client sees the answer, or its connect would race us.
            self.add_addresses(kept, sorted(ports) if ports is not None else None, timeout)
        return reply


class _QuietLogger(DNSLogger):  # type: ignore[misc]
    def __init__(self) -> None:
        super().__init__(log="-request,-reply,-truncated,-recv,-send,-data,-error", prefix=False)

    def log_error(self, handler: object, e: object) -> None:
        print(f"dejima-filter: resolver error: {e}", file=sys.stderr, flush=True)


def start_servers(resolver: PolicyResolver, address: str = "127.0.0.1", port: int = 53) -> list[DNSServer]:
    servers = [DNSServer(resolver, address=address, port=port, tcp=tcp, logger=_QuietLogger()) for tcp in (False, True)]
    for server in servers:
        server.start_thread()
    return servers


def self_check(address: str = "127.0.0.1", port: int = 53, timeout: float = 5.0) -> None:
    """The resolver answers over UDP and TCP (a refusal for a name no policy can allow)."""
    query = DNSRecord.question(SELF_CHECK_NAME, "A")
    for tcp in (False, True):
        answer = DNSRecord.parse(query.send(address, port, tcp=tcp, timeout=timeout))
        if answer.header.rcode != RCODE.REFUSED:
            raise OSError(f"resolver self-check over {'TCP' if tcp else 'UDP'} got {RCODE.get(answer.header.rcode)}")


class ViolationLog:
    """Violation records as JSON lines on stdout, where the launcher collects them."""

    PREFIX = VIOLATION

    def __init__(self, stream: Any = None) -> None:
        self.stream = stream or sys.stdout
        self.lock = threading.Lock()

    def __call__(self, record: dict[str, Any]) -> None:
        record = {"time": round(time.time(), 3), **record}
        with self.lock:
            self.stream.write(self.PREFIX + json.dumps(record, sort_keys=True) + "\n")
            self.stream.flush()
