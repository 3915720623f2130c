"""yarn 1's cache as a source of pinned tarballs: each entry, ``v6/npm-<name>-<version>-<hash>-integrity/
node_modules/<name>/``, keeps the tarball it was unpacked from as ``.yarn-tarball.tgz``; the hash
in its name is the one in yarn.lock's ``resolved`` fragment. npm's cache serves too: the same
integrity names the same bytes. A tarball counts only when its bytes hash to yarn.lock's
integrity (the session can write both caches), and is read as pinned_archives.py reads an archive.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterable
from pathlib import Path

from dejima.adapters import npm_cache
from dejima.adapters.nofollow_open import open_directory
from dejima.adapters.pinned_archives import ARCHIVE_LIMIT, read_all, tar_entries
from dejima.adapters.start_contents import read_file
from dejima.core.audit.model import Artifact, Artifacts
from dejima.core.audit.yarn_verify import yarn_of_key

_VERSION = re.compile(r"v\d+\Z")


def yarn_caches(homes: Iterable[Path]) -> list[Path]:
    """yarn's cache in each session home and the host user's ($YARN_CACHE_FOLDER, else ~/.cache/yarn)."""
    found = [home / ".cache/yarn" for home in homes]
    host = Path(os.environ.get("YARN_CACHE_FOLDER") or Path(os.path.expanduser("~")) / ".cache/yarn")
    return [*found, host] if host not in found else found


def _listing(root: Path, parts: list[str]) -> list[str]:
    try:
        fd = open_directory(root, parts, follow_root=True)
    except OSError:
        return []
    try:
        return os.listdir(fd)
    finally:
        os.close(fd)


def _entries(caches: list[Path]) -> list[tuple[Path, str, str]]:
    """(cache, version directory, entry) of every entry of these caches, listed once per audit."""
    return [(cache, version, entry) for cache in caches
            for version in sorted(_listing(cache.parent, [cache.name])) if _VERSION.match(version)
            for entry in _listing(cache.parent, [cache.name, version])]


def _tarball(entries: list[tuple[Path, str, str]], npm_caches: list[Path], key: str) -> Artifact | str:
    name, fragment, integrity = yarn_of_key(key)
    address = npm_cache.address(integrity)
    if address is None:
        return f"an integrity dejima cannot check ({integrity[:40]})"
    algorithm, digest = address
    suffix = f"-{fragment}-integrity"
    mismatched = False
    for cache, version, entry in entries:
        if not entry.endswith(suffix):
            continue
        data = read_file(cache.parent, f"{cache.name}/{version}/{entry}/node_modules/{name}/.yarn-tarball.tgz",
                         ARCHIVE_LIMIT)
        if data is None:
            continue
        if hashlib.new(algorithm, data).hexdigest() != digest:
            mismatched = True
            continue
        return Artifact(tar_entries(data))
    from_npm = npm_cache.tarball(npm_caches, integrity)  # the same bytes, if npm fetched them
    if isinstance(from_npm, Artifact):
        return from_npm
    return "its tarball in the yarn cache does not hash to yarn.lock's integrity" if mismatched else \
        "its tarball is in no yarn or npm cache"


def tarballs(caches: list[Path], npm_caches: list[Path]) -> Artifacts:
    """The audit's reader of yarn's pinned tarballs (model.Artifacts), from these caches."""
    def read(keys: list[str]) -> dict[str, Artifact | str]:
        entries = _entries(caches)
        return read_all(keys, lambda key: _tarball(entries, npm_caches, key), "tarball")
    return read
