"""Packs written by hand, for pushes git itself would never send: commits with forged headers, commits
stored as deltas against a base in the pack (OFS_DELTA) or against one the forge has (REF_DELTA, a thin
pack). Each entry is ("commit", content), ("ofs", index of an earlier entry, delta) or ("ref", base id,
delta); the pack's trailing SHA-1 is computed, so git reads it."""

from __future__ import annotations

import hashlib
import zlib

_KINDS = {"commit": 1, "ofs": 6, "ref": 7}


def commit_id(content: bytes) -> str:
    return hashlib.sha1(b"commit %d\0" % len(content) + content).hexdigest()


def _size_varint(size: int) -> bytes:
    out = bytearray()
    while True:
        byte, size = size & 0x7F, size >> 7
        out.append(byte | (0x80 if size else 0))
        if not size:
            return bytes(out)


def _object_header(kind: int, size: int) -> bytes:
    first = (kind << 4) | (size & 0x0F)
    size >>= 4
    out = bytearray([first | (0x80 if size else 0)])
    while size:
        byte, size = size & 0x7F, size >> 7
        out.append(byte | (0x80 if size else 0))
    return bytes(out)


def _ofs_distance(distance: int) -> bytes:
    out = bytearray([distance & 0x7F])
    distance >>= 7
    while distance:
        distance -= 1
        out.insert(0, 0x80 | (distance & 0x7F))
        distance >>= 7
    return bytes(out)


def delta(base: bytes, target: bytes) -> bytes:
    """A delta that copies the base's common prefix and inserts the rest of ``target``."""
    common = 0
    while common < min(len(base), len(target), 0xFFFF) and base[common] == target[common]:
        common += 1
    out = bytearray(_size_varint(len(base)) + _size_varint(len(target)))
    if common:
        out += bytes([0x80 | 0x10 | 0x20, common & 0xFF, common >> 8])  # copy from offset 0, 2-byte length
    rest = target[common:]
    for at in range(0, len(rest), 127):
        piece = rest[at:at + 127]
        out += bytes([len(piece)]) + piece
    return bytes(out)


def pack(entries: list[tuple[str, object, bytes] | tuple[str, bytes]]) -> bytes:
    body = bytearray(b"PACK" + (2).to_bytes(4, "big") + len(entries).to_bytes(4, "big"))
    offsets: list[int] = []
    for entry in entries:
        offsets.append(len(body))
        kind, data = entry[0], entry[-1]
        assert isinstance(data, bytes)
        body += _object_header(_KINDS[kind], len(data))
        if kind == "ofs":
            base = entry[1]
            assert isinstance(base, int)
            body += _ofs_distance(offsets[-1] - offsets[base])
        elif kind == "ref":
            base_id = entry[1]
            assert isinstance(base_id, str)
            body += bytes.fromhex(base_id)
        body += zlib.compress(data)
    return bytes(body) + hashlib.sha1(body).digest()
