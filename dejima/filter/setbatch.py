"""Set inserts of answers completed in the same loop tick, in one nft transaction.

The resolver awaits ``add`` before it releases an answer: the future resolves only after the
transaction that holds the answer's addresses returned, so the allow set holds an address
before the client sees it. A failed transaction is retried answer by answer, so one bad answer
cannot cost the others theirs; an answer whose own insert fails gets the error (and no reply).
"""

from __future__ import annotations

import asyncio
from typing import Protocol

Request = tuple[list[str], list[int] | None, int | None]


class Writer(Protocol):
    def fresh(self, addresses: list[str], ports: list[int] | None, timeout: int | None) -> bool: ...

    def add_many(self, requests: list[Request]) -> None: ...


class BatchedSets:
    def __init__(self, writer: Writer) -> None:
        self.writer = writer
        self.pending: list[tuple[Request, asyncio.Future[None]]] = []

    def fresh(self, addresses: list[str], ports: list[int] | None, timeout: int | None) -> bool:
        return self.writer.fresh(addresses, ports, timeout)

    async def add(self, addresses: list[str], ports: list[int] | None, timeout: int | None) -> None:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        if not self.pending:
            loop.call_soon(self._flush)
        self.pending.append(((addresses, ports, timeout), done))
        await done

    def _flush(self) -> None:
        pending, self.pending = self.pending, []
        try:
            self.writer.add_many([request for request, _done in pending])
        except Exception:  # noqa: BLE001 - retried one by one below, where each gets its own error
            for request, done in pending:
                self._settle(done, request)
            return
        for _request, done in pending:
            if not done.done():
                done.set_result(None)

    def _settle(self, done: asyncio.Future[None], request: Request) -> None:
        try:
            self.writer.add_many([request])
        except Exception as exc:  # noqa: BLE001 - the waiting answer fails with it: no reply
            if not done.done():
                done.set_exception(exc)
            return
        if not done.done():
            done.set_result(None)
