import socket
import struct

from dejima.filter.nflog import NFULA_PAYLOAD, NFULA_PREFIX, _attribute, parse_attributes, parse_packet


def ipv4_tcp(dst: str, port: int) -> bytes:
    header = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 40, 0, 0, 64, 6, 0, socket.inet_aton("10.0.0.2"),
                         socket.inet_aton(dst))
    return header + struct.pack("!HH", 40000, port) + b"\0" * 16


def test_logged_tcp_packet_names_destination_and_port() -> None:
    attributes = _attribute(NFULA_PREFIX, b"dejima-deny \0") + _attribute(NFULA_PAYLOAD, ipv4_tcp("203.0.113.5", 443))
    found = parse_attributes(attributes)
    assert found[NFULA_PREFIX] == b"dejima-deny \0"
    assert parse_packet(found[NFULA_PAYLOAD]) == {"address": "203.0.113.5", "protocol": "tcp", "port": 443}


def test_non_ipv4_payload_is_ignored() -> None:
    assert parse_packet(b"\x60" + b"\0" * 39) is None
    assert parse_packet(b"") is None
