"""Reads the packets the ruleset logs to its nflog group and turns them into violation records.

Netlink, by hand (stdlib only): bind to the group, ask for the first bytes of each packet, and
parse the IPv4 header for destination, protocol and port. Repeats of one destination within a
few seconds are folded into one record, so a retry loop cannot flood the log.
"""

from __future__ import annotations

import asyncio
import errno
import socket
import struct
import time
from collections.abc import Callable
from typing import Any

NETLINK_NETFILTER = 12
NFNL_SUBSYS_ULOG = 4
NFULNL_MSG_PACKET = 0
NFULNL_MSG_CONFIG = 1
NFULA_CFG_CMD = 1
NFULA_CFG_MODE = 2
NFULA_CFG_QTHRESH = 5
NFULNL_CFG_CMD_BIND = 1
NFULNL_COPY_PACKET = 2
NFULA_PAYLOAD = 9
NFULA_PREFIX = 10
NLM_F_REQUEST, NLM_F_ACK = 1, 4
NLMSG_ERROR = 2
PROTOCOLS = {1: "icmp", 6: "tcp", 17: "udp"}
SO_RCVBUFFORCE = 33


def _attribute(kind: int, data: bytes) -> bytes:
    header = struct.pack("=HH", 4 + len(data), kind)
    return header + data + b"\0" * (-len(data) % 4)


def _message(kind: int, group: int, attributes: bytes, seq: int) -> bytes:
    body = struct.pack("=BBH", socket.AF_UNSPEC, 0, socket.htons(group)) + attributes
    return struct.pack("=IHHII", 16 + len(body), kind, NLM_F_REQUEST | NLM_F_ACK, seq, 0) + body


def parse_attributes(data: bytes) -> dict[int, bytes]:
    found: dict[int, bytes] = {}
    offset = 0
    while offset + 4 <= len(data):
        length, kind = struct.unpack_from("=HH", data, offset)
        if length < 4:
            break
        found[kind & 0x3FFF] = data[offset + 4:offset + length]
        offset += (length + 3) & ~3
    return found


def parse_packet(payload: bytes) -> dict[str, Any] | None:
    """Destination, protocol and port of a logged IPv4 packet."""
    if len(payload) < 20 or payload[0] >> 4 != 4:
        return None
    header_length = (payload[0] & 0x0F) * 4
    protocol = payload[9]
    record: dict[str, Any] = {"address": socket.inet_ntoa(payload[16:20]),
                              "protocol": PROTOCOLS.get(protocol, str(protocol))}
    if protocol in (6, 17) and len(payload) >= header_length + 4:
        record["port"] = struct.unpack_from("!H", payload, header_length + 2)[0]
    return record


class NflogReader:
    """Turns the ruleset's nflog packets into violation records, on the filter's event loop.

    A flood of blocked packets can overflow the netlink socket (ENOBUFS): the kernel then drops
    records, not packets (the ruleset rejects them either way). The reader counts the overflows,
    says so in one folded record, and goes on reading; it never dies of it.
    """

    RECEIVE_BUFFER = 4 << 20
    RECENT_ENTRIES = 4096

    def __init__(self, group: int, record: Callable[[dict[str, Any]], None],
                 domain_of: Callable[[str], str | None], fold_seconds: float = 5.0) -> None:
        self.group, self.record, self.domain_of, self.fold_seconds = group, record, domain_of, fold_seconds
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
        self.sock.bind((0, 0))
        try:  # beyond rmem_max needs CAP_NET_ADMIN, which the filter has; the plain size otherwise
            self.sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, self.RECEIVE_BUFFER)
        except OSError:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.RECEIVE_BUFFER)
        self.recent: dict[tuple[str, str, int | None], float] = {}
        self.overflows = 0
        self.overflow_reported = -1e9
        kind = (NFNL_SUBSYS_ULOG << 8) | NFULNL_MSG_CONFIG
        self._configure(_message(kind, group, _attribute(NFULA_CFG_CMD, bytes([NFULNL_CFG_CMD_BIND])), 1))
        mode = struct.pack("!IBB", 128, NFULNL_COPY_PACKET, 0)
        self._configure(_message(kind, group, _attribute(NFULA_CFG_MODE, mode), 2))
        # The kernel batches 100 packets or 1 s by default; a record should not wait for either.
        self._configure(_message(kind, group, _attribute(NFULA_CFG_QTHRESH, struct.pack("!I", 1)), 3))
        self.sock.setblocking(False)

    def _configure(self, message: bytes) -> None:
        self.sock.send(message)
        reply = self.sock.recv(65535)
        length, kind = struct.unpack_from("=IH", reply)
        if kind == NLMSG_ERROR:
            (error,) = struct.unpack_from("=i", reply, 16)
            if error != 0:
                raise OSError(-error, f"nflog group {self.group}: netlink refused the configuration")

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        """Read whenever the socket has data, on ``loop``."""
        loop.add_reader(self.sock.fileno(), self.drain)

    def drain(self) -> None:
        """Handle what is queued on the socket, without waiting for more."""
        while True:
            try:
                data = self.sock.recv(65535)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno != errno.ENOBUFS:
                    raise
                self._overflowed()
                continue
            self._dispatch(data)

    def _overflowed(self) -> None:
        self.overflows += 1
        now = time.monotonic()
        if now - self.overflow_reported >= self.fold_seconds:
            self.overflow_reported = now
            self.record({"kind": "log-overflow", "overflows": self.overflows,
                         "reason": "blocked packets came faster than they could be recorded (a flood); "
                                   "they were still blocked, some went unrecorded"})

    def _dispatch(self, data: bytes) -> None:
        offset = 0
        while offset + 16 <= len(data):
            length, kind = struct.unpack_from("=IH", data, offset)
            if length < 16:
                break
            if kind == (NFNL_SUBSYS_ULOG << 8) | NFULNL_MSG_PACKET:
                self._handle(data[offset + 20:offset + length])
            offset += (length + 3) & ~3

    def _handle(self, attributes: bytes) -> None:
        found = parse_attributes(attributes)
        packet = parse_packet(found.get(NFULA_PAYLOAD, b""))
        if packet is None:
            return
        key = (packet["address"], packet["protocol"], packet.get("port"))
        now = time.monotonic()
        if now - self.recent.get(key, -1e9) < self.fold_seconds:
            return
        if len(self.recent) >= self.RECENT_ENTRIES:  # bounded: forget what is past its fold window
            self.recent = {k: t for k, t in self.recent.items() if now - t < self.fold_seconds}
        self.recent[key] = now
        domain = self.domain_of(packet["address"])
        reason = "not allowed" if domain is None else f"{domain} is not allowed on this port or protocol"
        self.record({"kind": "connection", **packet, **({"domain": domain} if domain else {}), "reason": reason})
