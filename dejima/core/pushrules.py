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

The commands are read as they arrive (``CommandReader``), before the pack; the rules that need
no pack decide there. The pack itself streams on to the upstream through dejima.core.packscan,
which keeps the commits' parents only, within a budget.

A refused push is answered with a receive-pack report (``unpack ok`` / ``ng <ref> <reason>``, in
side-band when asked) so git prints ``! [remote rejected] <ref> (<reason>)`` and ``remote: …``.
Which request is a push, and toward which repository, is dejima.core.gitpath's to say.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

FLUSH = b"0000"
MAX_COMMAND_BYTES = 1024 * 1024  # a push's commands (and push options): ~10,000 refs
_OID = re.compile(rb"^([0-9a-f]{40}|[0-9a-f]{64})$")


class PushError(ValueError):
    """A receive-pack request or pack the rules cannot read; the push is refused."""


class PushTooLarge(PushError):
    """A push's commands past MAX_COMMAND_BYTES."""


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

    @property
    def sha256(self) -> bool:
        return len(self.commands[0].new) == 64


def normalise_repository(path: str) -> str:
    path = path.strip("/").lower()
    return path[:-4] if path.endswith(".git") else path


class _Short(PushError):
    """The data ends before the flush that ends the section."""


def pkt(data: bytes) -> bytes:
    return b"%04x" % (len(data) + 4) + data


def parse_commands(lines: list[bytes]) -> PushRequest:
    """The commands of a receive-pack request (its first pkt-line section, without the flush)."""
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
    if len({len(c.new) for c in commands} | {len(c.old) for c in commands}) != 1:
        raise PushError("a push that mixes SHA-1 and SHA-256 object ids")
    return PushRequest(tuple(commands), capabilities)


class PktReader:
    """pkt-lines from bytes that arrive in pieces, each byte parsed once; holds at most ``limit``
    unparsed bytes (a pkt-line is at most 65,520 bytes, so a larger hold is no pkt-line stream)."""

    @classmethod
    def section(cls, data: bytes) -> list[bytes]:
        """The payloads of a whole section, up to its flush."""
        reader, lines = cls(len(data)), []
        reader.feed(data)
        while (line := reader.take()) is not None:
            lines.append(line)
        return lines

    def __init__(self, limit: int) -> None:
        self._buffer = bytearray()
        self._start = 0  # parsed up to here
        self.limit = limit
        self.taken = 0  # bytes of the stream parsed into lines so far

    def feed(self, data: bytes) -> None:
        if self._start > 65536:  # compact now and then, not at every line
            del self._buffer[:self._start]
            self._start = 0
        self._buffer += data
        if len(self._buffer) - self._start > self.limit:
            raise PushTooLarge(f"more than {self.limit} bytes before the end of a pkt-line section")

    def take(self) -> bytes | None:
        """The next pkt-line's payload, None for a flush; raises _Short when it has not all arrived."""
        at = self._start
        size_text = bytes(self._buffer[at:at + 4])
        if len(size_text) < 4:
            raise _Short("truncated pkt-line")
        if not re.fullmatch(rb"[0-9a-f]{4}", size_text):
            raise PushError("malformed pkt-line")
        size = int(size_text, 16)
        if size == 0:
            self._advance(4)
            return None
        if size < 4:
            raise PushError("malformed pkt-line")
        if at + size > len(self._buffer):
            raise _Short("truncated pkt-line")
        payload = bytes(self._buffer[at + 4:at + size])
        self._advance(size)
        return payload

    def _advance(self, size: int) -> None:
        self._start += size
        self.taken += size

    def rest(self) -> bytes:
        """What arrived after the lines taken (and forgets it)."""
        rest = bytes(self._buffer[self._start:])
        self._buffer.clear()
        self._start = 0
        return rest


class CommandReader:
    """A receive-pack request body's head, read as it arrives: the commands, the push options when
    the client asked for them, and where the pack begins. At most MAX_COMMAND_BYTES are held."""

    def __init__(self) -> None:
        self._reader = PktReader(MAX_COMMAND_BYTES)
        self._lines: list[bytes] = []
        self._sections = 1  # the commands; 2 once they ask for push options
        self.request: PushRequest | None = None
        self.probe = False  # a lone flush: git's probe before a large push, nothing to judge
        self.rest = b""  # what followed the head: the start of the pack

    def feed(self, data: bytes) -> bool:
        """True once the head is complete (``request`` or ``probe`` set, ``rest`` the bytes after it)."""
        self._reader.feed(data)
        while True:
            try:
                line = self._reader.take()
            except _Short:
                return False
            if self._reader.taken > MAX_COMMAND_BYTES:
                raise PushTooLarge(f"push commands larger than {MAX_COMMAND_BYTES} bytes")
            if line is not None:
                if self.request is None:
                    self._lines.append(line)
                continue
            if self.request is None:
                if not self._lines:
                    self.probe, self.rest = True, self._reader.rest()
                    return True
                self.request = parse_commands(self._lines)
                self._lines = []
                if "push-options" in self.request.capabilities:
                    self._sections = 2
            self._sections -= 1
            if not self._sections:
                self.rest = self._reader.rest()
                return True


class AdvertisementReader:
    """The default branch from an upload-pack v0 ref advertisement, read as it arrives: the first ref
    line carries ``symref=HEAD:<ref>``, so nothing past it is read or held."""

    def __init__(self) -> None:
        self._reader = PktReader(2 * 65536)
        self._service_line = False

    def feed(self, data: bytes) -> tuple[bool, str | None]:
        """(complete, the ref HEAD points to, or None when the upstream names none)."""
        self._reader.feed(data)
        try:
            while True:
                line = self._reader.take()
                if line is not None and line.startswith(b"# service="):
                    self._service_line = True
                    continue
                if line is None and self._service_line:
                    self._service_line = False  # the flush that ends the service section
                    continue
                break
        except _Short:
            return False, None
        if line is None:
            return True, None  # an empty repository: no refs, no HEAD
        _, _, caps = line.rstrip(b"\n").partition(b"\0")
        for cap in caps.decode("ascii", "replace").split():
            if cap.startswith("symref=HEAD:"):
                return True, cap[len("symref=HEAD:"):]
        return True, None


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


def needs_proof(command: Command, policy: PushPolicy) -> bool:
    """Whether the command updates an existing ref, so that only the pack can show it fast-forwards."""
    return not policy.allow_force and not is_zero(command.old) and not is_zero(command.new)


def _is_default(ref: str, default_ref: str | None) -> bool:
    # Ignoring case: a forge on a case-insensitive store reads refs/heads/MAIN as main.
    return ref.upper() == "HEAD" or (default_ref is not None and ref.lower() == default_ref.lower())


def decide(request: PushRequest, default_ref: str | None, policy: PushPolicy,
           parents: dict[str, tuple[str, ...]] | None, short_of: str = "") -> list[tuple[str, str | None]]:
    """(ref, reason it is refused, or None) per command. ``parents`` None: the pack is not read yet,
    so fast-forwards are not judged. ``short_of``: the budget the pack's commits outgrew (the proof
    may then fail only for that), said in the reason."""
    results: list[tuple[str, str | None]] = []
    for command in request.commands:
        reason: str | None = None
        if _is_default(command.ref, default_ref) and not policy.allow_default_branch:
            shown = (default_ref or command.ref).removeprefix("refs/heads/")
            reason = f"pushing to the default branch ({shown}) is not allowed by dejima; push another branch"
        elif is_zero(command.new) and not policy.allow_force:
            reason = "deleting a ref is not allowed by dejima"
        elif parents is not None and needs_proof(command, policy) and not reaches(command.new, command.old, parents):
            reason = "not a fast-forward (force-push refused by dejima; it is also refused when the pushed " \
                     "commits alone cannot prove it: push to a new branch)"
            if short_of:
                reason += f"; this push carried more commits than dejima keeps to prove it ({short_of}): push " \
                          "fewer commits at a time"
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
