"""Where the audit finds the wheels uv.lock pins (python_verify.py asks, by wheel_key), and what
each holds. A wheel counts only when its bytes hash to the pin: a session can write its caches.

What each place keeps (researched on pip 23.2 and 26.3, uv 0.13):
- **pip's http cache** keeps the response bodies it downloaded, so the wheel's own bytes: by the
  SHA-224 of the normalized URL, in ``http-v2/a/b/c/d/e/<key>.body`` (pip 23.3 and later) or inside
  ``http/a/b/c/d/e/<key>`` after ``cc=4,`` as msgpack (older pip: Debian's). Hashed: any writer.
- **a wheel file** uv.lock names by path (a ``find-links`` directory it records, a ``path`` source): read and hashed
  (a requirements file names none).
- **uv's cache** keeps no wheel: it unpacks each into ``archive-v0/<id>/`` and records, in
  ``wheels-v*/<index>/<name>/<version>-<tags>.http``, msgpack of [archive id, [{algorithm: hex}],
  filename, ...]: the hashes it checked while unpacking. Those files prove nothing that the session
  can write (the session's own uv cache): only the host user's uv cache counts, read without
  following links, when its record names the pinned hash.

Nothing is extracted: a zip is read in memory within bounds (entries, declared sizes); a path that
leaves the wheel is skipped, as installers refuse it. Once a wheel is the pinned one, its own RECORD
names its entries' hashes: only what RECORD leaves out, and the few texts the verification reads
whole, are hashed here (an uv archive of 15k files costs one RECORD read, not 15k).

What was read of a pinned wheel is kept by its pin (pinned_archives.read_all, in the host user's
state, which no session can write) and read from there by the next audits: the wheel is the pinned
one or the host user's cache says so, so what it holds does not change; an environment is then held
to it even when the cache has gone or been rewritten since.
"""

from __future__ import annotations

import base64
import binascii
import csv
import hashlib
import io
import os
import re
import stat
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from dejima.adapters.pinned_archives import is_kept, read_all
from dejima.adapters.start_contents import read_file
from dejima.core.audit.model import Artifact, Artifacts
from dejima.core.audit.python_verify import normalize, parse_wheel_key

WHEEL_LIMIT = 256 << 20  # bytes of one wheel, or of one pip cache entry holding it
UNPACKED_LIMIT = 1 << 30  # bytes of its entries, as their headers declare them (zipfile reads no more)
ENTRY_LIMIT = 100_000  # entries of one wheel, or files of one uv archive
SCAN_LIMIT = 1 << 30  # bytes of pip's caches hashed to find wheels pinned with no URL (the session's first)
KEPT = "wheels"  # what the audit read of a pinned wheel is kept under (pinned_archives.read_all)
_ARCHIVE_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


@dataclass(frozen=True)
class WheelCaches:
    """``pip``: pip caches (any writer: their bodies are hashed); ``uv``: uv caches the session
    cannot write (the host user's), whose unpacked archives count by the hash uv recorded."""

    pip: tuple[Path, ...] = ()
    uv: tuple[Path, ...] = ()


def python_caches(homes: Iterable[Path], mounts: Iterable[Path] = ()) -> WheelCaches:
    """The session's pip caches (in its homes, ``.cache/pip``, and the cache mounts, any of which
    may be one) and the host user's own pip and uv caches."""
    host = Path(os.environ.get("XDG_CACHE_HOME") or Path(os.path.expanduser("~")) / ".cache")
    pip = [*(home / ".cache/pip" for home in homes), *mounts, Path(os.environ.get("PIP_CACHE_DIR") or host / "pip")]
    return WheelCaches(tuple(dict.fromkeys(pip)), (Path(os.environ.get("UV_CACHE_DIR") or host / "uv"),))


def wheel_entries(data: bytes) -> Artifact:
    """Each regular entry's SHA-256 (as the wheel's own RECORD names it: the wheel is the pinned one;
    an entry RECORD gives no hash for is hashed), and the texts a verification reads."""
    files: dict[str, str] = {}
    texts: dict[str, str] = {}
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        entries = archive.infolist()
        if len(entries) > ENTRY_LIMIT or sum(e.file_size for e in entries) > UNPACKED_LIMIT:
            raise ValueError(f"more than {ENTRY_LIMIT} entries or {UNPACKED_LIMIT >> 20} MiB unpacked")
        names = [e.filename for e in entries if not e.is_dir()]
        record = next((n for n in names if n.count("/") == 1 and n.endswith(".dist-info/RECORD")), None)
        recorded = record_digests(archive.read(record)) if record is not None else {}
        for name in names:
            if name.startswith("/") or ".." in name.split("/"):
                continue
            if name in recorded and not _textual(name):
                files[name] = recorded[name]
                continue
            content = archive.read(name)
            files[name] = hashlib.sha256(content).hexdigest()
            _keep_text(name, content, texts)
    return Artifact(files, texts)


def record_digests(data: bytes) -> dict[str, str]:
    """path -> SHA-256 (hex) of each line of a wheel's RECORD (``path,sha256=<urlsafe base64>,size``)
    that gives one."""
    found: dict[str, str] = {}
    for row in csv.reader(io.StringIO(data.decode("utf-8", "replace"))):
        if len(row) >= 2 and row[1].startswith("sha256="):
            value = row[1][len("sha256="):]
            try:
                found[row[0]] = base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)).hex()
            except (binascii.Error, ValueError):
                continue
    return found


def _textual(name: str) -> bool:
    """Whether a verification reads this entry whole (so it is read, whatever RECORD says)."""
    return name.endswith(".dist-info/entry_points.txt") and name.count("/") == 1 or ".data/scripts/" in name


def _keep_text(name: str, content: bytes, texts: dict[str, str]) -> None:
    if name.endswith(".dist-info/entry_points.txt") and name.count("/") == 1 or \
            ".data/scripts/" in name and content.startswith((b"#!python\n", b"#!pythonw\n")):
        texts[name] = content.decode("utf-8", "surrogateescape")


def _cache_key(url: str) -> str:
    """pip's cache key of a URL: cachecontrol's normalized form (scheme and host in lower case,
    no fragment), SHA-224."""
    parts = urlsplit(url)
    normalized = f"{parts.scheme.lower()}://{parts.netloc.lower()}{parts.path or '/'}" + (
        f"?{parts.query}" if parts.query else "")
    return hashlib.sha224(normalized.encode()).hexdigest()


def _pip_bodies(cache: Path, url: str) -> list[bytes]:
    key = _cache_key(url)
    relative = "/".join([*key[:5], key])
    return [*_bodies(read_file(cache, f"http-v2/{relative}.body", WHEEL_LIMIT), False),
            *_bodies(read_file(cache, f"http/{relative}", WHEEL_LIMIT), True)]


def _uv_pointers(cache: Path, folder: str) -> list[Path]:
    """uv's records of the wheels of one distribution: ``wheels-v*/pypi/NAME/*.http`` and
    ``wheels-v*/index/<hash>/NAME/*.http`` (listed, never globbed: a record's neighbour is a link
    into archive-v0). Their names are not searched for a wheel's: uv shortens long tags to a hash."""
    def listed(directory: Path) -> list[str]:
        try:
            return sorted(os.listdir(directory)) if stat.S_ISDIR(os.lstat(directory).st_mode) else []
        except OSError:
            return []

    indexes = [bucket / "pypi" for bucket in (cache / n for n in listed(cache) if n.startswith("wheels-v"))] + \
        [bucket / "index" / h for bucket in (cache / n for n in listed(cache) if n.startswith("wheels-v"))
         for h in listed(bucket / "index")]
    return [index / folder / name for index in indexes for name in listed(index / folder) if name.endswith(".http")]


def _uv_archive(cache: Path, digest: str, name: str) -> Artifact | None:
    """The host user's uv archive of a wheel of distribution ``name`` whose recorded hash is ``digest``."""
    if not name or "/" in name or name.startswith("."):
        return None
    for pointer in _uv_pointers(cache, normalize(name)):
        data = read_file(pointer.parent, pointer.name, 1 << 20)
        try:
            record, _ = _msgpack(data or b"", 0)
        except (ValueError, IndexError):
            continue
        if not isinstance(record, list) or len(record) < 2 or not isinstance(record[0], str) or \
                not _ARCHIVE_ID.fullmatch(record[0]) or not isinstance(record[1], list):
            continue
        if any(isinstance(h, dict) and str(h.get("Sha256", h.get("sha256", ""))) == digest for h in record[1]):
            return _directory_entries(cache / "archive-v0" / record[0])
    return None


def _directory_entries(top: Path) -> Artifact | None:
    """An unpacked archive's regular files (links skipped, never followed), as a wheel's entries:
    with the hashes its RECORD names (uv unpacked the pinned wheel; what RECORD leaves out is hashed).
    Listed with scandir, whose entries say their type: no stat of each directory."""
    files: dict[str, str] = {}
    texts: dict[str, str] = {}
    try:
        if not stat.S_ISDIR(os.lstat(top).st_mode):
            return None
        record = next((f"{name}/RECORD" for name in os.listdir(top) if name.endswith(".dist-info")), None)
    except OSError:
        return None
    recorded = record_digests(read_file(top, record, WHEEL_LIMIT) or b"") if record is not None else {}
    pending = [("", str(top))]
    while pending:
        below, directory = pending.pop()
        try:
            with os.scandir(directory) as listing:
                entries = [(entry.name, entry.path, entry.is_dir(follow_symlinks=False),
                            entry.is_file(follow_symlinks=False)) for entry in listing]
        except OSError:
            continue
        for name, path, is_directory, is_file in entries:
            relative = below + name
            if is_directory:
                pending.append((relative + "/", path))
            elif not is_file:
                continue  # a link, or no file at all
            elif relative in recorded and not _textual(relative):
                files[relative] = recorded[relative]
            elif (content := read_file(top, relative, WHEEL_LIMIT)) is not None:
                files[relative] = hashlib.sha256(content).hexdigest()
                _keep_text(relative, content, texts)
        if len(files) > ENTRY_LIMIT:
            return None
    return Artifact(files, texts)


def _pip_scan(caches: WheelCaches, wanted: set[str]) -> dict[str, bytes]:
    """The wheels among pip's cached bodies whose SHA-256 is wanted, found by hashing them (a pin
    with no URL: a requirements file's), within SCAN_LIMIT bytes read."""
    found: dict[str, bytes] = {}
    budget = SCAN_LIMIT
    for cache in caches.pip:
        for top in (cache / "http-v2", cache / "http"):
            for directory, names, filenames in os.walk(top, followlinks=False):
                names[:] = [n for n in names if not os.path.islink(os.path.join(directory, n))]
                for filename in filenames:
                    if budget <= 0 or len(found) == len(wanted):
                        return found
                    data = read_file(top, Path(directory, filename).relative_to(top).as_posix(), WHEEL_LIMIT)
                    budget -= len(data or b"")
                    for body in _bodies(data, top.name == "http"):
                        if (digest := hashlib.sha256(body).hexdigest()) in wanted:
                            found[digest] = body
    return found


def _bodies(data: bytes | None, legacy: bool) -> list[bytes]:
    """The response body a pip cache file holds: itself (http-v2's ``.body``), or inside the msgpack
    after ``cc=4,`` (http/)."""
    if data is None or not legacy:
        return [data] if data is not None and data[:4] == b"PK\x03\x04" else []
    if not data.startswith(b"cc=4,"):
        return []
    try:
        document, _ = _msgpack(data, 5)
    except (ValueError, IndexError):
        return []
    response = document.get("response") if isinstance(document, dict) else None
    content = response.get("body") if isinstance(response, dict) else None
    return [content] if isinstance(content, bytes) else []


def _wheel(caches: WheelCaches, root: Path | None, digest: str, where: str,
           scanned: dict[str, bytes]) -> Artifact | str:
    kind, _, location = where.partition(":")
    candidates: list[bytes] = []
    if kind == "path" and root is not None:
        data = read_file(root, location, WHEEL_LIMIT)
        candidates.extend([data] if data is not None else [])
    elif kind == "url":
        for cache in caches.pip:
            candidates.extend(_pip_bodies(cache, location))
    elif kind == "name" and digest in scanned:
        candidates.append(scanned[digest])
    mismatched = False
    for data in candidates:
        if hashlib.sha256(data).hexdigest() == digest:
            try:
                return wheel_entries(data)
            except (zipfile.BadZipFile, ValueError, OSError, EOFError) as error:
                return f"its wheel cannot be read ({type(error).__name__}: {error})"
        mismatched = True
    name = location if kind == "name" else location.rpartition("/")[2].partition("-")[0]
    for cache in caches.uv:
        archive = _uv_archive(cache, digest, name)
        if archive is not None:
            return archive
    if mismatched:
        return "its wheel does not hash to the pinned hash (rewritten where it was read: a cache, the project)"
    places = ", ".join(str(c) for c in [*caches.pip, *(c / "archive-v0" for c in caches.uv)])
    return f"its wheel is in no cache ({places}; uv's own cache keeps no wheel, only its unpacked files, " \
        "which the session can write: only the host user's counts)"


def wheels(caches: WheelCaches, root: Path | None) -> Artifacts:
    """The audit's reader of pinned wheels (``wheel_key`` requests), from these caches and the
    mount at ``root`` (a lockfile's path wheels)."""
    def read(keys: list[str]) -> dict[str, Artifact | str]:
        mine = {key: parsed for key in keys if (parsed := parse_wheel_key(key)) is not None}
        got: dict[str, Artifact | str] = dict.fromkeys([k for k in keys if k not in mine], "not a wheel")
        # pinned with no URL and not kept: found by hashing pip's cached bodies (up to SCAN_LIMIT bytes)
        unlocated = {digest for key, (digest, where) in mine.items() if where.startswith("name:") and
                     not is_kept(key, KEPT)}
        scanned = _pip_scan(caches, unlocated) if unlocated else {}

        def one(key: str) -> Artifact | str:
            digest, where = mine[key]
            return _wheel(caches, root, digest, where, scanned)
        got.update(read_all(list(mine), one, "wheel", KEPT))
        return got
    return read


def _msgpack(data: bytes, at: int, depth: int = 0) -> tuple[object, int]:
    """One msgpack value at ``at`` and where it ends (the types pip's and uv's records use;
    extension types refused)."""
    if depth > 32:
        raise ValueError("msgpack nested too deep")
    first = data[at]
    at += 1
    if first <= 0x7F:
        return first, at
    if first >= 0xE0:
        return first - 0x100, at
    if 0x80 <= first <= 0x9F:  # fixmap, fixarray
        return _container(data, at, first & 0x0F, first < 0x90, depth)
    if 0xA0 <= first <= 0xBF:
        return _string(data, at, first & 0x1F)
    if first in (0xC0, 0xC2, 0xC3):
        return {0xC0: None, 0xC2: False, 0xC3: True}[first], at
    sizes = {0xC4: 1, 0xC5: 2, 0xC6: 4, 0xD9: 1, 0xDA: 2, 0xDB: 4, 0xDC: 2, 0xDD: 4, 0xDE: 2, 0xDF: 4,
             0xCC: 1, 0xCD: 2, 0xCE: 4, 0xCF: 8, 0xD0: 1, 0xD1: 2, 0xD2: 4, 0xD3: 8, 0xCA: 4, 0xCB: 8}
    if first not in sizes:
        raise ValueError(f"msgpack type {first:#x} not read here")
    width = sizes[first]
    if at + width > len(data):
        raise ValueError("msgpack past its end")
    number = int.from_bytes(data[at:at + width], "big", signed=0xD0 <= first <= 0xD3)
    at += width
    if first in (0xC4, 0xC5, 0xC6):
        if at + number > len(data):
            raise ValueError("msgpack past its end")
        return data[at:at + number], at + number
    if first in (0xD9, 0xDA, 0xDB):
        return _string(data, at, number)
    if first in (0xDC, 0xDD, 0xDE, 0xDF):
        return _container(data, at, number, first >= 0xDE, depth)
    if first in (0xCA, 0xCB):
        return 0.0, at  # a float: its value is not used
    return number, at


def _string(data: bytes, at: int, size: int) -> tuple[str, int]:
    if at + size > len(data):
        raise ValueError("msgpack past its end")
    return data[at:at + size].decode("utf-8", "surrogateescape"), at + size


def _container(data: bytes, at: int, count: int, mapping: bool, depth: int) -> tuple[object, int]:
    if count > len(data) - at:
        raise ValueError("msgpack past its end")
    items = []
    for _ in range(count * (2 if mapping else 1)):
        item, at = _msgpack(data, at, depth + 1)
        items.append(item)
    if mapping:
        return {str(items[i]): items[i + 1] for i in range(0, len(items), 2)}, at
    return items, at
