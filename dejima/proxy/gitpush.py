"""The guard of git routes: each request judged on what the forge will read, pushes as they stream.

- Every request is first made canonical (dejima.core.gitpath): one the proxy cannot read one way
  only is refused (403, a violation, nothing forwarded); otherwise the canonical target is what
  goes upstream, so the forge acts on exactly what was judged.
- ``GET <repo>/info/refs?service=git-receive-pack`` toward another repository: 403, text/plain,
  which git prints as ``remote: dejima proxy: …``.
- ``POST <repo>/git-receive-pack``: the commands are read as they arrive (dejima.core.pushrules),
  the default branch and the pushed refs that are symbolic from the upstream's upload-pack (v2 ls-refs). A push the
  commands alone break is answered with a receive-pack report once its body was read and dropped;
  it never reaches the upstream. Otherwise the body streams on as it arrives. When an update must
  be proven a fast-forward, the pack is read on its way (dejima.core.packscan keeps the commits'
  parents, within the session's budget) and its last bytes, the pack's trailing hash, are held
  back until the verdict: git stores nothing and moves no ref before it has them. A refused push
  has its upstream connection cut there, and the client gets the report.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import ClassVar

from dejima.core.credentials import Route, credential_value, split_route_target, upstream_target
from dejima.core.gitpath import GitTarget, Unjudgeable, judge_git_target
from dejima.core.httpwire import (
    Headers,
    HttpError,
    parse_response_head,
    response_framing,
    serialize_request,
    wants_keep_alive,
)
from dejima.core.limits import format_bytes
from dejima.core.packscan import PackError, PackScanner
from dejima.core.pushrules import (
    AdvertisementReader,
    CommandReader,
    ForgeRefs,
    LsRefsReader,
    PushError,
    PushPolicy,
    PushRequest,
    PushTooLarge,
    decide,
    ls_refs_request,
    needs_proof,
    report,
)
from dejima.proxy.budget import Hold
from dejima.proxy.exchange import Exchange, Outcome, Withheld
from dejima.proxy.http_streams import BodyCut, BodyWriter, OverBudget, body_pieces, plain_response
from dejima.proxy.routes import Forwarding, RouteSpec
from dejima.proxy.services import ProxyServices
from dejima.proxy.upstream import UpstreamError


@dataclass(frozen=True, slots=True)
class GitPushGuard(Forwarding):
    """The behaviour of git routes (dejima.proxy.routes.RouteBehaviour): forwarding, each request judged first."""

    guards_pushes: ClassVar[bool] = True
    policy: PushPolicy

    async def send(self, services: ProxyServices, spec: RouteSpec, exchange: Exchange, headers: Headers) -> Outcome:
        return await _forward_git(services, spec, exchange, headers, self.policy)


async def _forward_git(server: ProxyServices, spec: RouteSpec, exchange: Exchange, headers: Headers,
                       policy: PushPolicy) -> Outcome:
    """Forward one request of a git route, judged and canonical."""
    route = spec.route.name
    split = split_route_target(exchange.head.target)
    assert split is not None  # admission only lets route targets through
    try:
        target = judge_git_target(exchange.head.method, split[1])
    except Unjudgeable as exc:
        return await _refuse(server, exchange, "ambiguous-request", route,
                             f"not forwarded: this request on a git route holds {exc}")
    exchange.target = upstream_target(spec.route.upstream, target.tail)
    if target.kind is not None and not policy.allows_repository(target.repository):
        allowed = ", ".join(policy.repositories) or "none"
        return await _refuse(server, exchange, "push-refused", route,
                             f"pushes through this session go only to {allowed}, not {target.repository}")
    if target.kind != "push":
        return await exchange.run(serialize_request(exchange.head.method, exchange.target, headers))
    if exchange.head.method != "POST":
        return await _refuse(server, exchange, "push-refused", route, "a push is a POST to git-receive-pack")
    encoding = (exchange.head.get(b"content-encoding") or b"identity").lower()
    if encoding != b"identity":
        return await _refuse(server, exchange, "push-refused", route,
                             "a compressed push body cannot be checked as it streams (git never compresses one)")
    with Hold(server.budget) as hold:
        return await _Push(server, spec, exchange, headers, target, policy, hold).run()


async def _refuse(server: ProxyServices, exchange: Exchange, kind: str, route: str, message: str) -> Outcome:
    server.violation(kind, route, message)
    return await exchange.fail(403, message)


@dataclass
class _Push:
    server: ProxyServices
    spec: RouteSpec
    exchange: Exchange
    headers: Headers
    target: GitTarget
    policy: PushPolicy
    hold: Hold

    async def run(self) -> Outcome:
        pieces = body_pieces(self.exchange.reader, self.exchange.framing, self.server.idle)
        try:
            commands, rest, request = await self._commands(pieces)
            if request is None:  # git's probe (a lone flush) before a large push: nothing to judge
                return await self.exchange.run_whole(self.headers, commands + rest)
            refs = await self._forge_refs(request)
        except OverBudget as exc:
            return await self._unchecked(exc.reason, 413, "budget-exceeded")
        except PushTooLarge as exc:
            return await self._unchecked(str(exc), 413)
        except HttpError as exc:
            return await self._unchecked(exc.reason, exc.status)
        except (PushError, BodyCut) as exc:
            return await self._unchecked(str(exc), 400)
        except UpstreamError as exc:
            return await self.exchange.fail(exc.status, exc.message)
        results = decide(request, refs, self.policy, parents=None)
        if any(reason for _, reason in results):
            return await self._refused_before_upstream(request, results, pieces, len(commands) + len(rest))
        prove = any(needs_proof(command, self.policy) for command in request.commands)
        scanner = PackScanner(request.sha256, self.hold.reserve) if prove else None
        head = serialize_request("POST", self.exchange.target, self.headers)
        return await self.exchange.run(head, send=lambda upstream: self._stream(
            upstream, commands, rest, pieces, request, refs, scanner))

    async def _commands(self, pieces: AsyncIterator[bytes]) -> tuple[bytes, bytes, PushRequest | None]:
        """(the raw head of the body, the bytes after it, its commands or None for git's probe)."""
        reader, seen = CommandReader(), []
        async for piece in pieces:
            if not self.hold.reserve(len(piece)):
                raise OverBudget(413, f"the push's commands: {self.server.budget.refusal()}")
            seen.append(piece)
            if reader.feed(piece):
                raw = b"".join(seen)
                head = raw[:len(raw) - len(reader.rest)]
                if reader.probe:
                    async for _ in pieces:
                        raise PushError("data after git's probe (a lone flush)")
                return head, reader.rest, reader.request
        raise PushError("the body ended before the push's commands did")

    async def _forge_refs(self, request: PushRequest) -> ForgeRefs:
        """The default branch and the pushed refs that are symbolic, asked of the upstream's upload-pack:
        its advertisement in protocol v2, then ls-refs; a forge that answers v0 says HEAD's target only."""
        base = f"{self.spec.route.upstream.base_path}/{self.target.repository}"
        credential = credential_value(self.spec.route, await self.spec.source.current())
        advertisement = AdvertisementReader()
        await self._ask(credential, "GET", f"{base}/info/refs?service=git-upload-pack", b"", [], advertisement.feed)
        if not advertisement.v2:
            assert advertisement.refs is not None
            return advertisement.refs
        pushed = [command.ref for command in request.commands]
        listing = LsRefsReader(pushed)
        found: list[ForgeRefs] = []

        def read(piece: bytes) -> bool:
            refs = listing.feed(piece)
            if refs is not None:
                found.append(refs)
            return refs is not None

        body = ls_refs_request(pushed, advertisement.object_format)
        await self._ask(credential, "POST", f"{base}/git-upload-pack", body, [
            (b"Content-Type", b"application/x-git-upload-pack-request"),
            (b"Accept", b"application/x-git-upload-pack-result"), (b"Content-Length", b"%d" % len(body))], read)
        return found[0]

    async def _ask(self, credential: str, method: str, target: str, body: bytes, headers: Headers,
                   read: Callable[[bytes], bool]) -> None:
        """One request to the upstream's upload-pack with the route's credential, in protocol v2; its
        answer is given to ``read`` piece by piece until it says it has what it needs."""
        route: Route = self.spec.route
        conn = await self.server.pool.connect(route.upstream)
        try:
            conn.writer.write(serialize_request(method, target, [
                (b"Host", route.upstream.host_header.encode()), (route.header.encode(), credential.encode()),
                (b"User-Agent", b"git/dejima-push-guard"), (b"Git-Protocol", b"version=2"),
                (b"Connection", b"close"), *headers]) + body)
            async with asyncio.timeout(self.server.config.response_timeout):
                head = parse_response_head(await conn.reader.readuntil(b"\r\n\r\n"))
            if head.status != 200:
                raise UpstreamError(502, f"{route.upstream} answered {head.status} to {method} {target}")
            async for piece in body_pieces(conn.reader, response_framing(method, head), self.server.idle):
                if read(piece):
                    return
            raise UpstreamError(502, f"the answer of {route.upstream} to {method} {target} ended early")
        except (PushError, OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, HttpError, BodyCut) as exc:
            raise UpstreamError(502, f"could not read the refs of {route.upstream}: {exc}") from None
        finally:
            conn.close()

    async def _unchecked(self, why: str, status: int, kind: str = "push-refused") -> Outcome:
        message = f"push not checked: {why}"
        self.server.violation(kind, self.spec.route.name, message)
        return await self.exchange.fail(status, message)

    async def _refused_before_upstream(self, request: PushRequest, results: list[tuple[str, str | None]],
                                       pieces: AsyncIterator[bytes], received: int) -> Outcome:
        """The report, once the rest of the body was read and dropped (git reads the answer only after
        sending it all); a body past the push size limit is cut instead."""
        self.server.violation("push-refused", self.spec.route.name, _refusals(results))
        limit = self.server.config.max_push_bytes
        try:
            async for piece in pieces:
                received += len(piece)
                if received > limit:
                    return await self.exchange.fail(413, f"push refused, and larger than {format_bytes(limit)}")
        except (BodyCut, HttpError, TimeoutError) as exc:
            return await self.exchange.fail(400, f"push refused, and its body was cut: {exc}")
        answer, outcome = _report(request, results, received, self._keep_alive())
        self.exchange.writer.write(answer)
        await self.exchange.writer.drain()
        return outcome

    def _keep_alive(self) -> bool:
        return wants_keep_alive(self.exchange.head.version, self.exchange.head.headers)

    def _withheld(self, status: int, why: str, received: int) -> Withheld:
        message = f"push not checked: {why}"
        self.server.violation("push-refused", self.spec.route.name, message)
        return Withheld(plain_response(status, "Refused", message, close=True),
                        Outcome(status, received, error=message))

    async def _stream(self, upstream: asyncio.StreamWriter, commands: bytes, rest: bytes,
                      pieces: AsyncIterator[bytes], request: PushRequest, refs: ForgeRefs,
                      scanner: PackScanner | None) -> int:
        """Send the body on as it arrives; with a proof to make, read the pack on the way and keep its
        trailing hash back until the verdict (Withheld when the push is refused)."""
        writer = BodyWriter(upstream, chunked=self.exchange.framing.kind == "chunked")
        limit = self.server.config.max_push_bytes
        kept = b""  # the last bytes seen: the pack's trailing hash, once the pack has ended
        received = len(commands)
        await writer.write(commands)
        try:
            async for data in _after(rest, pieces):
                received += len(data)
                if received > limit:
                    raise self._withheld(413, f"a push larger than {format_bytes(limit)} (the push size limit)",
                                         received)
                if scanner is None:
                    await writer.write(data)
                    continue
                scanner.feed(data)
                data = kept + data
                cut = max(0, len(data) - scanner.hash_length)
                kept = data[cut:]
                await writer.write(data[:cut])
            if scanner is not None:
                scanner.finish()
        except PackError as exc:
            raise self._withheld(400, str(exc), received) from None
        if scanner is not None:
            short_of = format_bytes(self.server.budget.limit) if scanner.incomplete else ""
            results = decide(request, refs, self.policy, scanner.parents, short_of)
            if any(reason for _, reason in results):
                answer, outcome = _report(request, results, received, self._keep_alive())
                self.server.violation("push-refused", self.spec.route.name, _refusals(results))
                raise Withheld(answer, outcome)
        await writer.write(kept)
        await writer.end()
        return received


async def _after(first: bytes, pieces: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    if first:
        yield first
    async for piece in pieces:
        yield piece


def _refusals(results: list[tuple[str, str | None]]) -> str:
    return "; ".join(f"{ref}: {reason}" for ref, reason in results if reason)


def _report(request: PushRequest, results: list[tuple[str, str | None]], received: int,
            keep_alive: bool) -> tuple[bytes, Outcome]:
    """The refusing report as a response; the connection stays open only when the client asked to keep it."""
    body = report(results, request.capabilities)
    answer = (b"HTTP/1.1 200 OK\r\nContent-Type: application/x-git-receive-pack-result\r\n"
              b"Cache-Control: no-cache\r\nContent-Length: %d\r\n" % len(body)
              + (b"" if keep_alive else b"Connection: close\r\n") + b"\r\n" + body)
    return answer, Outcome(200, received, len(body), keep_alive, "push refused: " + _refusals(results))
