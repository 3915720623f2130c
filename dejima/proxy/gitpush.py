"""The push guard of git routes: applies dejima.core.pushrules before a receive-pack request goes upstream.

- ``GET <repo>/info/refs?service=git-receive-pack`` toward another repository: 403, text/plain, which
  git prints as ``remote: dejima: …``.
- ``POST <repo>/git-receive-pack``: the body is read whole (bounded), the upstream's upload-pack
  advertisement gives the default branch, the pack gives the commits; a push that breaks a rule is
  answered with a receive-pack report and never reaches the upstream; one that keeps them is
  forwarded as it came.
"""

from __future__ import annotations

import asyncio
import zlib
from typing import TYPE_CHECKING

from dejima.core.credentials import Route, credential_value, split_route_target
from dejima.core.httpwire import HttpError, parse_response_head, response_framing, serialize_request
from dejima.core.pushrules import (
    FLUSH,
    PushError,
    PushPolicy,
    decide,
    git_request,
    pack_commits,
    parse_advertisement,
    parse_push_request,
    report,
)
from dejima.proxy.exchange import Exchange, Outcome
from dejima.proxy.upstream import UpstreamError
from dejima.proxy.wire import read_body

if TYPE_CHECKING:
    from dejima.proxy.server import ProxyServer, RouteSpec

ADVERTISEMENT_LIMIT = 32 * 1024 * 1024


async def _advertisement(server: ProxyServer, route: Route, repository: str, credential: str) -> bytes:
    """The upstream's upload-pack ref advertisement (protocol v0, which names HEAD's target)."""
    target = f"{route.upstream.base_path}{repository}/info/refs?service=git-upload-pack"
    conn = await server.pool.connect(route.upstream)
    try:
        conn.writer.write(serialize_request("GET", target, [
            (b"Host", route.upstream.host_header.encode()), (route.header.encode(), credential.encode()),
            (b"User-Agent", b"git/dejima-push-guard"), (b"Connection", b"close")]))
        async with asyncio.timeout(server.config.response_timeout):
            head = parse_response_head(await conn.reader.readuntil(b"\r\n\r\n"))
        if head.status != 200:
            raise UpstreamError(502, f"{route.upstream} answered {head.status} to the ref advertisement")
        return await read_body(conn.reader, response_framing("GET", head), server.idle, ADVERTISEMENT_LIMIT)
    except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, HttpError) as exc:
        raise UpstreamError(502, f"could not read the ref advertisement of {route.upstream}: {exc}") from None
    finally:
        conn.close()


async def _refuse(server: ProxyServer, exchange: Exchange, status: int, message: str, route: str) -> Outcome:
    server.violation("push-refused", route, message)
    return await exchange.fail(status, message)


async def guard_push(server: ProxyServer, spec: RouteSpec, exchange: Exchange,
                     headers: list[tuple[bytes, bytes]]) -> Outcome | None:
    """None: not a push request, forward it as usual. Otherwise the push was answered here."""
    policy = spec.push
    split = split_route_target(exchange.head.target)
    request = git_request(split[1]) if split else None
    if policy is None or request is None:
        return None
    kind, repository = request
    route = spec.route.name
    if not policy.allows_repository(repository):
        allowed = ", ".join(policy.repositories) or "none"
        return await _refuse(server, exchange, 403, f"pushes through this session go only to {allowed}, "
                                                    f"not {repository.strip('/')}", route)
    if kind == "advertise":
        return None
    try:
        body = await read_body(exchange.reader, exchange.framing, server.idle, server.config.max_push_bytes)
    except HttpError as exc:
        return await _refuse(server, exchange, exc.status, f"push not checked: {exc.reason}", route)
    return await _check_and_forward(server, spec, exchange, headers, repository, body, policy)


async def _check_and_forward(server: ProxyServer, spec: RouteSpec, exchange: Exchange,
                             headers: list[tuple[bytes, bytes]], repository: str, body: bytes,
                             policy: PushPolicy) -> Outcome:
    route = spec.route
    encoding = (exchange.head.get(b"content-encoding") or b"").lower()
    try:
        plain = zlib.decompress(body, 16 + zlib.MAX_WBITS) if encoding == b"gzip" else body
        if plain == FLUSH:  # git's probe before a large (chunked) push: no commands, nothing to check
            return await exchange.run_whole(headers, body)
        push = parse_push_request(plain)
        credential = credential_value(route, await spec.source.current())
        advertised, default_ref = parse_advertisement(await _advertisement(server, route, repository, credential))
        sha256 = len(push.commands[0].new) == 64
        parents = await asyncio.to_thread(pack_commits, push.pack, sha256)
    except (PushError, zlib.error) as exc:
        return await _refuse(server, exchange, 400, f"push not checked: {exc}", route.name)
    except UpstreamError as exc:
        await server.answer(exchange.writer, exc.status, exc.message, close=False)
        return Outcome(exc.status, len(body), keep_alive=True, error=exc.message)
    del advertised  # the upstream itself refuses a stale old value
    results = decide(push, default_ref, policy, parents)
    refused = [f"{ref}: {reason}" for ref, reason in results if reason]
    if refused:
        server.violation("push-refused", route.name, "; ".join(refused))
        answer = report(results, push.capabilities)
        exchange.writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/x-git-receive-pack-result\r\n"
                              b"Cache-Control: no-cache\r\nContent-Length: %d\r\n\r\n" % len(answer) + answer)
        await exchange.writer.drain()
        return Outcome(200, len(body), len(answer), True, "push refused: " + "; ".join(refused))
    return await exchange.run_whole(headers, body)


