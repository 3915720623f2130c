"""The commits of a git pack, read as the pack streams past: sans-I/O, bounded memory.

A pack is ``PACK``, a version, an object count, then each object (a type-and-size header, a base
for deltas, a zlib stream) and a trailing hash. The push rules need one thing from it: each
commit's parents, to prove that an update is a fast-forward. So the scanner inflates every object
as its bytes arrive, throws away what is not a commit (trees and blobs: nothing of them is kept,
not even an entry per object), and keeps each commit's content (a later delta may be based on it)
and parents. What it keeps is reserved from a budget first; when the budget says no, the scanner
goes on reading but keeps nothing more, and says it is ``incomplete``: a proof may then fail that
the whole pack would have given, which the push rules say in their refusal.

A commit's id is the hash of the content the scanner rebuilt, so a proof built from these ids
holds whatever the pack tries: an object that inflates or applies differently here than in git
has another id, and proves nothing. Its parents are read as git reads them (the ``parent`` lines right
after ``tree``), and a commit whose header is not laid out as git writes it refuses the whole push.
"""

from __future__ import annotations

import hashlib
import re
import zlib
from collections.abc import Callable

_COMMIT, _OFS_DELTA, _REF_DELTA = 1, 6, 7
_VALID_KINDS = frozenset({1, 2, 3, 4, 6, 7})
_HEADER = 12
_INFLATE_STEP = 256 * 1024  # most bytes one decompress call may produce (bounds what an object costs in flight)
_MAX_OBJECT_HEADER = 64  # a type/size varint, then an offset varint or a base id: far less than this
COMMIT_OVERHEAD = 256  # bytes reserved per kept commit beyond its content: its id, parents and table entries


class PackError(ValueError):
    """The data is not a pack the scanner can read; the push it came with is refused."""


def _varint_header(data: bytes | bytearray) -> tuple[int, int] | None:
    """(object type, bytes used) of an object header, or None when more bytes are needed."""
    for index, byte in enumerate(data):
        if not byte & 0x80:
            return (data[0] >> 4) & 7, index + 1
    return None


def _ofs(data: bytes | bytearray, offset: int) -> tuple[int, int] | None:
    """(negative offset of the base, offset after it), or None when more bytes are needed."""
    if offset >= len(data):
        return None
    byte = data[offset]
    value = byte & 0x7F
    offset += 1
    while byte & 0x80:
        if offset >= len(data):
            return None
        byte = data[offset]
        offset += 1
        value = ((value + 1) << 7) | (byte & 0x7F)
    return value, offset


def _delta_size(delta: bytes, offset: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if offset >= len(delta):
            raise PackError("malformed delta")
        byte = delta[offset]
        offset += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, offset


def apply_delta(base: bytes, delta: bytes) -> bytes:
    _, offset = _delta_size(delta, 0)
    size, offset = _delta_size(delta, offset)
    out = bytearray()
    try:
        while offset < len(delta):
            op = delta[offset]
            offset += 1
            if op & 0x80:
                start = length = 0
                for bit in range(4):
                    if op & (1 << bit):
                        start |= delta[offset] << (8 * bit)
                        offset += 1
                for bit in range(3):
                    if op & (1 << (4 + bit)):
                        length |= delta[offset] << (8 * bit)
                        offset += 1
                out += base[start:start + (length or 0x10000)]
            elif op:
                out += delta[offset:offset + op]
                offset += op
            else:
                raise PackError("malformed delta")
            if len(out) > size:
                raise PackError("delta result has the wrong size")
    except IndexError:
        raise PackError("malformed delta") from None
    if len(out) != size:
        raise PackError("delta result has the wrong size")
    return bytes(out)


_HEADERS_IN_PLACE = (b"tree", b"parent", b"author", b"committer")  # each only where git reads it


def commit_parents(content: bytes, hex_length: int = 40) -> tuple[str, ...]:
    """The parents git reads from a commit: the ``parent`` lines right after its ``tree`` line, and no
    other (git's parse_commit_buffer). A commit whose header is not the one git writes (``tree``, then
    ``parent`` lines, one ``author``, one ``committer``, then other headers) raises PackError: a reader
    that took the other ``parent`` lines would prove a fast-forward that git does not see."""
    end = content.find(b"\n\n")
    head = content[:end + 1] if end >= 0 else content
    if not head.endswith(b"\n"):
        raise PackError("its header does not end with a newline")
    if b"\0" in head:
        raise PackError("its header holds a NUL byte")
    lines = head[:-1].split(b"\n")
    oid = re.compile(rb"[0-9a-f]{%d}" % hex_length)

    def field(at: int, name: bytes) -> bytes | None:
        prefix = name + b" "
        return lines[at][len(prefix):] if at < len(lines) and lines[at].startswith(prefix) else None

    tree = field(0, b"tree")
    if tree is None or not oid.fullmatch(tree):
        raise PackError("its header does not start with a tree line git can read")
    parents, at = [], 1
    while (parent := field(at, b"parent")) is not None:
        if not oid.fullmatch(parent):
            raise PackError(f"its parent line {at} is not an object id in lower-case hex")
        parents.append(parent.decode("ascii"))
        at += 1
    for name in (b"author", b"committer"):
        if field(at, name) is None:
            raise PackError(f"its {name.decode()} line is not where git reads it (after tree and parents)")
        at += 1
    for line in lines[at:]:
        name = line.partition(b" ")[0]
        if name in _HEADERS_IN_PLACE:
            raise PackError(f"it has a {name.decode()} line out of its place, which git would not read as one")
    return tuple(parents)


class PackScanner:
    """Feed a pack's bytes as they arrive; ``parents`` then maps each commit id the pack carries to its
    parents. ``reserve(n)`` asks the budget for n more bytes (False: no); ``held`` is what was granted,
    for the caller to give back once the push is decided."""

    def __init__(self, sha256: bool, reserve: Callable[[int], bool]) -> None:
        self.hash_length = 32 if sha256 else 20
        self._hash = hashlib.sha256 if sha256 else hashlib.sha1
        self._reserve = reserve
        self.held = 0
        self.incomplete = False  # the budget refused: commits from here on were not kept
        self.parents: dict[str, tuple[str, ...]] = {}
        self._commits_at: dict[int, bytes] = {}  # pack offset -> content, commits only (delta bases)
        self._commit_offsets: dict[str, int] = {}  # commit id -> its offset (REF_DELTA bases)
        self._buffer = bytearray()  # bytes not yet parsed (headers), or not yet given to zlib
        self._offset = 0  # pack offset of self._buffer[0]
        self._count: int | None = None
        self._seen = 0
        self._object: _Object | None = None
        self.done = False  # every object and the trailing hash were read

    def feed(self, data: bytes) -> None:
        if self.done:
            if data:
                raise PackError("data after the end of the pack")
            return
        self._buffer += data
        while self._step():
            pass

    def finish(self) -> None:
        """The body ended: the pack must have ended with it."""
        if not self.done:
            raise PackError("the pack ended early")

    def _take(self, size: int) -> bytes:
        taken = bytes(self._buffer[:size])
        del self._buffer[:size]
        self._offset += size
        return taken

    def _step(self) -> bool:
        """Parse what the buffer allows; True when progress was made and more may follow."""
        if self._count is None:
            if len(self._buffer) < _HEADER:
                return False
            header = self._take(_HEADER)
            if header[:4] != b"PACK" or int.from_bytes(header[4:8], "big") not in (2, 3):
                raise PackError("the pushed data is not a git pack")
            self._count = int.from_bytes(header[8:12], "big")
            return True
        if self._object is not None:
            return self._inflate()
        if self._seen == self._count:
            if len(self._buffer) < self.hash_length:
                return False
            self._take(self.hash_length)
            self.done = True
            if self._buffer:
                raise PackError("data after the end of the pack")
            return False
        return self._object_header()

    def _object_header(self) -> bool:
        start = self._offset
        parsed = _varint_header(self._buffer)
        if parsed is None:
            if len(self._buffer) > _MAX_OBJECT_HEADER:
                raise PackError("malformed object header")
            return False
        kind, used = parsed
        if kind not in _VALID_KINDS:
            raise PackError(f"object type {kind} does not exist")
        base: bytes | None = None
        is_commit = kind == _COMMIT
        if kind == _OFS_DELTA:
            found = _ofs(self._buffer, used)
            if found is None:
                if len(self._buffer) > _MAX_OBJECT_HEADER:
                    raise PackError("malformed delta offset")
                return False
            distance, used = found
            base = self._commits_at.get(start - distance)
            is_commit = base is not None
        elif kind == _REF_DELTA:
            if len(self._buffer) < used + self.hash_length:
                return False
            base_id = bytes(self._buffer[used:used + self.hash_length]).hex()
            used += self.hash_length
            at = self._commit_offsets.get(base_id)
            base = self._commits_at.get(at) if at is not None else None
            is_commit = base is not None
        self._take(used)
        self._object = _Object(start, self._offset, keep=is_commit and not self.incomplete, base=base)
        return True

    def _inflate(self) -> bool:
        current = self._object
        assert current is not None
        data = bytes(self._buffer)
        self._buffer.clear()
        current.fed += len(data)
        while data and not current.stream.eof:
            try:
                produced = current.stream.decompress(data, _INFLATE_STEP)
            except zlib.error as exc:
                raise PackError(f"object {self._seen + 1} of the pack does not inflate: {exc}") from None
            data = current.stream.unconsumed_tail
            if current.keep and produced:
                if self._reserve(len(produced)):
                    self.held += len(produced)
                    current.parts.append(produced)
                else:
                    self._give_up(current)
        if not current.stream.eof:
            return False  # zlib holds all it was given; the object goes on in the next bytes
        rest = current.stream.unused_data
        self._buffer += rest
        self._offset = current.data_start + current.fed - len(rest)
        self._seen += 1
        self._object = None
        if current.keep:
            self._keep_commit(current)
        return True

    def _give_up(self, current: _Object) -> None:
        self.incomplete = True
        current.keep = False
        current.parts.clear()

    def _keep_commit(self, current: _Object) -> None:
        content = b"".join(current.parts)
        current.parts.clear()
        if current.base is not None:
            content = apply_delta(current.base, content)
        if not self._reserve(len(content) + COMMIT_OVERHEAD):
            self.incomplete = True
            return
        self.held += len(content) + COMMIT_OVERHEAD
        digest = self._hash(b"commit %d\0" % len(content) + content).hexdigest()
        try:
            parents = commit_parents(content, 2 * self.hash_length)
        except PackError as exc:
            raise PackError(f"commit {digest} has a header git does not write ({exc}): it proves nothing, "
                            "and dejima refuses the push") from None
        self._commits_at[current.start] = content
        self._commit_offsets[digest] = current.start
        self.parents[digest] = parents


class _Object:
    """The object being inflated: where it starts, its zlib stream, and what is kept of it."""

    __slots__ = ("start", "data_start", "stream", "keep", "base", "parts", "fed")

    def __init__(self, start: int, data_start: int, keep: bool, base: bytes | None) -> None:
        self.start, self.data_start, self.keep, self.base = start, data_start, keep, base
        self.stream = zlib.decompressobj()
        self.parts: list[bytes] = []
        self.fed = 0  # bytes given to zlib for this object (the next object starts where zlib stopped)
