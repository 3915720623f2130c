"""The filter's resolver: the only DNS the session can use. This module decides; dnsserver.py
(toward the session) and dns_upstream.py (toward the upstreams) do the sockets.

A query that is not an ordinary question (query.py) or asks for a name that is not allowed is
answered at once and never leaves the filter (no DNS tunnelling through it). An allowed name is
sent upstream as a query the resolver builds itself. In the answer:

- only the chain that starts at the asked name is kept: its CNAMEs, then the records of the
  asked type at the chain's end. A name on the deny list anywhere in the chain refuses the
  whole answer, with the deny reason; the chain's other names are not thereby allowed for
  queries of their own.
- A records pointing at a denied address class (loopback, private, link-local/metadata, the host,
  the engine's gateway, ...) are dropped unless that exact address is allowed; when nothing
  survives, the answer becomes REFUSED.
- Surviving addresses go into the nft allow sets, with the allowed ports and a timeout derived
  from the TTL, *before* the answer reaches the client; TTLs the client sees are capped so that
  it never caches an address longer than the set keeps it.
- AAAA questions get an empty answer: sessions have no IPv6.

Answers are cached for their TTL and checked against the policy again on every hit, so a cached
answer can never outlive a change of policy; the name is checked again when the upstream's answer
arrives and after its insert, so a grant revoked meanwhile refuses the answer. Refusals carry an
Extended DNS Error (RFC 8914) with the reason when the client speaks EDNS, naming one of the kinds of
why.py (what ``dejima-why`` in the session reads back): a name not allowed, denied, carrying a
credential or revoked; an answer through a denied alias, to denied addresses only, or malformed; an
upstream that failed; and, on the empty AAAA answer, no IPv6. Packets are read and
written as bytes (dns_wire.py, answer.py, hitcache.py); dnslib reads only the queries too unusual for
dns_wire.plain_request (query.py).
"""

from __future__ import annotations

import ipaddress
import itertools
import re
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from dejima.core.egress import EgressPolicy, Verdict, ttl_timeout
from dejima.core.grants import Denial
from dejima.filter import answer, dns_wire, hitcache, query, why
from dejima.filter.answer import TYPE_A, TYPE_AAAA, TYPE_SOA, Answer, DnsUpstreamError, Rec
from dejima.filter.dns_wire import FORMERR, NOERROR, REFUSED, SERVFAIL, ClientQuery, Question
from dejima.filter.query import Malformed
from dejima.filter.why import RefusalKind

SELF_CHECK_NAME = "dejima-self-check.invalid"  # ".invalid" can never be allowed: always refused
CACHE_ENTRIES = 1024  # answers kept (hits and the others): an agent repeats far fewer names
NAME_ENTRIES = 16384  # address -> name, for naming the domain of a blocked connection
DENIAL_ENTRIES = 256  # refused names remembered for `dejima-allow`
FOLD_SECONDS = 5.0  # identical refusal records within this window are folded into one

Recorder = Callable[[dict[str, Any]], None]
Forward = Callable[[Question], Awaitable[Answer]]
MEMO_ENTRIES = 1024  # verdicts remembered per policy object
# quick()'s written reply: question, hit, age, the reply after its id, the hit's set elements
# (addresses, ports, timeout at that age).
Reply = tuple[Question, hitcache.Hit, int, bytes, list[str], list[int] | None, int]
INTERCEPT_ADDRESS, INTERCEPT_TTL = bytes((127, 0, 0, 1)), 300
NO_IPV6 = why.ede(why.NO_IPV6, "sessions have no IPv6")  # on every AAAA answer: getaddrinfo asks with each A
K = TypeVar("K")
V = TypeVar("V")
__all__ = ["SELF_CHECK_NAME", "PolicyResolver"]


class Sets(Protocol):
    """The allow sets as the resolver sees them (setbatch.BatchedSets over nft.SetWriter)."""

    def fresh(self, addresses: list[str], ports: list[int] | None, timeout: int | None) -> bool:
        """True when ``add`` would change nothing in the kernel."""

    async def add(self, addresses: list[str], ports: list[int] | None, timeout: int | None, others: int = 0) -> None:
        """Returns once the addresses are in the sets. ``others``: answers still on their way
        (the inserts of answers close together share a transaction)."""


@dataclass(frozen=True, slots=True)
class Cached:
    answer: Answer
    stored: float
    expires: float


TTL_FLOOR = 60  # seconds an allowed address stays in the sets, however short its TTL


class PolicyResolver:
    def __init__(self, policy: EgressPolicy, forward: Forward, sets: Sets, record: Recorder,
                 ttl_floor: int = TTL_FLOOR, ttl_ceiling: int = 3600, clock: Callable[[], float] = time.monotonic,
                 canaries: tuple[str, ...] = (), intercepted: frozenset[str] = frozenset()) -> None:
        self.policy, self.forward, self.sets, self.record = policy, forward, sets, record
        # Names the credential proxy's TLS fallback serves: answered with the loopback address the
        # filter relays to the proxy; never asked upstream, never put in a set.
        self.intercepted = intercepted
        # The random part of every placeholder and decoy credential of the session (lower-case
        # letters and digits): a name carrying one is refused, whatever the allow list says.
        self.canaries = canaries
        self.ttl_floor, self.ttl_ceiling, self.clock = ttl_floor, ttl_ceiling, clock
        # Plain dicts, oldest first, trimmed by an eighth at a time (_bounded): less memory per
        # entry than OrderedDicts, and a copy that leaves the table compact.
        self.cache: dict[Question, Cached] = {}
        self.hits: dict[Question, hitcache.Hit] = {}  # checked answers, as bytes
        # Replies quick() wrote, by the client's packet without its id: a repeat of the same
        # packet costs a lookup and the hit's checks, not a read and a render.
        self.replies: dict[bytes, Reply] = {}
        self.fetching = 0  # queries waiting for the upstream
        # Verdicts of the current policy object; the policy is replaced whole on any change.
        self.memo_policy: object = None
        self.name_memo: dict[str, Verdict] = {}
        self.address_memo: dict[str, Verdict] = {}
        self.names: dict[str, tuple[str, float]] = {}  # address -> (name, until)
        self.recent: OrderedDict[tuple[str, ...], float] = OrderedDict()
        # Names refused because no entry allows them: what `dejima-allow` offers to grant.
        self.denials: OrderedDict[str, Denial] = OrderedDict()

    # --- what the nflog reader asks ---------------------------------------------------------------
    def domain_of(self, address: str) -> str | None:
        found = self.names.get(address)
        return found[0] if found and found[1] > self.clock() else None

    def _remember(self, addresses: list[str], name: str, seconds: int) -> None:
        learned = (name, self.clock() + seconds)
        for address in addresses:
            self.names.pop(address, None)
            self.names[address] = learned
        self.names = _bounded(self.names, NAME_ENTRIES)

    def learned(self) -> dict[str, str]:
        """Address -> the name it was last learned for, for addresses still in the sets."""
        now = self.clock()
        return {address: name for address, (name, until) in self.names.items() if until > now}

    def forget(self, names: set[str]) -> None:
        """Drop cached answers and learned addresses of ``names`` (a revoked grant's)."""
        for key in [k for k in self.cache if k[0] in names]:
            del self.cache[key]
        for key in [k for k in self.hits if k[0] in names]:
            del self.hits[key]
        for packet in [p for p, reply in self.replies.items() if reply[0].name in names]:
            del self.replies[packet]
        for address in [a for a, (n, _u) in self.names.items() if n in names]:
            del self.names[address]

    def _denied(self, name: str, qtype: str, reason: str, grantable: bool) -> None:
        denial = self.denials.pop(name, None) or Denial(name, 0, 0.0, reason, grantable)
        self.denials[name] = Denial(name, denial.count + 1, time.time(), reason, grantable)
        while len(self.denials) > DENIAL_ENTRIES:
            self.denials.popitem(last=False)

    # --- records ------------------------------------------------------------------------------
    def _report(self, record: dict[str, Any]) -> None:
        """Record a refusal, folding repeats of the same one within FOLD_SECONDS (a retry loop or
        a flood must not drown the record)."""
        key = tuple(str(record.get(k, "")) for k in ("kind", "domain", "qtype", "address", "reason"))
        now = self.clock()
        if now - self.recent.get(key, -1e9) < FOLD_SECONDS:
            return
        self.recent.pop(key, None)
        self.recent[key] = now
        while len(self.recent) > 1024:
            self.recent.popitem(last=False)
        self.record(record)

    # --- memory and verdicts ------------------------------------------------------------------
    def prune(self) -> int:
        """Drop what has expired: cached answers, learned addresses, folded refusals, and the
        verdicts remembered (cheap to find again). The maps are copied, so their tables shrink.
        Returns how many answers, hits and learned addresses went."""
        now = self.clock()
        held = len(self.cache) + len(self.hits) + len(self.names)
        self.cache = {k: e for k, e in self.cache.items() if e.expires > now}
        self.hits = {k: h for k, h in self.hits.items() if h.expires > now}
        self.replies = {}
        self.names = {a: learned for a, learned in self.names.items() if learned[1] > now}
        for folded in [k for k, t in self.recent.items() if now - t >= FOLD_SECONDS]:
            del self.recent[folded]
        self.memo_policy, self.name_memo, self.address_memo = None, {}, {}
        return held - len(self.cache) - len(self.hits) - len(self.names)

    def _memo(self) -> None:
        if self.memo_policy is not self.policy or len(self.name_memo) + len(self.address_memo) > MEMO_ENTRIES:
            self.memo_policy, self.name_memo, self.address_memo = self.policy, {}, {}

    def _name_verdict(self, name: str) -> Verdict:
        self._memo()
        verdict = self.name_memo.get(name)
        if verdict is None:
            verdict = self.name_memo[name] = self.policy.name_verdict(name)
        return verdict

    def _address_verdict(self, address: str) -> Verdict:
        self._memo()
        verdict = self.address_memo.get(address)
        if verdict is None:
            verdict = self.address_memo[address] = self.policy.address_verdict(ipaddress.ip_address(address))
        return verdict

    # --- answering ----------------------------------------------------------------------------
    def quick(self, packet: bytes) -> bytes | None:
        """The reply to a plain repeated question from the checked answers, without a task; None:
        ``answer`` decides (a miss, a policy change, a set to refresh, a query the plain reader
        declines). The same packet again (any id) is answered from the bytes written for it last,
        checked as a hit is: the policy object, the hit still kept, its age, its set elements."""
        reply = self.replies.get(packet[2:])
        if reply is not None:
            question, hit, age, tail, addresses, ports, timeout = reply
            now = self.clock()
            if (hit.policy is self.policy and self.hits.get(question) is hit and hit.expires > now
                    and int(now - hit.stored) == age and (not addresses or self.sets.fresh(addresses, ports, timeout))):
                return packet[:2] + tail
        plain = dns_wire.plain_request(packet)
        return self._quick(packet, plain) if plain is not None else None

    def _quick(self, packet: bytes, plain: tuple[ClientQuery, Question]) -> bytes | None:
        request, question = plain
        hit = self.hits.get(question)
        if hit is None or hit.policy is not self.policy:
            return None
        now = self.clock()
        if hit.expires <= now:
            del self.hits[question]
            return None
        age = int(now - hit.stored)
        addresses, ports, timeout = self._elements(hit, age)
        if addresses and not self.sets.fresh(addresses, ports, timeout):
            return None
        data = hitcache.render(hit, request, age)
        if len(data) > request.limit:
            return None
        self.replies[packet[2:]] = (question, hit, age, data[2:], addresses, ports, timeout)
        self.replies = _bounded(self.replies, CACHE_ENTRIES)
        return data

    async def answer(self, packet: bytes, max_size: int | None = None) -> bytes | None:
        """The reply to one client packet (None: not even an id to answer to). ``max_size`` is
        the UDP limit; a larger reply is sent truncated so the client retries over TCP."""
        found = query.read(packet)
        if found is None:
            return dns_wire.formerr(packet)
        request, question = found
        if isinstance(question, Malformed):
            name = query.printable(packet)
            if name != SELF_CHECK_NAME:
                self._report({"kind": "dns", "domain": name, "reason": f"malformed query: {question}"})
            return self._refuse(request, why.MALFORMED_QUERY, f"malformed query: {question}", FORMERR)
        data = await self._answer(request, question)
        limit = max_size if max_size is not None else request.limit
        return data if len(data) <= limit else dns_wire.truncated(request)

    async def _answer(self, request: ClientQuery, question: Question) -> bytes:
        if self.canaries:
            squeezed = re.sub(r"[^a-z0-9]", "", question.name)
            if any(canary in squeezed for canary in self.canaries):
                self._report({"kind": "canary", "domain": question.name, "qtype": question.type_name,
                              "reason": "the name carries a placeholder or decoy credential of this session"})
                return self._refuse(request, why.CREDENTIAL, "the name carries a credential")
        verdict = self._name_verdict(question.name)
        if not verdict.allowed:
            if question.name != SELF_CHECK_NAME:  # the filter's own probe is not a violation
                self._report({"kind": "dns", "domain": question.name, "qtype": question.type_name,
                              "reason": verdict.reason})
                self._denied(question.name, question.type_name, verdict.reason, grantable=not verdict.entry)
            return self._refuse(request, _name_refusal(verdict), verdict.reason)
        if question.name in self.intercepted:
            return _intercepted(request, question)
        if question.qtype == TYPE_AAAA:  # no IPv6 in sessions: an empty answer, nothing forwarded
            return dns_wire.reply(request, ede=NO_IPV6)
        hit = self.hits.get(question)
        if hit is not None and hit.policy is self.policy and hit.expires > self.clock():  # checked under this policy
            age = int(self.clock() - hit.stored)
            if not await self._inserted(question, hit, age, fresh_ok=True):
                self.hits.pop(question, None)
                return self._refuse(request, why.REVOKED, "the grant was revoked")
            return hitcache.render(hit, request, age)
        cached = self._cached(question)
        if cached is None:
            try:
                cached = await self._fetch(question)
            except DnsUpstreamError as exc:
                self._report({"kind": "dns-upstream", "domain": question.name, "qtype": question.type_name,
                              "reason": str(exc)})
                return self._refuse(request, why.UPSTREAM_FAILED, "no upstream DNS answered", SERVFAIL)
        return await self._filtered(request, question, cached)

    def _cached(self, question: Question) -> Cached | None:
        """The answer kept for ``question``, to be checked again: from its hit entry (re-read from
        the bytes the client would get), or from the cache of the answers that are not hits."""
        now = self.clock()
        hit = self.hits.get(question)
        if hit is not None and hit.expires > now:
            found = hitcache.answer_of(hit, question)
            if found is not None:
                return Cached(found, hit.stored, hit.expires)
        entry = self.cache.get(question)
        return entry if entry is not None and entry.expires > now else None

    async def _fetch(self, question: Question) -> Cached:
        self.fetching += 1
        try:
            found = await self.forward(question)
        finally:
            self.fetching -= 1
        now = self.clock()
        if found.rcode != NOERROR or not found.ttl or found.ttl <= 0:
            return Cached(found, now, now)  # not kept
        return Cached(found, now, now + min(found.ttl, self.ttl_ceiling))

    def _keep(self, question: Question, upstream: Cached, hit: hitcache.Hit, plain: bool) -> None:
        """Keep a checked answer for its TTL: as a hit when ``plain`` (nothing dropped, checked
        under the current policy), else as the upstream's answer, to be checked on each use."""
        if upstream.expires <= upstream.stored:
            return
        if plain:
            self.hits[question] = hit
            self.hits = _bounded(self.hits, CACHE_ENTRIES)
            self.cache.pop(question, None)
        else:
            self.cache[question] = upstream
            self.cache = _bounded(self.cache, CACHE_ENTRIES)

    async def _filtered(self, request: ClientQuery, question: Question, upstream: Cached) -> bytes:
        """The client's reply from an upstream answer (fresh or cached), under the current policy
        (asked again: a grant may have been revoked while the upstream answered)."""
        verdict = self._name_verdict(question.name)
        if not verdict.allowed:
            return self._refuse(request, _name_refusal(verdict), verdict.reason)
        if upstream.answer.rcode == SERVFAIL:
            return self._refuse(request, why.UPSTREAM_FAILED, "the upstream DNS answered SERVFAIL", SERVFAIL)
        try:
            chain, records = answer.chain(question, upstream.answer.records)
        except Malformed as exc:
            self._report({"kind": "dns-answer", "domain": question.name, "qtype": question.type_name,
                          "reason": f"malformed upstream answer: {exc}"})
            return self._refuse(request, why.MALFORMED_ANSWER, f"the answer for {question.name} is malformed")
        for name in chain[1:]:
            reason = self.policy.denied_reason(name)
            if reason is not None:
                self._report({"kind": "dns-answer", "domain": question.name, "qtype": question.type_name,
                              "alias": name, "reason": reason})
                return self._refuse(request, why.ALIAS_DENIED, f"{question.name} is an alias of {name}: {reason}")
        kept, refused, answers = self._screened(records)
        for dropped, reason in refused:
            self._report({"kind": "dns-answer", "domain": question.name, "qtype": question.type_name,
                          "address": dropped, "reason": reason})
        if refused and not kept:
            return self._refuse(request, why.ANSWER_DENIED,
                                f"{question.name} resolves to a denied address ({refused[0][1]})")
        policy, port_list = self.policy, sorted(verdict.ports) if verdict.ports is not None else None
        authority = [] if answers else [rec for rec in upstream.answer.records if rec.rtype == TYPE_SOA]
        hit = hitcache.build(policy, question.name, upstream.answer.rcode, answers, authority, upstream.stored,
                             upstream.expires, kept, port_list, self.ttl_ceiling)
        age = int(self.clock() - upstream.stored)
        if not await self._inserted(question, hit, age, fresh_ok=False):
            return self._refuse(request, why.REVOKED, "the grant was revoked")
        self._keep(question, upstream, hit, not refused and hit.rcode == NOERROR and policy is self.policy)
        return hitcache.render(hit, request, age)

    async def _inserted(self, question: Question, hit: hitcache.Hit, age: int, fresh_ok: bool) -> bool:
        """Put the addresses of ``hit`` into the allow sets, before the client sees the answer, or
        its connect would race us (``fresh_ok``: a kept hit's repeat needs no insert while they
        are still there for long enough). False: the name was revoked while the insert ran."""
        if not hit.addresses:
            return True
        policy, (addresses, ports, timeout) = hit.policy, self._elements(hit, age)
        if fresh_ok and self.sets.fresh(addresses, ports, timeout):
            return True
        await self.sets.add(addresses, ports, timeout, others=self.fetching)
        if self.policy is not policy and not self._name_verdict(question.name).allowed:
            # The revoke cut these addresses (the set writer does not undo that for an insert
            # asked before it), and the answer is refused.
            return False
        self._remember(addresses, question.name, timeout)
        return True

    def _elements(self, hit: hitcache.Hit, age: int) -> tuple[list[str], list[int] | None, int]:
        """What ``hit`` puts into the allow sets at ``age``: addresses, ports, the timeout."""
        timeout = ttl_timeout(max(0, hit.address_ttl - age), self.ttl_floor, self.ttl_ceiling)
        return list(hit.addresses), list(hit.ports) if hit.ports is not None else None, timeout

    def _screened(self, records: list[Rec]) -> tuple[list[str], list[tuple[str, str]], list[Rec]]:
        """The allowed addresses, the refused ones with the reason, and the records without the
        refused addresses."""
        kept: list[str] = []
        refused: list[tuple[str, str]] = []
        answers: list[Rec] = []
        for rec in records:
            if rec.rtype == TYPE_A:
                address = answer.address(rec)
                verdict = self._address_verdict(address)
                if not verdict.allowed:
                    refused.append((address, verdict.reason))
                    continue
                kept.append(address)
            answers.append(rec)
        return kept, refused, answers

    def _refuse(self, request: ClientQuery, kind: RefusalKind, reason: str, rcode: int = REFUSED) -> bytes:
        return dns_wire.reply(request, rcode, ede=why.ede(kind, reason))


def _name_refusal(verdict: Verdict) -> RefusalKind:
    """A name refused by a deny entry (no grant lifts it), or because no entry allows it (`dejima-allow`
    can): the same split as the refusals `dejima-allow` offers to grant."""
    return why.DENIED if verdict.entry else why.NOT_ALLOWED


def _intercepted(request: ClientQuery, question: Question) -> bytes:
    """127.0.0.1 for an A question (the filter's TLS relay to the proxy), nothing for any other type."""
    if question.qtype != TYPE_A:
        return dns_wire.reply(request)
    body, _ = answer.encode([Rec(question.name, TYPE_A, INTERCEPT_TTL, INTERCEPT_ADDRESS)], question.name,
                            INTERCEPT_TTL)
    return dns_wire.reply(request, counts=(1, 0, 0), body=body)


def _bounded(entries: dict[K, V], cap: int) -> dict[K, V]:
    """``entries``, or when it holds more than ``cap``, a copy without its oldest eighth."""
    if len(entries) <= cap:
        return entries
    return dict(itertools.islice(entries.items(), len(entries) - cap + cap // 8, None))
