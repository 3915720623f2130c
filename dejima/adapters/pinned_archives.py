"""Packages' pinned archives (an npm tarball, a cargo .crate: gzipped tar) read without extracting
anything: each regular entry's path, its first component stripped (npm unpacks with strip 1;
a crate's entries lie under ``NAME-VERSION/``), and the SHA-256 of its bytes. Read whole into
memory within bounds (a gzip bomb stops at UNPACKED_LIMIT); what cannot be read is an error, so
an archive is verified whole or not at all.

Archives are read by forked processes, one per CPU (inflating is most of the cost, and the
parsing is Python's: threads shared one core), each taking the next from a shared queue; each
cached byte is read once, each inflated byte hashed once. What an archive holds (its manifest:
each entry's path and SHA-256) is a function of the bytes its pin names, so a reader whose keys
pin them (npm's integrity) keeps it once read, in the host user's state
(``$XDG_STATE_HOME/dejima/audit/pinned/<reader>/``, never mounted into a session; dropped when
no use was noted for STALE_SECONDS): the next audit of the same pins inflates nothing. The
manifests are written, and their use noted (once a day: NOTED_SECONDS), by a process the audit
does not wait for (fork_workers.fork_behind).
A session's start reads ahead those its lockfiles pin (``read_ahead``), while the session runs: those
cached then, and those the session's install fetches, as they come.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import signal
import time
from collections.abc import Callable, Collection, Sequence
from functools import partial
from itertools import repeat
from pathlib import Path
from typing import cast

from isal import isal_zlib

from dejima.adapters import host
from dejima.adapters.fork_workers import SnapshotError, collect, finish_requested, fork, fork_behind, stop, workers
from dejima.adapters.walk_shares import Queue
from dejima.core.audit.model import Artifact, Artifacts
from dejima.core.snapshot import frame, unframe

ARCHIVE_LIMIT = 256 << 20  # bytes of one cached archive
UNPACKED_LIMIT = 512 << 20  # bytes of it inflated (a gzip bomb stops here): held in memory
ENTRY_LIMIT = 200_000  # entries of one archive
_MANIFEST = b"dejima-pinned-manifest 2\n"  # (files, texts)
STALE_SECONDS = 30 * 86400  # a manifest no audit used this long is dropped
# A manifest's use is noted (its time set) once this long has passed since the last note, not at each
# use: noting ~600 of them costs a fork (~3 ms in the end audit's task) and a write to each.
NOTED_SECONDS = 86400
FORK_AFTER = 16  # archives to read from which they are shared out over processes (a fork costs a few)
# A read ahead ends itself after this long: one whose launcher died (no end audit stops it) or that
# hangs is not left running for ever; what it did not keep, the end audit reads.
READ_AHEAD_SECONDS = 3600
# A read ahead looks this often for the pinned archives an install in the session fetches: a look
# is a stat per pin still awaited (~2 ms for 600, fewer as they come: under half a percent of a core,
# at a low priority). At 2 s, the bench's first session left the end audit 1-2 tarballs fetched in
# the install's last seconds (typescript's among them: ~40 ms); at 0.5 s, none in 3 rounds.
POLL_SECONDS = 0.5
# A pin's archive read at most this often by a read ahead, each time its file is another: bytes that do
# not hash to the pin now may be a file not whole yet (cacache renames a whole one in), but a file the
# session keeps rewriting is not read for ever (the end audit reads it, and says what it holds).
READS_OF_ONE = 3
# What ISA-L raises on a stream it cannot inflate (its stubs declare it an instance, not a class).
_INFLATE_ERROR = cast("type[Exception]", isal_zlib.error)


def tar_entries(data: bytes) -> dict[str, str]:
    """path inside the package -> SHA-256 of each regular entry (the last of a repeated path wins,
    as when unpacked). Inflated in one call and hashed from slices of it (both release the GIL);
    the headers read in C where it was built (``_headers``), in the subset npm's and cargo's archives
    use: ustar (prefix + name), GNU long names, pax paths. A header whose checksum is wrong, a stream
    that cannot be inflated or ends early, ends the reading with a ValueError (unverified)."""
    raw = inflated(data)
    view = memoryview(raw)
    files: dict[str, str] = {}
    long_name = None
    for kind, name, start, size in _headers(raw, ENTRY_LIMIT):
        if kind in _NAMING:  # the next entry's name: GNU long name, pax extended header
            long_name = _long_name(raw[start:start + size], kind)
            continue
        path, long_name = long_name or name.decode("utf-8", "replace"), None  # as npm decodes it
        if kind not in _FILES:
            continue  # npm and cargo write files and directories only
        inside = path.lstrip("/").partition("/")[2]  # unpacked with strip 1
        if not inside or inside[0] in "./" or inside[-1] == "/" or "/." in inside or "//" in inside:
            inside = posixpath.normpath(inside) if inside else ""  # what normpath would change
            if not inside or inside == "." or inside.startswith("../") or inside == "..":
                continue  # outside the package: unpacking refuses it
        files[inside] = hashlib.sha256(view[start:start + size]).hexdigest()
    return files


_NAMING = (ord("L"), ord("x"))
_FILES = (ord("0"), 0, ord("7"))
_ZERO_BLOCK = bytes(512)


def _headers_in_python(raw: bytes, limit: int) -> list[tuple[int, bytes, int, int]]:
    """``_tar_headers.headers`` where the C part was not built: each header up to the first zero
    block, (its type byte, its name, where its content starts, its size), a ValueError where the C
    part raises one, saying the same."""
    found: list[tuple[int, bytes, int, int]] = []
    offset = 0
    while offset + 512 <= len(raw):
        header = raw[offset:offset + 512]
        if header == _ZERO_BLOCK:
            break
        if len(found) >= limit:
            raise ValueError(f"more than {limit} entries")
        _check(header)
        size = _number(header[124:136])
        start = offset + 512
        if size > len(raw) - start:
            raise ValueError("an entry past the archive's end")
        offset = start + (size + 511) // 512 * 512
        found.append((header[156], _name(header), start, size))
    return found


_headers: Callable[[bytes, int], list[tuple[int, bytes, int, int]]]
try:
    from dejima.adapters._tar_headers import headers as _headers
except ImportError:
    _headers = _headers_in_python
NATIVE_HEADERS = _headers is not _headers_in_python  # `dejima doctor` says which runs


def inflated(data: bytes) -> bytes:
    """A gzip (or zlib) stream's content, up to UNPACKED_LIMIT bytes, inflated by ISA-L (twice
    zlib's speed on npm's tarballs: inflating was most of a first audit's cost). What is not a
    whole, intact stream (its checksum, its length, its end) is a ValueError saying why."""
    inflater = isal_zlib.decompressobj(47)  # gzip (or zlib) header, auto-detected
    try:
        raw = inflater.decompress(data, UNPACKED_LIMIT)
    except _INFLATE_ERROR as error:
        raise ValueError(f"its gzip stream cannot be inflated ({error})") from error
    if inflater.unconsumed_tail:
        raise ValueError(f"more than {UNPACKED_LIMIT >> 20} MiB unpacked")
    if not inflater.eof:
        raise ValueError("its gzip stream is cut short (it has no end, or no trailer to check it by)")
    return raw


def _check(header: bytes) -> None:
    """The header's checksum (its bytes summed, the field itself as spaces; unsigned or signed)."""
    stored = _octal(header[148:156])
    rest = header[:148] + b" " * 8 + header[156:]
    total = sum(rest.translate(None, b"\0"))  # zeros add nothing: most of a header, summed in half the time
    if not header[148:156].split(b"\0", 1)[0].strip() or stored != total and \
            stored != total - 256 * sum(1 for byte in rest if byte > 127):
        raise ValueError("a tar header whose checksum is wrong")


def _octal(field: bytes) -> int:
    """An octal text field up to its first NUL, without surrounding whitespace (0 when empty): -1
    when it is not octal digits (int() would take a sign, a 0o, underscores: the C part does not)."""
    text = field.split(b"\0", 1)[0].strip()
    return -1 if text.translate(None, b"01234567") else int(text, 8) if text else 0


def _number(field: bytes) -> int:
    """A tar numeric field: octal text, or base-256 when its first byte's high bit is set."""
    if field[0] & 0x80:
        return int.from_bytes(bytes([field[0] & 0x7F]) + field[1:], "big")
    value = _octal(field)
    if value < 0:
        raise ValueError("a tar header whose size cannot be read")
    return value


def _name(header: bytes) -> bytes:
    name = header[:100].split(b"\0", 1)[0]
    if header[257:263] == b"ustar\0":  # POSIX: a prefix field (GNU keeps times there)
        prefix = header[345:500].split(b"\0", 1)[0]
        name = prefix + b"/" + name if prefix else name
    return name


def _long_name(data: bytes, kind: int) -> str | None:
    """The name a GNU long-name entry (its data) or a pax header (its ``path`` record) gives."""
    if kind == ord("L"):
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




def manifests_dir() -> Path:
    return host.state_dir() / "audit" / "pinned"


def read_all(keys: list[str], one: Callable[[str], Artifact | str], what: str, kept: str = "",
             known: Path | None = None, size: Callable[[str], int] | None = None) -> dict[str, Artifact | str]:
    """``one(key)`` for every key, shared out over forked processes; an error reading one is its
    answer (unverified, never missing: the finding says why). ``kept``: the reader's name, when
    its keys pin the archives' bytes (``one`` answers an Artifact only for bytes that hash to the
    pin): what was read is kept under it (in ``known``, default ``manifests_dir()``) and read from
    there next time. ``size``: a key's archive's size, as far as known (0: not): the largest are
    read first, so that the processes end at about the same time (npm's typescript is a fifth of
    a 600-package tree's bytes: read last, one process inflates it while the other waits)."""
    directory = (known if known is not None else manifests_dir()) / kept if kept else None
    got: dict[str, Artifact | str] = {}
    unread: list[str] = []
    used: list[str] = []  # kept manifests whose use was last noted NOTED_SECONDS ago or more
    noted_since = time.time() - NOTED_SECONDS
    for key in dict.fromkeys(keys):
        known_one, noted = _kept(directory, key) if directory is not None else (None, 0.0)
        if known_one is not None:
            got[key] = known_one
            if noted < noted_since:
                used.append(key)
        else:
            unread.append(key)
    fresh: dict[str, Carried] = {}
    if unread:
        read_now = _read_shared(sorted(unread, key=size, reverse=True) if size is not None else unread, one, what)
        for key in unread:
            result = read_now.get(key, f"its {what} cannot be read (its reader process failed)")
            got[key] = result if isinstance(result, str) else Artifact(*result)
        fresh = {k: r for k, r in read_now.items() if not isinstance(r, str)}
    if directory is not None and (fresh or used):
        # Written by a process no one waits for: a file per archive costs ~0.2-0.5 ms to make, and
        # a manifest not kept is only read again next time.
        keeping = partial(_keep, directory, fresh, used)
        if not fork_behind(keeping):
            keeping()
    return got


def is_kept(key: str, kept: str, known: Path | None = None) -> bool:
    """Whether read_all would read ``key``'s manifest kept under ``kept`` (a readable one is there)
    rather than the archive: a reader's costly search for an archive is then left out."""
    return _known((known if known is not None else manifests_dir()) / kept, key) is not None


def _manifest_name(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8", "surrogateescape")).hexdigest()


def _known(directory: Path, key: str) -> Artifact | None:
    """The manifest kept for ``key``; None when there is none, or it cannot be read (then the
    archive is read again)."""
    return _kept(directory, key)[0]


def _kept(directory: Path, key: str) -> tuple[Artifact | None, float]:
    """``_known``, and when its use was last noted (its modification time: ``_keep`` notes it, and
    it is kept for STALE_SECONDS more). Asked for each of a tree's ~600 pins: a plain path and an
    unbuffered read, each name and hash checked in C."""
    try:
        with open(f"{directory}/{_manifest_name(key)}", "rb", buffering=0) as file:
            data, noted = file.readall(), os.fstat(file.fileno()).st_mtime
        kept = unframe(_MANIFEST, data, "dejima pinned manifest")
    except (OSError, ValueError):
        return None, 0.0
    if not isinstance(kept, tuple) or len(kept) != 2 or not all(
            isinstance(part, dict) and all(map(isinstance, part, repeat(str))) and
            all(map(isinstance, part.values(), repeat(str))) for part in kept if part is not None) or \
            not isinstance(kept[0], dict):
        return None, 0.0
    return Artifact(*kept), noted


def _keep(directory: Path, manifests: dict[str, Carried], used: Sequence[str] = ()) -> None:
    """Keeps what was read for the next audits, notes the use of those ``used`` (kept for
    STALE_SECONDS more), and drops the manifests none used for STALE_SECONDS (best effort: one
    not kept is read again)."""
    for key in used:
        try:
            os.utime(directory / _manifest_name(key))
        except OSError:
            pass
    if not manifests:
        return
    try:
        host.ensure_private_dir(directory)
        for key, carried in manifests.items():
            _write(directory, key, carried)
        cutoff = time.time() - STALE_SECONDS
        with os.scandir(directory) as entries:
            for entry in entries:
                if entry.stat(follow_symlinks=False).st_mtime < cutoff:
                    os.unlink(entry.path)
    except OSError:
        pass


def _write(directory: Path, key: str, carried: Carried) -> None:
    host.write_atomically(directory / _manifest_name(key), frame(_MANIFEST, carried))


def read_ahead(keys: list[str], one: Callable[[str], Artifact | str], kept: str,
               stamp: Callable[[str], object], awaited: Collection[str] = (), known: Path | None = None,
               limit: int = READ_AHEAD_SECONDS, poll: float = POLL_SECONDS) -> int:
    """Reads the archives of ``keys`` whose manifests are not kept under ``kept`` yet (``read_all``'s
    reader and name), in a process of its own at a low priority that no one waits for, keeping each
    as soon as it is read: started at a session's start for the pins its lockfiles name, so that
    the end audit finds them kept instead of inflating them then. ``stamp(key)``: the identity of
    its archive's file as it is now (None: there is none). Those of ``awaited`` (the pins an install
    fetches) that are not there at first are looked for every ``poll`` seconds and read once there: a
    project's first session fetches them while it runs. What it has not kept by the end audit (not
    there, not read yet, stopped) the end audit reads itself; what it keeps is what ``read_all``
    would (``one`` answers an Artifact only for bytes that hash to the pin). It ends when nothing
    awaited is left, at ``fork_workers.finish_behind``'s request (once it has read what of ``keys``
    is there then), or after ``limit`` seconds (SIGALRM's default action). Its pid (0: none started)."""
    directory = (known if known is not None else manifests_dir()) / kept
    unread = [key for key in dict.fromkeys(keys) if not (directory / _manifest_name(key)).exists()]

    def work() -> None:
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
        signal.alarm(limit)
        os.nice(10)  # the session starts meanwhile: it comes first
        host.ensure_private_dir(directory)
        _read_ahead(directory, unread, one, stamp, set(awaited), poll)

    return fork_behind(work) if unread else 0


def _read_ahead(directory: Path, unread: list[str], one: Callable[[str], Artifact | str],
                stamp: Callable[[str], object], awaited: set[str], poll: float) -> None:
    """read_ahead's passes: all of ``unread`` first, then the awaited ones every ``poll`` seconds; one
    whose read failed (its bytes do not hash to the pin, or not yet) is read again only once its
    file is another (a new stamp), at most READS_OF_ONE times."""
    failed: dict[str, object] = {}  # key -> its file's stamp when a read of it failed
    reads: dict[str, int] = {}
    left = dict.fromkeys(unread)
    looked, last = unread, False
    while True:
        for key in looked:
            now = stamp(key)
            if now is None or failed.get(key) == now or reads.get(key, 0) >= READS_OF_ONE:
                continue
            reads[key] = reads.get(key, 0) + 1
            try:
                artifact = one(key)
            except Exception:  # the end audit reads it again, and says why
                artifact = "unread"
            if isinstance(artifact, str):
                failed[key] = now
            else:
                _write(directory, key, (artifact.files, artifact.texts))
                del left[key]
        polled = [key for key in left if key in awaited and reads.get(key, 0) < READS_OF_ONE]
        if last or not polled:
            return
        last = finish_requested(poll)
        looked = list(left) if last else polled


Carried = tuple[dict[str, str], "dict[str, str] | None"]  # an Artifact's fields, as marshal carries them
Manifests = dict[str, "Carried | str"]  # key -> its archive's manifest, or why there is none


def _read_shared(keys: list[str], one: Callable[[str], Artifact | str], what: str) -> Manifests:
    """Each archive read by whichever process (forked, this one included) takes it first; those a
    failed process took are left out (unverified, never verified)."""
    queue: Queue[str] = Queue(keys)
    children, got = [], {}
    try:
        for _ in range(min(workers(), len(keys)) - 1 if len(keys) >= FORK_AFTER else 0):
            try:
                children.append(fork(lambda: (_read_taken(queue, one, what),)))
            except OSError:
                break  # no fork: this process reads what the others would have
        got.update(_read_taken(queue, one, what))
        while children:
            try:
                got.update(collect(children.pop(0))[0])
            except SnapshotError:
                continue
        return got
    finally:
        queue.close()
        stop(children)  # left only by an error


def _read_taken(queue: Queue[str], one: Callable[[str], Artifact | str], what: str) -> Manifests:
    got: Manifests = {}
    for key in queue.taken():
        try:
            artifact = one(key)
            got[key] = artifact if isinstance(artifact, str) else (artifact.files, artifact.texts)
        except Exception as error:  # unverified, never missing: the finding says why
            got[key] = f"its {what} cannot be read ({type(error).__name__}: {error})"
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
