"""Set inserts of answers completed close together, in one nft transaction.

The resolver awaits ``add`` before it releases an answer: the future resolves only after the
transaction that holds the answer's addresses returned, so the allow set holds an address
before the client sees it. A transaction costs far more than an element in it, so inserts wait
for each other: until the next loop turn when no other answer is on its way (``others``, the
resolver's count of queries still at the upstream), else up to ``WINDOW_SECONDS`` or
``BATCH_MAX`` inserts, whichever comes first. A lone query is not delayed; under load an answer
waits at most the window.

A failed transaction is retried answer by answer, so one bad answer cannot cost the others
theirs; an answer whose own insert fails gets the error (and no reply). Each insert carries the
time it was asked for: an address revoked after that is not inserted (nft.SetWriter.add_many),
so an answer that was waiting when a grant was revoked cannot undo the revoke.
"""

from __future__ import annotations

import asyncio
import time
from typing import Protocol

Insert = tuple[list[str], list[int] | None, int | None]
Waiting = tuple[Insert, float, asyncio.Future[None]]  # the insert, when it was asked, its answer
WINDOW_SECONDS = 0.002
BATCH_MAX = 64


class Writer(Protocol):
    def fresh(self, addresses: list[str], ports: list[int] | None, timeout: int | None) -> bool: ...

    def add_many(self, requests: list[Insert], asked: float = ...) -> None: ...


class BatchedSets:
    def __init__(self, writer: Writer) -> None:
        self.writer = writer
        self.pending: list[Waiting] = []
        self.soon: asyncio.Handle | None = None  # the flush at the next loop turn
        self.timer: asyncio.TimerHandle | None = None  # the flush at the end of the window

    def fresh(self, addresses: list[str], ports: list[int] | None, timeout: int | None) -> bool:
        return self.writer.fresh(addresses, ports, timeout)

    async def add(self, addresses: list[str], ports: list[int] | None, timeout: int | None, others: int = 0) -> None:
        """Returns once the addresses are in the sets. ``others``: how many more answers are on
        their way (they may join this transaction)."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        self.pending.append(((addresses, ports, timeout), time.monotonic(), done))
        if others <= 0 or len(self.pending) >= BATCH_MAX:
            if self.soon is None:
                self.soon = loop.call_soon(self._flush)
        elif self.soon is None and self.timer is None:
            self.timer = loop.call_later(WINDOW_SECONDS, self._flush)
        await done

    def _flush(self) -> None:
        for handle in (self.soon, self.timer):
            if handle is not None:
                handle.cancel()
        self.soon = self.timer = None
        batch, self.pending = self.pending, []
        if not batch:
            return
        try:
            self.writer.add_many([request for request, _asked, _done in batch], min(a for _r, a, _d in batch))
        except Exception:  # noqa: BLE001 - retried one by one below, where each gets its own error
            for request, asked, done in batch:
                self._settle(done, request, asked)
            return
        for _request, _asked, done in batch:
            if not done.done():
                done.set_result(None)

    def _settle(self, done: asyncio.Future[None], request: Insert, asked: float) -> None:
        try:
            self.writer.add_many([request], asked)
        except Exception as exc:  # noqa: BLE001 - the waiting answer fails with it: no reply
            if not done.done():
                done.set_exception(exc)
            return
        if not done.done():
            done.set_result(None)
