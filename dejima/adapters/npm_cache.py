"""npm's cache (cacache) as the audit's source of pinned tarballs: ``_cacache/content-v2/<algorithm>/
xx/yy/<rest of the hex digest>``, addressed by the integrity itself. A tarball counts only when its
bytes hash to the integrity asked for (the session can write the cache); it is read as
pinned_archives.py reads an archive, never extracted: what cannot be read makes the tarball
unverifiable, never partly verified.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
from collections.abc import Collection, Iterable
from pathlib import Path

from dejima.adapters import pinned_archives
from dejima.adapters.pinned_archives import ARCHIVE_LIMIT, read_all, tar_entries
from dejima.adapters.start_contents import read_file
from dejima.core.audit.model import Artifact, Artifacts

_ALGORITHMS = ("sha512", "sha384", "sha256")
_KEPT = "npm"  # the name the tarballs' manifests are kept under (pinned_archives)


def address(integrity: str) -> tuple[str, str] | None:
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


def _content(algorithm: str, digest: str) -> str:
    """Where cacache keeps the content of this hash, under the cache."""
    return f"_cacache/content-v2/{algorithm}/{digest[:2]}/{digest[2:4]}/{digest[4:]}"


def cached_size(caches: list[Path], integrity: str) -> int:
    """The size of the first cached file at this integrity's address (0: none): which tarballs
    are read first (the largest), never what counts as one."""
    found = _cached(caches, integrity)
    return found.st_size if found is not None else 0


def cached_stamp(caches: list[Path], integrity: str) -> tuple[int, int, int, int] | None:
    """Which file is at this integrity's address now (device, inode, size, modification time; None:
    none): a read ahead waits for it, and reads it again only once it is another."""
    found = _cached(caches, integrity)
    return None if found is None else (found.st_dev, found.st_ino, found.st_size, found.st_mtime_ns)


def _cached(caches: list[Path], integrity: str) -> os.stat_result | None:
    """The first cached file at this integrity's address (its link, not followed)."""
    pinned = address(integrity)
    if pinned is None:
        return None
    for cache in caches:
        try:
            return os.stat(cache / _content(*pinned), follow_symlinks=False)
        except OSError:
            continue
    return None


def tarball(caches: list[Path], integrity: str) -> Artifact | str:
    pinned = address(integrity)
    if pinned is None:
        return f"an integrity dejima cannot check ({integrity[:40]})"
    algorithm, digest = pinned
    relative = _content(algorithm, digest)
    mismatched = False
    for cache in caches:
        data = read_file(cache.parent, f"{cache.name}/{relative}", ARCHIVE_LIMIT)  # a link at .npm not followed
        if data is None:
            continue
        if hashlib.new(algorithm, data).hexdigest() != digest:
            mismatched = True  # rewritten in the cache: not the pinned tarball (the cache rules name it)
            continue
        try:
            return Artifact(tar_entries(data))
        except ValueError as error:
            return f"its tarball cannot be read ({type(error).__name__}: {error})"
    where = ", ".join(str(cache) for cache in caches) or "no npm cache"
    return ("its tarball in the npm cache does not hash to the lockfile's integrity" if mismatched else
            f"its tarball is not in the npm cache ({where})")


def npm_caches(homes: Iterable[Path]) -> list[Path]:
    """Where the tarballs can be: the npm cache in each session home (the node workflow's
    npm_config_cache) and the host user's own (~/.npm): content-addressed, so any holds the
    pinned bytes or none."""
    found = [home / ".npm" for home in homes]
    host = Path(os.path.expanduser("~")) / ".npm"
    return [*found, host] if host not in found else found


def tarballs(caches: list[Path]) -> Artifacts:
    """The audit's reader of pinned tarballs (model.Artifacts), from these npm caches."""
    # An integrity pins the tarball's bytes: what it holds is kept once read (pinned_archives).
    return lambda integrities: read_all(integrities, lambda integrity: tarball(caches, integrity), "tarball",
                                           _KEPT, size=lambda integrity: cached_size(caches, integrity))


def read_ahead(caches: list[Path], integrities: list[str], awaited: Collection[str] = ()) -> int:
    """The tarballs of these pins read, and their manifests kept, by a process no one waits for (a
    session's start, for what its lockfiles pin: pinned_archives.read_ahead); those of ``awaited``
    not cached yet (what the session's install fetches) read as they come. Its pid (0: none)."""
    return pinned_archives.read_ahead(integrities, lambda integrity: tarball(caches, integrity), _KEPT,
                                      lambda integrity: cached_stamp(caches, integrity), awaited)
