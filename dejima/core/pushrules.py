"""Push rules for git smart-HTTP, decided from the receive-pack request itself.

A push is ``POST <repo>/git-receive-pack`` whose body is pkt-lines ``<old> <new> <ref>`` (the first
carrying capabilities after a NUL), a flush, then a pack. The rules, by default:

- only this session's repositories (the route path, e.g. ``owner/repo``) may be pushed to;
- no push to the default branch (the upstream's ``HEAD`` symref, read from its upload-pack
  advertisement, since receive-pack does not advertise ``HEAD``);
- no deletion and no non-fast-forward update. Fast-forward means ``old`` is an ancestor of ``new``.
  The request does not say so, and the upstream's history is not here, so the proof is read from
  the pushed pack: walking parents from ``new`` through the commits the pack carries must reach
  ``old``. git packs exactly the commits the upstream lacks, so an ordinary fast-forward always
  carries that chain. The limit: a fast-forward onto commits the upstream already has through
  another ref (the pack then stops short of ``old``) cannot be proven and is refused, with a
  reason saying so; pushing to a new branch name works. ``old`` itself is checked by the upstream
  (receive-pack refuses a stale ``old``), so it is the ref's real current value.

A refused push is answered with a receive-pack report (``unpack ok`` / ``ng <ref> <reason>``, in
side-band when asked) so git prints ``! [remote rejected] <ref> (<reason>)`` and ``remote: …``.
"""

from __future__ import annotations

import hashlib
import re
import zlib
from collections.abc import Iterable
from dataclasses import dataclass

FLUSH = b"0000"
_OID = re.compile(rb"^([0-9a-f]{40}|[0-9a-f]{64})$")


class PushError(ValueError):
    """A receive-pack request or pack the rules cannot read; the push is refused."""


@dataclass(frozen=True, slots=True)
class PushPolicy:
    repositories: tuple[str, ...]  # repository paths on the route's upstream, e.g. "owner/repo"
    allow_force: bool = False  # deletions and non-fast-forward updates
    allow_default_branch: bool = False

    def allows_repository(self, path: str) -> bool:
        return normalise_repository(path) in {normalise_repository(r) for r in self.repositories}


@dataclass(frozen=True, slots=True)
class Command:
    old: str
    new: str
    ref: str


@dataclass(frozen=True, slots=True)
class PushRequest:
    commands: tuple[Command, ...]
    capabilities: frozenset[str]
    pack: bytes


def normalise_repository(path: str) -> str:
    path = path.strip("/").lower()
    return path[:-4] if path.endswith(".git") else path


def git_request(tail: str) -> tuple[str, str] | None:
    """(kind, repository) for a smart-HTTP push request path: kind is "advertise" or "push"; else None."""
    path, _, query = tail.partition("?")
    if path.endswith("/info/refs") and "service=git-receive-pack" in query.split("&"):
        return "advertise", path[: -len("/info/refs")]
    if path.endswith("/git-receive-pack"):
        return "push", path[: -len("/git-receive-pack")]
    return None


def pkt_lines(data: bytes, offset: int = 0) -> tuple[list[bytes], int]:
    """The pkt-line payloads from ``offset`` up to a flush; returns them and the offset after the flush."""
    lines: list[bytes] = []
    while True:
        size_text = data[offset:offset + 4]
        if len(size_text) < 4 or not re.fullmatch(rb"[0-9a-f]{4}", size_text):
            raise PushError("malformed pkt-line")
        size = int(size_text, 16)
        if size == 0:
            return lines, offset + 4
        if size < 4 or offset + size > len(data):
            raise PushError("truncated pkt-line")
        lines.append(data[offset + 4:offset + size])
        offset += size


def pkt(data: bytes) -> bytes:
    return b"%04x" % (len(data) + 4) + data


def parse_push_request(body: bytes) -> PushRequest:
    lines, end = pkt_lines(body)
    commands: list[Command] = []
    capabilities: frozenset[str] = frozenset()
    for line in lines:
        if line.startswith(b"shallow "):
            continue
        if line.startswith(b"push-cert"):
            raise PushError("signed pushes (push certificates) are not supported through the proxy")
        text, nul, caps = line.rstrip(b"\n").partition(b"\0")
        if nul and not commands:
            capabilities = frozenset(caps.decode("ascii", "replace").split())
        parts = text.split(b" ")
        if len(parts) != 3 or not _OID.match(parts[0]) or not _OID.match(parts[1]):
            raise PushError("malformed push command")
        commands.append(Command(parts[0].decode(), parts[1].decode(), parts[2].decode("utf-8", "replace")))
    if not commands:
        raise PushError("a push without commands")
    return PushRequest(tuple(commands), capabilities, body[end:])


def parse_advertisement(body: bytes) -> tuple[dict[str, str], str | None]:
    """(ref -> oid, the ref HEAD points to) from an upload-pack v0 info/refs answer."""
    lines, offset = pkt_lines(body, 0)
    if lines and lines[0].startswith(b"# service="):
        lines, _ = pkt_lines(body, offset)
    refs: dict[str, str] = {}
    head: str | None = None
    for line in lines:
        text, _, caps = line.rstrip(b"\n").partition(b"\0")
        for cap in caps.decode("ascii", "replace").split():
            if cap.startswith("symref=HEAD:"):
                head = cap[len("symref=HEAD:"):]
        oid, _, ref = text.decode("ascii", "replace").partition(" ")
        refs[ref] = oid
    return refs, head


def is_zero(oid: str) -> bool:
    return set(oid) == {"0"}


def reaches(start: str, target: str, parents: dict[str, tuple[str, ...]]) -> bool:
    """Whether ``target`` is ``start`` or an ancestor of it through the commits in ``parents``."""
    seen, todo = set(), [start]
    while todo:
        oid = todo.pop()
        if oid == target:
            return True
        if oid in seen or oid not in parents:
            continue
        seen.add(oid)
        todo.extend(parents[oid])
    return False


def decide(request: PushRequest, default_ref: str | None, policy: PushPolicy,
           parents: dict[str, tuple[str, ...]]) -> list[tuple[str, str | None]]:
    """(ref, reason it is refused, or None) per command."""
    results: list[tuple[str, str | None]] = []
    for command in request.commands:
        reason: str | None = None
        if command.ref == default_ref and not policy.allow_default_branch:
            reason = f"pushing to the default branch ({command.ref.removeprefix('refs/heads/')}) is not allowed " \
                     "by dejima; push another branch"
        elif is_zero(command.new) and not policy.allow_force:
            reason = "deleting a ref is not allowed by dejima"
        elif not is_zero(command.old) and not policy.allow_force and not reaches(command.new, command.old, parents):
            reason = "not a fast-forward (force-push refused by dejima; it is also refused when the pushed " \
                     "commits alone cannot prove it: push to a new branch)"
        results.append((command.ref, reason))
    return results


def report(results: Iterable[tuple[str, str | None]], capabilities: frozenset[str]) -> bytes:
    """A receive-pack result refusing the whole push; the refs that were fine are refused with a note."""
    results = list(results)
    lines = [pkt(b"unpack ok\n")]
    messages = []
    for ref, reason in results:
        why = reason or "not pushed: another ref of this push broke a dejima push rule"
        lines.append(pkt(f"ng {ref} {why}\n".encode()))
        if reason:
            messages.append(f"dejima: {ref}: {reason}\n".encode())
    status = b"".join(lines) + FLUSH
    if "side-band-64k" not in capabilities and "side-band" not in capabilities:
        return status if {"report-status", "report-status-v2"} & capabilities else b""
    band = b"".join(pkt(b"\x02" + m) for m in messages)
    return band + pkt(b"\x01" + status) + FLUSH


# --- the pushed pack: commits and their parents ---------------------------------------------------

_COMMIT, _OFS_DELTA, _REF_DELTA = 1, 6, 7
_FEED = 64 * 1024


def _inflate(data: memoryview, offset: int, keep: bool) -> tuple[bytes, int]:
    """Inflate one zlib stream at ``offset``; returns (content if keep else b"", offset after it)."""
    stream = zlib.decompressobj()
    out: list[bytes] = []
    position = offset
    while not stream.eof:
        piece = data[position:position + _FEED]
        if not piece:
            raise PushError("truncated pack")
        produced = stream.decompress(piece)
        if keep:
            out.append(produced)
        position += len(piece)
    return b"".join(out), position - len(stream.unused_data)


def _varint_header(data: memoryview, offset: int) -> tuple[int, int]:
    byte = data[offset]
    kind = (byte >> 4) & 7
    offset += 1
    while byte & 0x80:
        byte = data[offset]
        offset += 1
    return kind, offset


def _ofs(data: memoryview, offset: int) -> tuple[int, int]:
    byte = data[offset]
    value = byte & 0x7F
    offset += 1
    while byte & 0x80:
        byte = data[offset]
        offset += 1
        value = ((value + 1) << 7) | (byte & 0x7F)
    return value, offset


def _delta_size(delta: bytes, offset: int) -> tuple[int, int]:
    value = shift = 0
    while True:
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
            raise PushError("malformed delta")
    if len(out) != size:
        raise PushError("delta result has the wrong size")
    return bytes(out)


def _commit_parents(content: bytes) -> tuple[str, ...]:
    parents = []
    for line in content.split(b"\n"):
        if not line:
            break
        if line.startswith(b"parent "):
            parents.append(line[7:].decode("ascii", "replace"))
    return tuple(parents)


def pack_commits(pack: bytes, sha256: bool = False) -> dict[str, tuple[str, ...]]:
    """Commit id -> parent ids, for the commits a pack carries (deltas within the pack resolved)."""
    if not pack:
        return {}
    if len(pack) < 12 or pack[:4] != b"PACK" or int.from_bytes(pack[4:8], "big") not in (2, 3):
        raise PushError("the pushed data is not a git pack")
    data, count, offset = memoryview(pack), int.from_bytes(pack[8:12], "big"), 12
    hash_len = 32 if sha256 else 20
    kinds: dict[int, int] = {}  # offset -> object type
    commits_at: dict[int, bytes] = {}  # offset -> commit content
    commit_ids: dict[str, int] = {}
    parents: dict[str, tuple[str, ...]] = {}
    for _ in range(count):
        start = offset
        kind, offset = _varint_header(data, offset)
        base_kind, base_content = kind, None
        if kind == _OFS_DELTA:
            distance, offset = _ofs(data, offset)
            base_kind, base_content = kinds.get(start - distance, 0), commits_at.get(start - distance)
        elif kind == _REF_DELTA:
            base_id = bytes(data[offset:offset + hash_len]).hex()
            offset += hash_len
            at = commit_ids.get(base_id)
            base_kind, base_content = (_COMMIT, commits_at[at]) if at is not None else (0, None)
        content, offset = _inflate(data, offset, keep=base_kind == _COMMIT)
        kinds[start] = base_kind
        if base_kind != _COMMIT:
            continue
        if kind in (_OFS_DELTA, _REF_DELTA):
            if base_content is None:
                continue
            content = apply_delta(base_content, content)
        digest = (hashlib.sha256 if sha256 else hashlib.sha1)(b"commit %d\0" % len(content) + content).hexdigest()
        commits_at[start], commit_ids[digest] = content, start
        parents[digest] = _commit_parents(content)
    return parents
