"""Cargo's registry cache as the audit's source of pinned crates: ``$CARGO_HOME/registry/cache/
<registry>/NAME-VERSION.crate``, the archive cargo downloaded, in the session home's cargo home (the
rust workflow's CARGO_HOME) and the host user's own. A crate counts only when its bytes hash to
the checksum Cargo.lock pinned (the session can write its cache; a crate of the same name from
another registry hashes to something else); it is read as pinned_archives.py reads an archive,
never extracted.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from pathlib import Path

from dejima.adapters.nofollow_open import open_directory
from dejima.adapters.pinned_archives import ARCHIVE_LIMIT, read_all, tar_entries
from dejima.adapters.start_contents import read_file
from dejima.core.audit.cargo_verify import crate_of_key
from dejima.core.audit.model import Artifact, Artifacts

_REGISTRIES = 64  # registry directories looked in, per cargo home


def cargo_homes(homes: Iterable[Path]) -> list[Path]:
    """Where the crates can be: the cargo home in each session home and the host user's own
    ($CARGO_HOME, else ~/.cargo)."""
    found = [home / ".cargo" for home in homes]
    host = Path(os.environ.get("CARGO_HOME") or Path(os.path.expanduser("~")) / ".cargo")
    return [*found, host] if host not in found else found


def _registries(home: Path) -> list[str]:
    """The registry directories of a cargo home's cache (none of the path a link below the home)."""
    try:
        fd = open_directory(home.parent, [home.name, "registry", "cache"], follow_root=True)
    except OSError:
        return []
    try:
        return sorted(os.listdir(fd))[:_REGISTRIES]
    finally:
        os.close(fd)


def _crate(homes: list[Path], key: str) -> Artifact | str:
    name, version, checksum = crate_of_key(key)
    file = f"{name}-{version}.crate"
    mismatched = False
    for home in homes:
        for registry in _registries(home):
            data = read_file(home.parent, f"{home.name}/registry/cache/{registry}/{file}", ARCHIVE_LIMIT)
            if data is None:
                continue
            if hashlib.sha256(data).hexdigest() != checksum:
                mismatched = True  # another registry's crate of that name, or rewritten in the cache
                continue
            return Artifact(tar_entries(data))
    where = ", ".join(str(home) for home in homes) or "no cargo home"
    return (f"its .crate in the registry cache does not hash to Cargo.lock's checksum ({where})" if mismatched else
            f"its .crate is in no registry cache ({where})")


def crates(homes: list[Path]) -> Artifacts:
    """The audit's reader of pinned crates (model.Artifacts), from these cargo homes."""
    return lambda keys: read_all(keys, lambda key: _crate(homes, key), ".crate")
