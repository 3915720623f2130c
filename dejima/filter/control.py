"""The host's control channel into a running filter: live grants, revokes and their listing.

The channel is a unix socket at a path inside a host directory that is mounted into the filter
alone (``/run/dejima`` in the filter): the session shares the filter's network namespace, so it
could reach anything on loopback or on an abstract socket, but not a path in the filter's mount
namespace. The socket belongs to the launcher's uid, mode 0600.

A message is one JSON object on one line, answered by one line:

    {"v": 1, "op": "grant", "entries": ["crates.io:443"], "seconds": 1800, "reason": "build"}
    {"v": 1, "op": "revoke", "entries": ["crates.io:443"]}
    {"v": 1, "op": "list"}

Messages are validated strictly (unknown keys, wrong types, bad entries: refused with a reason,
nothing changed). A grant uses the same entry grammar and the same deny list as ``--allow``; it
takes effect for the next query in one step (the resolver's policy is swapped whole; an address
grant goes into the nft sets), and the filter enforces its expiry itself, so it holds even if the
host side dies. A revoke removes the entry, the addresses learned for the names it allowed, and
cuts their established flows.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from dejima.core.egress import EgressPolicy, Entry, PolicyError, parse_entry, policy_document
from dejima.core.grants import MAX_SECONDS, PROTOCOL  # the host side builds its messages from the same
from dejima.core.special_entries import grant_places, why_special  # the start's rule for address entries
from dejima.filter.nft import SetWriter
from dejima.filter.resolver import PolicyResolver

MAX_MESSAGE = 64 * 1024
MAX_ENTRIES = 64
MAX_REASON = 500
_KEYS = {"grant": {"v", "op", "entries", "seconds", "reason", "special"}, "revoke": {"v", "op", "entries", "reason"},
         "list": {"v", "op"}}


class Refused(ValueError):
    """A control message that changes nothing; the text is the reason sent back."""


@dataclass(frozen=True, slots=True)
class Grant:
    entry: Entry
    since: float  # wall clock
    expires: float | None  # wall clock; None: for the session's life
    reason: str

    def to_json(self) -> dict[str, object]:
        return {"entry": self.entry.canonical, "since": round(self.since, 3),
                "expires": None if self.expires is None else round(self.expires, 3), "reason": self.reason}


class Grants:
    """The live grants of one session, applied to its resolver and nft sets."""

    def __init__(self, resolver: PolicyResolver, sets: SetWriter, record: Callable[[dict[str, Any]], None],
                 clock: Callable[[], float] = time.time) -> None:
        self.resolver, self.sets, self.record, self.clock = resolver, sets, record, clock
        self.base: EgressPolicy = resolver.policy
        self.places = grant_places(self.base.denied_addresses)
        self.active: dict[str, Grant] = {}  # canonical entry -> grant
        self.timers: dict[str, asyncio.TimerHandle] = {}

    # --- messages ------------------------------------------------------------------------------
    def handle(self, raw: bytes) -> dict[str, Any]:
        try:
            message = _parse(raw)
            op = message["op"]
            if op == "list":
                return {"ok": True, **self.listing()}
            texts = _entries(message)
            special = _special(message, texts)
            entries = [self._entry(text, special) for text in texts]
            reason = _reason(message)
            if op == "grant":
                return {"ok": True, "granted": self.grant(entries, _seconds(message), reason)}
            return {"ok": True, "revoked": self.revoke(entries, reason or "revoked")}
        except Refused as exc:
            return {"ok": False, "error": str(exc)}

    def _entry(self, text: str, special: frozenset[str] = frozenset()) -> Entry:
        entry = _parsed(text)
        if entry.kind == "network":
            assert entry.network is not None
            if entry.network.version != 4 or entry.network.num_addresses != 1:
                raise Refused(f"{text!r}: a live grant takes one IPv4 address; allow networks at the start "
                              "(--allow) instead")
            for denied, why in self.base.denied:
                if denied.matches_address(entry.network.network_address):
                    raise Refused(f"{text!r} is on the deny list: {why}")
            # The start's rule for an allowed address (--allow), with its override: one rule for both.
            special_reason = why_special(entry, self.places)
            if special_reason is not None and entry.canonical not in special:
                raise Refused(f"{text!r} {special_reason}; such a grant needs an override that names it: "
                              f"--allow-special {entry.canonical}")
            return entry
        for denied, why in self.base.denied:
            if denied.matches_name(entry.name) or (entry.kind == "wildcard" and denied.kind == "wildcard" and (
                    entry.name == denied.name or entry.name.endswith("." + denied.name))):
                raise Refused(f"{text!r} is on the deny list: {why}")
        return entry

    # --- grant, revoke, expire -----------------------------------------------------------------
    def grant(self, entries: list[Entry], seconds: int | None, reason: str) -> list[str]:
        now = self.clock()
        expires = None if seconds is None else now + seconds
        for entry in entries:
            self.active[entry.canonical] = Grant(entry, now, expires, reason)
            if entry.kind == "network":
                assert entry.network is not None
                ports = None if entry.port is None else [entry.port]
                self.sets.add([str(entry.network.network_address)], ports, seconds)
            self._schedule(entry.canonical, seconds)
            self.record({"kind": "grant", "entry": entry.canonical, "reason": reason,
                         **({"expires": round(expires, 3)} if expires is not None else {})})
        self._apply()
        return [e.canonical for e in entries]

    def revoke(self, entries: list[Entry], reason: str, kind: str = "revoke") -> list[str]:
        missing = [e.canonical for e in entries if e.canonical not in self.active]
        if missing:
            raise Refused(f"not a live grant of this session: {', '.join(missing)} "
                          "(only grants made with dejima-allow can be revoked)")
        gone = [self.active.pop(e.canonical) for e in entries]
        for grant in gone:
            timer = self.timers.pop(grant.entry.canonical, None)
            if timer is not None:
                timer.cancel()
        self._apply()
        cut = self._cut(gone)
        for grant in gone:
            self.record({"kind": kind, "entry": grant.entry.canonical, "reason": reason,
                         **({"addresses": cut} if cut else {})})
        return [g.entry.canonical for g in gone]

    def _cut(self, gone: list[Grant]) -> list[str]:
        """Addresses no remaining entry allows any more: out of the sets, their flows cut."""
        policy = self.resolver.policy
        learned = self.resolver.learned()
        names = {name for name in set(learned.values())
                 if any(g.entry.matches_name(name) for g in gone) and not policy.name_verdict(name).allowed}
        addresses = [a for a, n in learned.items() if n in names]
        for grant in gone:
            network = grant.entry.network
            if network is not None and not any(e.matches_address(network.network_address)
                                               for e in policy.literal_entries()):
                addresses.append(str(network.network_address))
        self.resolver.forget(names)
        self.sets.revoke(sorted(set(addresses)))
        return sorted(set(addresses))

    def _schedule(self, key: str, seconds: int | None) -> None:
        timer = self.timers.pop(key, None)
        if timer is not None:
            timer.cancel()
        if seconds is None:
            return
        with contextlib.suppress(RuntimeError):  # no running loop (unit tests drive expiry by hand)
            self.timers[key] = asyncio.get_running_loop().call_later(seconds, self.expire, key)

    def expire(self, key: str) -> None:
        grant = self.active.get(key)
        if grant is not None:
            self.revoke([grant.entry], "its time ran out", kind="grant-expired")

    def _apply(self) -> None:
        # One assignment: the resolver sees the old policy or the new one, never a mix.
        self.resolver.policy = replace(self.base, allowed=self.base.allowed + tuple(
            g.entry for g in self.active.values()))

    def listing(self) -> dict[str, Any]:
        denials = sorted(self.resolver.denials.values(), key=lambda d: d.last, reverse=True)
        return {"grants": [g.to_json() for g in self.active.values()],
                "denials": [{"name": d.name, "count": d.count, "last": round(d.last, 3), "reason": d.reason,
                             "grantable": d.grantable and not self.resolver.policy.name_verdict(d.name).allowed}
                            for d in denials],
                # The policy in force (grants included), for `dejima doctor --session`'s checks.
                "policy": policy_document(self.resolver.policy)}


def _parse(raw: bytes) -> dict[str, Any]:
    try:
        message = json.loads(raw)
    except ValueError as exc:
        raise Refused(f"not a JSON object: {exc}") from None
    if not isinstance(message, dict):
        raise Refused("a control message is a JSON object")
    if message.get("v") != PROTOCOL:
        raise Refused(f"protocol version {message.get('v')!r} is not spoken here (this filter speaks {PROTOCOL})")
    allowed = _KEYS.get(message.get("op"))  # type: ignore[arg-type]
    if allowed is None:
        raise Refused(f"unknown op {message.get('op')!r}; one of {', '.join(sorted(_KEYS))}")
    unknown = sorted(set(message) - allowed)
    if unknown:
        raise Refused(f"unknown key(s) {', '.join(unknown)} for op {message['op']}")
    return message


def _entries(message: dict[str, Any]) -> list[str]:
    entries = message.get("entries")
    if not isinstance(entries, list) or not entries or not all(isinstance(e, str) for e in entries):
        raise Refused("entries must be a non-empty list of strings")
    if len(entries) > MAX_ENTRIES:
        raise Refused(f"at most {MAX_ENTRIES} entries in one message")
    return entries


def _parsed(text: str) -> Entry:
    try:
        return parse_entry(text, "grant")
    except PolicyError as exc:
        raise Refused(exc.message) from None


def _special(message: dict[str, Any], texts: list[str]) -> frozenset[str]:
    """The overrides of a grant (canonical), each naming one of its entries exactly."""
    special = message.get("special", [])
    if not isinstance(special, list) or not all(isinstance(e, str) for e in special):
        raise Refused("special must be a list of strings")
    named = {_parsed(text).canonical for text in texts}
    overrides = frozenset(_parsed(text).canonical for text in special)
    unknown = sorted(overrides - named)
    if unknown:
        raise Refused(f"--allow-special {', '.join(unknown)} overrides nothing: no entry of this grant is exactly "
                      "that (an override unlocks the entry written the same way)")
    return overrides


def _seconds(message: dict[str, Any]) -> int | None:
    seconds = message.get("seconds")
    if seconds is None:
        return None
    if not isinstance(seconds, int) or isinstance(seconds, bool) or not 1 <= seconds <= MAX_SECONDS:
        raise Refused(f"seconds must be a whole number from 1 to {MAX_SECONDS}")
    return seconds


def _reason(message: dict[str, Any]) -> str:
    reason = message.get("reason", "")
    if not isinstance(reason, str) or len(reason) > MAX_REASON:
        raise Refused(f"reason must be text of at most {MAX_REASON} characters")
    return reason


async def start_control(grants: Grants, path: str, owner: int) -> asyncio.AbstractServer:
    """Serve ``grants`` on the unix socket ``path``, owned by uid ``owner``, mode 0600."""
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(10):
                raw = await reader.readline()
            if len(raw) > MAX_MESSAGE or not raw.endswith(b"\n"):
                answer: dict[str, Any] = {"ok": False, "error": f"one message of at most {MAX_MESSAGE} bytes, "
                                                                 "ending with a newline"}
            else:
                answer = grants.handle(raw)
            writer.write(json.dumps(answer, sort_keys=True).encode() + b"\n")
            await writer.drain()
        except (TimeoutError, ConnectionError, ValueError):
            pass
        finally:
            writer.close()

    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    server = await asyncio.start_unix_server(serve, path, limit=MAX_MESSAGE + 1)
    # The filter cannot chown (no CAP_CHOWN), so the launcher's uid gets in by the mode; only the
    # launcher can reach the path at all (its parent on the host is the launcher's 0700 directory,
    # and the session does not have it mounted).
    os.chmod(path, 0o666 if owner != os.getuid() else 0o600)
    return server
