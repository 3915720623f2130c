"""npm's cache (cacache) as the audit's source of pinned tarballs: ``_cacache/content-v2/<algorithm>/
xx/yy/<rest of the hex digest>``, addressed by the integrity itself. A tarball counts only when its
bytes hash to the integrity asked for (the session can write the cache); it is read whole into
memory within a bound, never extracted: each regular entry's bytes are hashed, its path's first
component stripped (npm unpacks with strip 1, whatever the top directory is called).

The tarballs are read on a thread each (both cores: zlib and hashlib release the GIL on large
buffers); each cached byte is read once, each inflated byte hashed once.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
import os
import posixpath
import tarfile
import threading
from collections.abc import Iterable
from pathlib import Path

from dejima.adapters.start_contents import read_file
from dejima.core.audit.model import Artifact, Artifacts

TARBALL_LIMIT = 256 << 20  # bytes of one cached tarball
UNPACKED_LIMIT = 1 << 30  # bytes of all its entries, inflated (a gzip bomb stops here)
ENTRY_LIMIT = 200_000  # entries of one tarball
_ALGORITHMS = ("sha512", "sha384", "sha256")
_CHUNK = 1 << 20


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


def _tarball(caches: list[Path], integrity: str) -> Artifact | str:
    address = _address(integrity)
    if address is None:
        return f"an integrity dejima cannot check ({integrity[:40]})"
    algorithm, digest = address
    relative = f"_cacache/content-v2/{algorithm}/{digest[:2]}/{digest[2:4]}/{digest[4:]}"
    mismatched = False
    for cache in caches:
        data = read_file(cache, relative, TARBALL_LIMIT)
        if data is None:
            continue
        if hashlib.new(algorithm, data).hexdigest() != digest:
            mismatched = True  # rewritten in the cache: not the pinned tarball (the cache rules name it)
            continue
        try:
            return Artifact(_entries(data))
        except (tarfile.TarError, OSError, EOFError, ValueError) as error:
            return f"its tarball cannot be read ({type(error).__name__}: {error})"
    where = ", ".join(str(cache) for cache in caches) or "no npm cache"
    return ("its tarball in the npm cache does not hash to the lockfile's integrity" if mismatched else
            f"its tarball is not in the npm cache ({where})")


def _entries(data: bytes) -> dict[str, str]:
    """path inside the package -> SHA-256 of each regular entry (the last of a repeated path wins,
    as when unpacked)."""
    files: dict[str, str] = {}
    total = 0
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as archive:
        for count, member in enumerate(archive, 1):
            if count > ENTRY_LIMIT:
                raise ValueError(f"more than {ENTRY_LIMIT} entries")
            if not member.isfile():
                continue  # npm writes files and directories only
            inside = member.name.lstrip("/").partition("/")[2]
            name = posixpath.normpath(inside) if inside else ""
            if not name or name == "." or name.startswith("../") or name == "..":
                continue  # outside the package: npm's unpacking refuses it
            total += member.size
            if total > UNPACKED_LIMIT:
                raise ValueError(f"more than {UNPACKED_LIMIT >> 20} MiB unpacked")
            stream = archive.extractfile(member)
            if stream is None:
                continue
            hashed = hashlib.sha256()
            while chunk := stream.read(_CHUNK):
                hashed.update(chunk)
            files[name] = hashed.hexdigest()
    return files


def npm_caches(homes: Iterable[Path]) -> list[Path]:
    """Where the tarballs can be: the npm cache in each session home (the node workflow's
    npm_config_cache) and the host user's own (~/.npm): content-addressed, so any holds the
    pinned bytes or none."""
    found = [home / ".npm" for home in homes]
    host = Path(os.path.expanduser("~")) / ".npm"
    return [*found, host] if host not in found else found


def tarballs(caches: list[Path]) -> Artifacts:
    """The audit's reader of pinned tarballs (model.Artifacts), from these npm caches."""
    def read(integrities: list[str]) -> dict[str, Artifact | str]:
        got: dict[str, Artifact | str] = {}
        queue = iter(list(integrities))
        lock = threading.Lock()

        def work() -> None:
            while True:
                with lock:
                    integrity = next(queue, None)
                if integrity is None:
                    return
                try:
                    artifact: Artifact | str = _tarball(caches, integrity)
                except Exception as error:  # unverified, never missing: the finding says why
                    artifact = f"its tarball cannot be read ({type(error).__name__}: {error})"
                got[integrity] = artifact

        workers = [threading.Thread(target=work, name="npm-tarballs", daemon=True)
                   for _ in range(min(len(integrities), os.cpu_count() or 2) - 1)]
        for worker in workers:
            worker.start()
        work()  # this thread is one of them
        for worker in workers:
            worker.join()
        return got
    return read
