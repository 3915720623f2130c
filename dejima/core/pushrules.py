"""Push rules for git smart-HTTP, decided from the receive-pack request itself.

A push is ``POST <repo>/git-receive-pack`` whose body is pkt-lines ``<old> <new> <ref>`` (the first
carrying capabilities after a NUL), a flush, then a pack. The rules, by default:

- only this session's repositories (the route path, e.g. ``owner/repo``) may be pushed to;
- no push to the default branch: the upstream's ``HEAD`` symref, and any symbolic ref that points
  to it (receive-pack moves a symbolic ref's target). Both are asked of the upstream's upload-pack
  in protocol v2 (ls-refs with ``symrefs``), since receive-pack advertises neither. A forge that
  speaks v0 only names HEAD's target alone: there an update whose old value is the default branch's
  commit may be an alias of it, and is refused;
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
which keeps the commits' parents only, within a budget, read as git reads them.

A refused push is answered with a receive-pack report (``unpack ok`` / ``ng <ref> <reason>``, in
side-band when asked) so git prints ``! [remote rejected] <ref> (<reason>)`` and ``remote: …``.
Which request is a push, and toward which repository, is dejima.core.gitpath's to say.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

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


@dataclass(frozen=True, slots=True)
class ForgeRefs:
    """What the forge says of the refs a push names. ``targets``: each pushed ref that is a symbolic ref
    on the forge, and the ref it points to, which is what receive-pack moves. ``symbolic_known`` is
    False for a forge that speaks protocol v0 only, which names no symbolic ref but HEAD; its
    ``default_tip`` (the default branch's commit) is then all there is to tell an alias by."""

    default_ref: str | None
    targets: Mapping[str, str] = field(default_factory=dict)
    symbolic_known: bool = True
    default_tip: str | None = None

    def moved(self, ref: str) -> str:
        return self.targets.get(ref, ref)


class AdvertisementReader:
    """The answer to ``info/refs?service=git-upload-pack`` asked in protocol v2, read as it arrives. A
    forge that speaks v2 answers with its capabilities (``v2`` True; ``object_format`` as it says):
    ask it with ls-refs next. A forge that speaks v0 only answers with its refs, whose first line
    names HEAD's target (``symref=HEAD:<ref>``) and commit: ``refs`` holds them, nothing further is read."""

    def __init__(self) -> None:
        self._reader = PktReader(2 * 65536)
        self._started = False  # past the optional "# service=" section
        self.v2 = False
        self.object_format: str | None = None
        self.refs: ForgeRefs | None = None

    def feed(self, data: bytes) -> bool:
        """True once the answer says all that is needed (``v2`` and its capabilities, or ``refs``)."""
        self._reader.feed(data)
        try:
            while True:
                line = self._reader.take()
                if not self._started:
                    if line is not None and line.startswith(b"# service="):
                        continue
                    self._started = True
                    if line is None:
                        continue  # the flush that ends the service section
                if line is None:
                    if self.v2:
                        return True
                    self.refs = ForgeRefs(None, symbolic_known=False)  # an empty repository: no refs, no HEAD
                    return True
                if line.rstrip(b"\n") == b"version 2":
                    self.v2 = True
                elif self.v2:
                    if line.startswith(b"object-format="):
                        self.object_format = line.rstrip(b"\n").partition(b"=")[2].decode("ascii", "replace")
                else:
                    self.refs = _first_ref_line(line)
                    return True
        except _Short:
            return False


def _first_ref_line(line: bytes) -> ForgeRefs:
    text, _, caps = line.rstrip(b"\n").partition(b"\0")
    oid, _, name = text.partition(b" ")
    default_ref = None
    for cap in caps.decode("ascii", "replace").split():
        if cap.startswith("symref=HEAD:"):
            default_ref = cap[len("symref=HEAD:"):]
    tip = oid.decode("ascii", "replace") if name == b"HEAD" and _OID.match(oid) else None
    return ForgeRefs(default_ref, symbolic_known=False, default_tip=tip)


DELIM = b"0001"
_REF_NAME = re.compile(r"[\x21-\x7e]+")  # what a ref-prefix line may carry; git refuses other names anyway


def ls_refs_request(refs: Iterable[str], object_format: str | None) -> bytes:
    """A protocol v2 ls-refs command asking, with their symbolic targets, for HEAD and the pushed refs."""
    lines = [pkt(b"command=ls-refs\n")]
    if object_format:
        lines.append(pkt(f"object-format={object_format}\n".encode()))
    lines += [DELIM, pkt(b"symrefs\n")]
    lines += [pkt(f"ref-prefix {ref}\n".encode()) for ref in sorted({"HEAD", *refs}) if _REF_NAME.fullmatch(ref)]
    return b"".join(lines) + FLUSH


class LsRefsReader:
    """An ls-refs answer (``<oid> <ref>[ symref-target:<ref>]…`` lines, then a flush), read as it arrives;
    only HEAD and the pushed refs are kept (a prefix may match many more)."""

    def __init__(self, pushed: Iterable[str]) -> None:
        self._reader = PktReader(2 * 65536)
        self._pushed = frozenset(pushed)
        self._default: str | None = None
        self._targets: dict[str, str] = {}

    def feed(self, data: bytes) -> ForgeRefs | None:
        """The refs once the answer ended, None while more is to come."""
        self._reader.feed(data)
        try:
            while (line := self._reader.take()) is not None:
                name, target = _ls_refs_line(line)
                if target is None:
                    continue
                if name == "HEAD":
                    self._default = target
                elif name in self._pushed:
                    self._targets[name] = target
        except _Short:
            return None
        return ForgeRefs(self._default, self._targets)


def _ls_refs_line(line: bytes) -> tuple[str, str | None]:
    """(ref, the ref it points to when it is symbolic, else None)."""
    oid, _, rest = line.rstrip(b"\n").partition(b" ")
    if not (_OID.match(oid) or oid == b"unborn") or not rest:
        raise PushError("malformed ls-refs line")
    name, *attributes = rest.decode("utf-8", "replace").split(" ")
    target = next((a[len("symref-target:"):] for a in attributes if a.startswith("symref-target:")), None)
    return name, target


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


def _default_branch_reason(command: Command, refs: ForgeRefs) -> str | None:
    """Why the command would move the default branch, or None: by its name, through a symbolic ref on
    the forge, or (a forge that names no symbolic ref) by standing where the default branch stands."""
    shown = (refs.default_ref or command.ref).removeprefix("refs/heads/")
    if _is_default(command.ref, refs.default_ref):
        return f"pushing to the default branch ({shown}) is not allowed by dejima; push another branch"
    if _is_default(refs.moved(command.ref), refs.default_ref):
        return (f"{command.ref} is a symbolic ref to the default branch ({shown}) on the forge, so a push to it "
                "moves that branch; not allowed by dejima: push another branch")
    if not refs.symbolic_known and refs.default_tip is not None and command.old == refs.default_tip:
        return (f"this forge does not say which refs are symbolic (git protocol v0), and {command.ref} stands "
                f"at the default branch's commit: it may be an alias of {shown}, so dejima refuses the update; "
                "push a new branch")
    return None


def decide(request: PushRequest, refs: ForgeRefs, policy: PushPolicy,
           parents: dict[str, tuple[str, ...]] | None, short_of: str = "") -> list[tuple[str, str | None]]:
    """(ref, reason it is refused, or None) per command. ``parents`` None: the pack is not read yet,
    so fast-forwards are not judged. ``short_of``: the budget the pack's commits outgrew (the proof
    may then fail only for that), said in the reason."""
    results: list[tuple[str, str | None]] = []
    for command in request.commands:
        reason = None if policy.allow_default_branch else _default_branch_reason(command, refs)
        if reason is None and is_zero(command.new) and not policy.allow_force:
            reason = "deleting a ref is not allowed by dejima"
        elif reason is None and parents is not None and needs_proof(command, policy) \
                and not reaches(command.new, command.old, parents):
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
