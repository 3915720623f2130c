"""Packages' pinned archives (an npm tarball, a cargo .crate: gzipped tar) read without extracting
anything: each regular entry's path, its first component stripped (npm unpacks with strip 1;
a crate's entries lie under ``NAME-VERSION/``), and the SHA-256 of its bytes. Read whole into
memory within bounds (a gzip bomb stops at UNPACKED_LIMIT); what cannot be read is an error, so
an archive is verified whole or not at all.

Archives are read on a thread each (both cores: zlib and hashlib release the GIL on large
buffers); each cached byte is read once, each inflated byte hashed once.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import threading
import zlib
from collections.abc import Callable

from dejima.core.audit.model import Artifact, Artifacts

ARCHIVE_LIMIT = 256 << 20  # bytes of one cached archive
UNPACKED_LIMIT = 512 << 20  # bytes of it inflated (a gzip bomb stops here): held in memory
ENTRY_LIMIT = 200_000  # entries of one archive


def tar_entries(data: bytes) -> dict[str, str]:
    """path inside the package -> SHA-256 of each regular entry (the last of a repeated path wins,
    as when unpacked). Inflated in one call and hashed from slices of it (both release the GIL);
    the headers read here, in the subset npm's and cargo's archives use: ustar (prefix + name), GNU long names,
    pax paths. A header whose checksum is wrong ends the reading with an error (unverified)."""
    inflater = zlib.decompressobj(47)  # gzip (or zlib) header, auto-detected
    raw = inflater.decompress(data, UNPACKED_LIMIT)
    if inflater.unconsumed_tail:
        raise ValueError(f"more than {UNPACKED_LIMIT >> 20} MiB unpacked")
    view = memoryview(raw)
    files: dict[str, str] = {}
    offset, count, long_name = 0, 0, None
    while offset + 512 <= len(raw):
        header = raw[offset:offset + 512]
        if header == _ZERO_BLOCK:
            break
        count += 1
        if count > ENTRY_LIMIT:
            raise ValueError(f"more than {ENTRY_LIMIT} entries")
        _check(header)
        size = _number(header[124:136])
        start = offset + 512
        if size < 0 or start + size > len(raw):
            raise ValueError(f"an entry of {size} bytes past the archive's end")
        offset = start + (size + 511) // 512 * 512
        kind = header[156:157]
        if kind in (b"L", b"x"):  # the next entry's name: GNU long name, pax extended header
            long_name = _long_name(raw[start:start + size], kind)
            continue
        name, long_name = long_name or _name(header), None
        if kind not in (b"0", b"\0", b"7"):
            continue  # npm and cargo write files and directories only
        inside = name.lstrip("/").partition("/")[2]  # unpacked with strip 1
        name = posixpath.normpath(inside) if inside else ""
        if not name or name == "." or name.startswith("../") or name == "..":
            continue  # outside the package: unpacking refuses it
        files[name] = hashlib.sha256(view[start:start + size]).hexdigest()
    return files


_ZERO_BLOCK = bytes(512)


def _check(header: bytes) -> None:
    """The header's checksum (its bytes summed, the field itself as spaces; unsigned or signed)."""
    stored = header[148:156].split(b"\0", 1)[0].strip()
    rest = header[:148] + b" " * 8 + header[156:]
    if not stored or int(stored, 8) != sum(rest) and \
            int(stored, 8) != sum(rest) - 256 * sum(1 for byte in rest if byte > 127):
        raise ValueError("a tar header whose checksum is wrong")


def _number(field: bytes) -> int:
    """A tar numeric field: octal text, or base-256 when its first byte's high bit is set."""
    if field[0] & 0x80:
        return int.from_bytes(bytes([field[0] & 0x7F]) + field[1:], "big")
    text = field.split(b"\0", 1)[0].strip()
    return int(text, 8) if text else 0


def _name(header: bytes) -> str:
    name = header[:100].split(b"\0", 1)[0]
    if header[257:263] == b"ustar\0":  # POSIX: a prefix field (GNU keeps times there)
        prefix = header[345:500].split(b"\0", 1)[0]
        name = prefix + b"/" + name if prefix else name
    return name.decode("utf-8", "replace")  # as npm decodes it


def _long_name(data: bytes, kind: bytes) -> str | None:
    """The name a GNU long-name entry (its data) or a pax header (its ``path`` record) gives."""
    if kind == b"L":
        return data.split(b"\0", 1)[0].decode("utf-8", "replace")
    found, position = None, 0
    while position < len(data):  # records: "<length> <key>=<value>\n", the length counting all of it
        digits, space, _ = data[position:position + 20].partition(b" ")
        if not space or not digits.isdigit() or int(digits) <= len(digits) + 1:
            raise ValueError("a pax header that cannot be read")
        record = data[position + len(digits) + 1:position + int(digits)]
        position += int(digits)
        key, _, value = record.rstrip(b"\n").partition(b"=")
        if key == b"path":
            found = value.decode("utf-8", "replace")
    return found




def read_all(keys: list[str], one: Callable[[str], Artifact | str], what: str) -> dict[str, Artifact | str]:
    """``one(key)`` for every key, on as many threads as there are cores; an error reading one is
    its answer (unverified, never missing: the finding says why)."""
    got: dict[str, Artifact | str] = {}
    queue = iter(list(keys))
    lock = threading.Lock()

    def work() -> None:
        while True:
            with lock:
                key = next(queue, None)
            if key is None:
                return
            try:
                artifact: Artifact | str = one(key)
            except Exception as error:
                artifact = f"its {what} cannot be read ({type(error).__name__}: {error})"
            got[key] = artifact

    workers = [threading.Thread(target=work, name=f"pinned-{what}", daemon=True)
               for _ in range(min(len(keys), os.cpu_count() or 2) - 1)]
    for worker in workers:
        worker.start()
    work()  # this thread is one of them
    for worker in workers:
        worker.join()
    return got


def joined(readers: dict[str, Artifacts]) -> Artifacts:
    """One reader of every tool's artifacts: each key goes to the reader of the first prefix it starts
    with (``""``: the rest)."""
    def read(keys: list[str]) -> dict[str, Artifact | str]:
        routed: dict[str, list[str]] = {}
        for key in keys:
            routed.setdefault(next((p for p in readers if p and key.startswith(p)), ""), []).append(key)
        got: dict[str, Artifact | str] = {}
        for prefix, some in routed.items():
            reader = readers.get(prefix)
            got.update(reader(some) if reader is not None else dict.fromkeys(some, "no cache to read it from"))
        return got
    return read
