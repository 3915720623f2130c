"""npm's cache (cacache) as the audit's source of pinned tarballs: ``_cacache/content-v2/<algorithm>/
xx/yy/<rest of the hex digest>``, addressed by the integrity itself. A tarball counts only when its
bytes hash to the integrity asked for (the session can write the cache); it is read whole into
memory within a bound, never extracted: each regular entry's bytes are hashed, its path's first
component stripped (npm unpacks with strip 1, whatever the top directory is called); what cannot
be read makes the tarball unverifiable, never partly verified.

What a tarball holds (each entry's path and SHA-256, its manifest) is a function of the bytes its
integrity pins, so it is kept once read, in the host user's state (``$XDG_STATE_HOME/dejima/audit/
npm-tarballs/``, never mounted into a session), under the hash it was checked against: the next
audit of a tree pinning it compares with the manifest instead of inflating the tarball again.
Tarballs not read before are read by forked processes (both cores: inflating is most of the cost,
and the parsing is Python's), each taking the next from a shared queue.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import posixpath
import time
import zlib
from collections.abc import Iterable
from pathlib import Path

from dejima.adapters import host
from dejima.adapters.fork_workers import SnapshotError, collect, fork, stop, workers
from dejima.adapters.start_contents import read_file
from dejima.adapters.walk_shares import Queue
from dejima.core.audit.model import Artifact, Artifacts
from dejima.core.snapshot import frame, unframe

TARBALL_LIMIT = 256 << 20  # bytes of one cached tarball
UNPACKED_LIMIT = 512 << 20  # bytes of it inflated (a gzip bomb stops here): held in memory
ENTRY_LIMIT = 200_000  # entries of one tarball
_ALGORITHMS = ("sha512", "sha384", "sha256")
_MANIFEST = b"dejima-npm-manifest 1\n"
STALE_SECONDS = 30 * 86400  # a manifest no audit used this long is dropped
FORK_AFTER = 16  # tarballs to read from which they are shared out over processes (a fork costs a few)


def _address(integrity: str) -> tuple[str, str] | None:
    """(algorithm, hex digest) of the strongest hash an SRI string names."""
    found: dict[str, str] = {}
    for item in integrity.split():
        algorithm, _, value = item.partition("-")
        if algorithm in _ALGORITHMS:
            try:
                found[algorithm] = base64.b64decode(value.partition("?")[0], validate=True).hex()
            except (binascii.Error, ValueError):
                continue
    for algorithm in _ALGORITHMS:
        if algorithm in found:
            return algorithm, found[algorithm]
    return None


def _tarball(caches: list[Path], integrity: str) -> dict[str, str] | str:
    """The manifest of the tarball ``integrity`` pins, read from the first cache that holds its
    bytes; or why there is none."""
    address = _address(integrity)
    if address is None:
        return f"an integrity dejima cannot check ({integrity[:40]})"
    algorithm, digest = address
    relative = f"_cacache/content-v2/{algorithm}/{digest[:2]}/{digest[2:4]}/{digest[4:]}"
    mismatched = False
    for cache in caches:
        data = read_file(cache.parent, f"{cache.name}/{relative}", TARBALL_LIMIT)  # a link at .npm not followed
        if data is None:
            continue
        if hashlib.new(algorithm, data).hexdigest() != digest:
            mismatched = True  # rewritten in the cache: not the pinned tarball (the cache rules name it)
            continue
        try:
            return _entries(data)
        except (zlib.error, ValueError) as error:
            return f"its tarball cannot be read ({type(error).__name__}: {error})"
    where = ", ".join(str(cache) for cache in caches) or "no npm cache"
    return ("its tarball in the npm cache does not hash to the lockfile's integrity" if mismatched else
            f"its tarball is not in the npm cache ({where})")


def _entries(data: bytes) -> dict[str, str]:
    """path inside the package -> SHA-256 of each regular entry (the last of a repeated path wins,
    as when unpacked). Inflated in one call and hashed from slices of it (both release the GIL);
    the headers read here, in the subset npm's tarballs use: ustar (prefix + name), GNU long names,
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
            continue  # npm writes files and directories only
        inside = name.lstrip("/").partition("/")[2]  # npm unpacks with strip 1
        name = posixpath.normpath(inside) if inside else ""
        if not name or name == "." or name.startswith("../") or name == "..":
            continue  # outside the package: npm's unpacking refuses it
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
    if header[257:262] == b"ustar":
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


def npm_caches(homes: Iterable[Path]) -> list[Path]:
    """Where the tarballs can be: the npm cache in each session home (the node workflow's
    npm_config_cache) and the host user's own (~/.npm): content-addressed, so any holds the
    pinned bytes or none."""
    found = [home / ".npm" for home in homes]
    host = Path(os.path.expanduser("~")) / ".npm"
    return [*found, host] if host not in found else found


def manifests_dir() -> Path:
    return host.state_dir() / "audit" / "npm-tarballs"


def tarballs(caches: list[Path], known: Path | None = None) -> Artifacts:
    """The audit's reader of pinned tarballs (model.Artifacts), from these npm caches; the
    manifests of those read before from ``known`` (default: ``manifests_dir()``), where those
    read now are kept."""
    def read(integrities: list[str]) -> dict[str, Artifact | str]:
        directory = known if known is not None else manifests_dir()
        got: dict[str, Artifact | str] = {}
        unread = []
        for integrity in dict.fromkeys(integrities):
            files = _known(directory, integrity)
            if files is not None:
                got[integrity] = Artifact(files)
            else:
                unread.append(integrity)
        if unread:
            read_now = _read_shared(caches, unread)
            for integrity in unread:
                result = read_now.get(integrity, "its tarball cannot be read (its reader process failed)")
                got[integrity] = Artifact(result) if isinstance(result, dict) else result
            _keep(directory, {i: r for i, r in read_now.items() if isinstance(r, dict)})
        return got
    return read


def _manifest_name(integrity: str) -> str | None:
    address = _address(integrity)
    return f"{address[0]}-{address[1]}" if address is not None else None


def _known(directory: Path, integrity: str) -> dict[str, str] | None:
    """The manifest kept for ``integrity`` (its use noted: kept for STALE_SECONDS more); None when
    there is none, or it cannot be read (then the tarball is read again)."""
    name = _manifest_name(integrity)
    if name is None:
        return None
    path = directory / name
    try:
        files = unframe(_MANIFEST, path.read_bytes(), "dejima npm manifest")
        os.utime(path)
    except (OSError, ValueError):
        return None
    if not isinstance(files, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in files.items()):
        return None
    return files


def _keep(directory: Path, manifests: dict[str, dict[str, str]]) -> None:
    """Keeps what was read for the next audits, and drops the manifests none used for STALE_SECONDS
    (best effort: one not kept is read again)."""
    if not manifests:
        return
    try:
        host.ensure_private_dir(directory)
        for integrity, files in manifests.items():
            name = _manifest_name(integrity)
            if name is not None:
                host.write_atomically(directory / name, frame(_MANIFEST, files))
        cutoff = time.time() - STALE_SECONDS
        with os.scandir(directory) as entries:
            for entry in entries:
                if entry.stat(follow_symlinks=False).st_mtime < cutoff:
                    os.unlink(entry.path)
    except OSError:
        pass


Manifests = dict[str, "dict[str, str] | str"]  # integrity -> its tarball's manifest, or why there is none


def _read_shared(caches: list[Path], integrities: list[str]) -> Manifests:
    """Each tarball read by whichever process (forked, this one included) takes it first; those a
    failed process took are left out (unverified, never verified)."""
    queue: Queue[str] = Queue(integrities)
    children, got = [], {}
    try:
        for _ in range(min(workers(), len(integrities)) - 1 if len(integrities) >= FORK_AFTER else 0):
            try:
                children.append(fork(lambda: (_read_taken(caches, queue),)))
            except OSError:
                break  # no fork: this process reads what the others would have
        got.update(_read_taken(caches, queue))
        while children:
            try:
                got.update(collect(children.pop(0))[0])
            except SnapshotError:
                continue
        return got
    finally:
        queue.close()
        stop(children)  # left only by an error


def _read_taken(caches: list[Path], queue: Queue[str]) -> Manifests:
    got: Manifests = {}
    for integrity in queue.taken():
        try:
            got[integrity] = _tarball(caches, integrity)
        except Exception as error:  # unverified, never missing: the finding says why
            got[integrity] = f"its tarball cannot be read ({type(error).__name__}: {error})"
    return got
