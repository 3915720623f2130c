"""A session's filter as `dejima-allow` reaches it, without a container: the real resolver, grants and
control socket (dejima/filter/control.py) served on a unix socket in a session directory, on an event
loop in a thread; nft batches recorded, the upstream answering every name with one address."""

from __future__ import annotations

import asyncio
import ipaddress
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from dnslib import QTYPE, RR, A, DNSRecord

from dejima.adapters import host
from dejima.core.egress import EgressPolicy
from dejima.filter.answer import Answer, parse
from dejima.filter.control import Grants, start_control
from dejima.filter.dns_wire import Question
from dejima.filter.nft import SetWriter
from dejima.filter.resolver import PolicyResolver
from dejima.filter.setbatch import BatchedSets
from tests.unit.cli.test_allow_cli import one_session


class RecordingNft:
    def __init__(self) -> None:
        self.batches: list[str] = []

    def cmd(self, text: str) -> tuple[int, str, str]:
        self.batches.append(text)
        return 0, "", ""


def upstream(address: str) -> object:
    async def forward(question: Question) -> Answer:
        reply = DNSRecord.question(question.name, "A").reply()
        reply.add_answer(RR(question.name, QTYPE.A, rdata=A(address), ttl=300))
        found = parse(bytes(reply.pack()), question)
        assert found is not None
        return found

    return forward


@dataclass
class LiveFilter:
    workspace: Path
    grants: Grants
    resolver: PolicyResolver
    records: list[dict[str, object]]
    loop: asyncio.AbstractEventLoop

    def ask(self, name: str) -> DNSRecord:
        """A query from the session, answered by the real resolver."""
        packet = bytes(DNSRecord.question(name, "A").pack())
        answer = asyncio.run_coroutine_threadsafe(self.resolver.answer(packet), self.loop).result(10)
        assert answer is not None
        return DNSRecord.parse(answer)

    def command(self, program: str, *args: str) -> subprocess.CompletedProcess[str]:
        """``dejima-allow`` or ``dejima`` run for real in the workspace, its stdout and stderr pipes."""
        module = {"dejima-allow": "dejima.cli.allow", "dejima": "dejima.cli.launch"}[program]
        return subprocess.run([sys.executable, "-c", f"from {module} import main; raise SystemExit(main())", *args],
                              cwd=self.workspace, capture_output=True, text=True, timeout=60,
                              stdin=subprocess.DEVNULL)


@contextmanager
def live_filter(tmp_path: Path, session_id: str, policy: EgressPolicy, answer: str = "198.18.7.7") -> Iterator[
        LiveFilter]:
    workspace, control = one_session(tmp_path, session_id)
    records: list[dict[str, object]] = []
    sets = SetWriter("inet", "dejima", handle=RecordingNft())
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    async def serve() -> tuple[Grants, PolicyResolver, asyncio.AbstractServer]:
        resolver = PolicyResolver(policy, upstream(answer), BatchedSets(sets), records.append)  # type: ignore[arg-type]
        grants = Grants(resolver, sets, records.append)
        server = await start_control(grants, str(control), host.identity().uid)
        return grants, resolver, server

    grants, resolver, server = asyncio.run_coroutine_threadsafe(serve(), loop).result(10)
    try:
        yield LiveFilter(workspace, grants, resolver, records, loop)
    finally:
        loop.call_soon_threadsafe(server.close)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


GATEWAY = ipaddress.ip_network("172.17.0.1/32")
