"""The bytes a session's start keeps of a mount, for the rules to diff and for restore: the
watched files, what the git config points at, and the paths .git/index hides. Files are opened
without following links and read only when they are regular files (never a FIFO or device)."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterable
from itertools import compress
from operator import attrgetter
from pathlib import Path

from dejima.adapters.nofollow_open import open_directory, read_regular
from dejima.core.audit import derived_watch
from dejima.core.audit.gitindex import GitIndexError, hash_size, hidden_paths, start_flags_key
from dejima.core.gitconfig import GitConfigError, parse_git_config
from dejima.core.snapshot import Snapshot

KEEP_LIMIT = 4 << 20  # bytes of one watched file kept at start (lockfiles can be large)
READ_LIMIT = 64 << 20  # bytes of a file a rule reads at the end (a large repository's .git/index)


def read_file(root: Path | str, path: str, limit: int) -> bytes | None:
    """One regular file's bytes (None if absent, not a regular file, or larger than ``limit``).
    Opened one component at a time: no link is followed on the way and no other file system
    entered (the walk would not have), whatever replaced a directory since it was walked."""
    *parents, name = path.split("/")
    try:
        fd = open_directory(root, parents, follow_root=True, one_device=True)
    except OSError:
        return None
    try:
        return read_regular(fd, name, limit)
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)


def read_kept(root: Path, snapshot: Snapshot, keep: Callable[[str], bool], limit: int = 1 << 20) -> dict[str, bytes]:
    """The bytes of the regular files of ``snapshot`` that ``keep`` selects."""
    kept: dict[str, bytes] = {}
    for path in filter(keep, snapshot):
        entry = snapshot[path]
        if entry.kind == "file" and entry.size <= limit and (data := read_file(root, path, limit)) is not None:
            kept[path] = data
    return kept


def hashed_paths(snapshot: Snapshot) -> list[str]:
    """The files a start walk hashed: exactly the watched ones (picked in C: 100k entries)."""
    return list(compress(snapshot, map(attrgetter("sha256"), snapshot.values())))


def keep(root: Path, kind: str, hashed: Iterable[str], snapshot: Callable[[], Snapshot], cache: dict[str, object],
         index_unchanged: bool) -> dict[str, bytes]:
    """What the start keeps of a mount: the files the walk hashed (``hashed``); in a workspace,
    also the files the git config points at (includes, the hooks path: ``snapshot()`` is asked
    for those only) and what .git/index hides. ``cache``: answers kept with the mount's state;
    ``index_unchanged``: the .git directory lists as it did when they were kept."""
    kept = {path: data for path in hashed if (data := read_file(root, path, KEEP_LIMIT)) is not None}
    if kind == "workspace":
        config = kept.get(".git/config")
        targets = derived_watch(config.decode("utf-8", "surrogateescape") if config is not None else None)
        if targets:
            prefixes = tuple(f"{t}/" for t in targets)
            kept.update(read_kept(root, snapshot(), lambda p: p in targets or p.startswith(prefixes), KEEP_LIMIT))
        kept.update(_index_flags(root, config, cache, index_unchanged))
    return kept


def _index_flags(root: Path, config: bytes | None, cache: dict[str, object], unchanged: bool) -> dict[str, bytes]:
    """The paths .git/index hides at the start, so the audit reports only newly hidden ones."""
    config_key = hashlib.sha256(config or b"").hexdigest()
    if unchanged and cache.get("index-flags-config") == config_key and isinstance(cache.get("index-flags"), bytes):
        return {start_flags_key(".git/index"): cache["index-flags"]}  # type: ignore[dict-item]
    cache.pop("index-flags", None)
    index = read_file(root, ".git/index", READ_LIMIT)
    if index is None:
        return {}
    try:
        parsed = parse_git_config(config.decode("utf-8", "surrogateescape")) if config is not None else []
        flagged = hidden_paths(index, hash_size(parsed))
    except (GitIndexError, GitConfigError):
        return {}
    value = "\n".join(sorted(flagged)).encode("utf-8", "surrogateescape")
    cache.update({"index-flags-config": config_key, "index-flags": value})
    return {start_flags_key(".git/index"): value}
