"""The credential proxy of one session: an asyncio HTTP/1.1 server on a unix socket (and loopback for tests).

    session --(plain HTTP, /r/<route>/...)--> [ProxyServer] --(TLS, real secret)--> route's upstream

Per request: read the head strictly (dejima.core.httpwire), decide (dejima.core.admission), swap the
placeholder for the real credential, forward to the route's upstream only, stream the answer back
chunk by chunk, and write one ledger entry (and a violation for a refusal that means something).
How an admitted request goes upstream is the route's behaviour (dejima.proxy.routes): plain forwarding,
git push guarding (dejima.proxy.gitpush) or AWS signing (dejima.proxy.signing); the TLS fallback
(dejima.proxy.intercept) hands its decrypted requests to this server. Each gets the server as its
services (dejima.proxy.services), and none imports this module.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from dejima.core.admission import Admission, Refusal, admit, intercepted
from dejima.core.gitpath import mentions_push
from dejima.core.httpwire import (
    MAX_HEAD_BYTES,
    Framing,
    HttpError,
    RequestHead,
    parse_request_head,
    request_framing,
    wants_keep_alive,
)
from dejima.core.ledger import LedgerEntry, Violation, redact_target, scrub
from dejima.core.placeholders import SecretScanner
from dejima.proxy.budget import Budget
from dejima.proxy.exchange import Exchange, Outcome
from dejima.proxy.http_streams import BodyCut, Idle, close_writer, plain_response
from dejima.proxy.records import Records
from dejima.proxy.routes import RouteSpec
from dejima.proxy.services import Via
from dejima.proxy.upstream import UpstreamPool

if TYPE_CHECKING:
    from dejima.proxy.intercept import Interception

_REASONS = {400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found", 405: "Method Not Allowed",
            413: "Content Too Large",
            421: "Misdirected Request", 431: "Request Header Fields Too Large", 501: "Not Implemented",
            502: "Bad Gateway", 503: "Service Unavailable", 504: "Gateway Timeout",
            505: "HTTP Version Not Supported"}


@dataclass(frozen=True, slots=True)
class ProxyConfig:
    routes: tuple[RouteSpec, ...]
    ledger_path: Path
    violations_path: Path
    decoys: Mapping[str, str] = field(default_factory=dict)  # decoy name -> fake value
    extra_ca_file: str | None = None  # trusted besides the system store (test worlds, corporate gateways)
    connect_timeout: float = 10.0
    response_timeout: float = 300.0  # for the upstream's response head
    idle_timeout: float = 600.0  # between two reads of a body, and between two requests
    max_push_bytes: int = 2 * 1024**3  # streamed, not held: as large as the big forges take
    max_signed_body: int = 32 * 1024 * 1024  # aws-sigv4 routes hash the whole request body before sending it
    memory_budget: int = 64 * 1024**2  # what the proxy may hold at once for the session (dejima.proxy.budget)
    max_connections: int = 128  # the session's connections to the proxy at once, both listeners together
    interception: Interception | None = None  # the TLS fallback: the session CA and its hosts' routes
    upstream_proxy: tuple[str, int] | None = None  # (host, port): https upstreams are reached through it
    upstream_proxy_ca_file: str | None = None  # [network] extra_ca: the CA a TLS-inspecting proxy signs with


class ProxyServer:
    def __init__(self, config: ProxyConfig) -> None:
        self.config = config
        self.specs = {spec.route.name: spec for spec in config.routes}
        self.routes = {name: spec.route for name, spec in self.specs.items()}
        self.scanner = SecretScanner({n: r.placeholders for n, r in self.routes.items()}, config.decoys)
        self.reals: dict[str, str] = {}  # route -> last real value seen, to recognise it in requests
        self.pool = UpstreamPool(config.extra_ca_file, config.connect_timeout, config.upstream_proxy,
                                 config.upstream_proxy_ca_file)
        self.idle = Idle(config.idle_timeout)
        self.records = Records(config.ledger_path, config.violations_path)
        self.budget = Budget(config.memory_budget)
        self._servers: list[asyncio.Server] = []
        self._clients: set[asyncio.Task[None]] = set()
        self._busy: set[asyncio.Task[None]] = set()  # connections in the middle of an exchange
        self.tcp_port: int | None = None
        self.tls_port: int | None = None
        self._flush_timer: asyncio.TimerHandle | None = None  # writes the records' aggregates once their second ends

    async def start(self, unix_path: Path | None = None, tcp_host: str | None = None, tcp_port: int = 0,
                    tls_unix_path: Path | None = None, tls_tcp_port: int | None = None) -> None:
        """Resolve every route's current secret, then listen (unix socket mode 0600; optional TCP for tests);
        with an interception configured, the TLS fallback listens too (``tls_*``)."""
        for name, spec in self.specs.items():
            self.reals[name] = (await spec.source.current()).reveal()
        if self.config.interception is not None and (tls_unix_path is not None or tls_tcp_port is not None):
            from dejima.proxy.intercept import TlsListener

            tls = await TlsListener(self, self.config.interception).start(
                tls_unix_path, tcp_host if tls_tcp_port is not None else None, tls_tcp_port or 0)
            self._servers += tls
            if tls_tcp_port is not None:
                self.tls_port = tls[-1].sockets[0].getsockname()[1]
        if unix_path is not None:
            server = await asyncio.start_unix_server(self._client, path=str(unix_path), limit=MAX_HEAD_BYTES)
            os.chmod(unix_path, 0o600)
            self._servers.append(server)
        if tcp_host is not None:
            server = await asyncio.start_server(self._client, tcp_host, tcp_port, limit=MAX_HEAD_BYTES)
            self.tcp_port = server.sockets[0].getsockname()[1]
            self._servers.append(server)

    async def close(self, grace: float = 2.0) -> None:
        """Stop listening, let exchanges in flight finish for up to ``grace`` seconds, then cut the rest."""
        for server in self._servers:
            server.close()
        for task in self._clients - self._busy:
            task.cancel()
        if self._busy:
            await asyncio.wait(set(self._busy), timeout=grace)
        for task in self._clients:
            task.cancel()
        await asyncio.gather(*self._clients, return_exceptions=True)
        for server in self._servers:
            await server.wait_closed()
        await self.pool.close()
        if self._flush_timer is not None:
            self._flush_timer.cancel()
        self.records.close()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await self.serve_connection(reader, writer)

    async def serve_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                               via: Via | None = None) -> None:
        """Serve one client connection's requests; ``via``: it came through the TLS fallback."""
        task = asyncio.current_task()
        assert task is not None
        if len(self._clients) >= self.config.max_connections:
            await self._turn_away(writer)
            return
        self._clients.add(task)
        try:
            while await self._one(reader, writer, via):
                pass
        except (ConnectionError, OSError, TimeoutError, asyncio.IncompleteReadError, BodyCut, HttpError):
            pass
        except asyncio.CancelledError:
            pass  # the proxy is closing; end this connection quietly
        finally:
            self._clients.discard(task)
            await close_writer(writer)

    async def _turn_away(self, writer: asyncio.StreamWriter) -> None:
        """A connection past the session's budget: 503 at once, without reading it, and a record."""
        message = f"the session already has {self.config.max_connections} connections open to the credential " \
                  "proxy (its budget: [credentials] proxy_connections in the settings); close some and retry"
        self.violation("budget-exceeded", "", message)
        try:
            writer.write(plain_response(503, "Service Unavailable", message, close=True))
            await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            await close_writer(writer)

    async def _read_head(self, reader: asyncio.StreamReader) -> bytes | None:
        try:
            async with asyncio.timeout(self.config.idle_timeout):
                return await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError as exc:
            if exc.partial.strip():
                raise HttpError(400, "the connection ended inside a request head") from None
            return None
        except asyncio.LimitOverrunError:
            raise HttpError(431, f"request head larger than {MAX_HEAD_BYTES} bytes") from None

    async def _one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, via: Via | None) -> bool:
        """Serve one request; True when the connection may carry another."""
        started = time.time()
        try:
            raw = await self._read_head(reader)
            if raw is None:
                return False
            head = parse_request_head(raw)
            framing = request_framing(head)
            if via is not None:
                head = intercepted(head, via.host, via.route)
        except HttpError as exc:
            self.violation("malformed-request", "", exc.reason)
            await self.answer(writer, exc.status, exc.reason, close=True)
            self.ledger(started, "", "-", "-", Outcome(exc.status, error=exc.reason))
            return False
        decision = admit(head, self.routes, self.scanner, self.reals)
        if isinstance(decision, Refusal):
            return await self._refuse(head, framing, decision, writer, started)
        task = asyncio.current_task()
        assert task is not None
        self._busy.add(task)
        outcome = Outcome(0, error="cut: the proxy closed during the exchange")
        try:
            outcome = await self._forward(head, framing, decision, reader, writer)
        finally:
            self._busy.discard(task)
            self.ledger(started, decision.route.name, head.method, head.target, outcome)
        return outcome.keep_alive

    async def _refuse(self, head: RequestHead, framing: Framing, refusal: Refusal, writer: asyncio.StreamWriter,
                      started: float) -> bool:
        if refusal.violation:
            self.violation(refusal.violation, refusal.route, refusal.reason)
        # The unread body would be taken for the next request: only a body-less request keeps the connection
        # (and only when the client wants it kept).
        keep = framing.kind == "none" and wants_keep_alive(head.version, head.headers)
        extra = [(b"WWW-Authenticate", b'Basic realm="dejima"')] if refusal.challenge else []
        await self.answer(writer, refusal.status, refusal.reason, close=not keep, extra=extra)
        self.ledger(started, refusal.route, head.method, head.target, Outcome(refusal.status, error=refusal.reason))
        return keep

    async def _forward(self, head: RequestHead, framing: Framing, admission: Admission,
                       reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> Outcome:
        route = admission.route
        spec = self.specs[route.name]
        exchange = Exchange(self, head, framing, admission, reader, writer)
        if not spec.behaviour.guards_pushes and mentions_push(head.target):
            message = f"git pushes go through the forge's git route, where push rules judge them, not route " \
                      f"{route.name!r}"
            self.violation("push-refused", route.name, message)
            return await exchange.fail(403, message)
        return await spec.behaviour.forward(self, spec, exchange)

    async def answer(self, writer: asyncio.StreamWriter, status: int, message: str, close: bool,
                     extra: list[tuple[bytes, bytes]] | None = None) -> None:
        writer.write(plain_response(status, _REASONS.get(status, "Error"), message, close, extra))
        await writer.drain()

    def violation(self, kind: str, route: str, detail: str) -> None:
        reals = self.reals.values()
        self.records.violation(Violation(time.time(), kind, scrub(route, self.scanner, reals),
                                         scrub(detail, self.scanner, reals)))
        self._flush_later()

    def ledger(self, started: float, route: str, method: str, target: str, outcome: Outcome) -> None:
        path = redact_target(target, self.scanner, self.reals.values()) if target != "-" else "-"
        reals = self.reals.values()
        self.records.entry(LedgerEntry(started, scrub(route, self.scanner, reals), method, path, outcome.status,
                                       outcome.bytes_in, outcome.bytes_out, round((time.time() - started) * 1000, 3),
                                       scrub(outcome.error, self.scanner, reals)))
        self._flush_later()

    def _flush_later(self) -> None:
        """Aggregates held back under a flood are written once their second is over."""
        if self._flush_timer is None and self.records.pending:
            self._flush_timer = asyncio.get_running_loop().call_later(1.0, self._flush)

    def _flush(self) -> None:
        self._flush_timer = None
        self.records.flush()
        self._flush_later()
