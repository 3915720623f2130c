"""Set inserts, group-committed: one nft transaction at a time, for every answer waiting.

The resolver awaits ``add`` before it releases an answer: the future resolves only after the
transaction that holds the answer's addresses returned, so the allow set holds an address
before the client sees it. The transaction runs on a worker thread of its own (the nftables
bindings release the GIL while the kernel works), so the loop goes on answering meanwhile, and
the answers that ask while one runs share the next. A failed transaction is retried answer by
answer, so one bad answer cannot cost the others theirs; an answer whose own insert fails gets
the error (and no reply).

Each insert carries the time it was asked for: an address revoked after that is not inserted
(nft.SetWriter.add_many), so an answer that was on its way when a grant was revoked cannot undo
the revoke.
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Protocol

Request = tuple[list[str], list[int] | None, int | None]
Waiting = tuple[Request, float, asyncio.Future[None]]  # the insert, when it was asked, its answer


class Writer(Protocol):
    def fresh(self, addresses: list[str], ports: list[int] | None, timeout: int | None) -> bool: ...

    def add_many(self, requests: list[Request], asked: float = ...) -> None: ...


class BatchedSets:
    def __init__(self, writer: Writer, threaded: bool = True) -> None:
        self.writer = writer
        self.threaded = threaded
        self.executor: ThreadPoolExecutor | None = None
        self.pending: list[Waiting] = []
        self.running = False

    def fresh(self, addresses: list[str], ports: list[int] | None, timeout: int | None) -> bool:
        return self.writer.fresh(addresses, ports, timeout)

    async def add(self, addresses: list[str], ports: list[int] | None, timeout: int | None) -> None:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        if not self.pending and not self.running:
            loop.call_soon(self._start, loop)  # the answers of this loop tick join it
        self.pending.append(((addresses, ports, timeout), time.monotonic(), done))
        await done

    def _start(self, loop: asyncio.AbstractEventLoop) -> None:
        batch, self.pending = self.pending, []
        if not batch:
            return
        self.running = True
        if not self.threaded:
            self._finish(loop, batch, self._write(batch))
            return
        if self.executor is None:
            self.executor = ThreadPoolExecutor(1, thread_name_prefix="dejima-nft")
        running: Future[list[BaseException | None]] = self.executor.submit(self._write, batch)
        running.add_done_callback(lambda _f: loop.call_soon_threadsafe(self._done, loop, batch, running))

    def _done(self, loop: asyncio.AbstractEventLoop, batch: list[Waiting],
              running: Future[list[BaseException | None]]) -> None:
        try:
            errors = running.result()
        except BaseException as exc:  # noqa: BLE001 - the worker itself failed: every waiting answer fails
            errors = [exc] * len(batch)
        self._finish(loop, batch, errors)

    def _write(self, batch: list[Waiting]) -> list[BaseException | None]:
        """On the worker thread: the inserts of ``batch``, and each one's error (None: it holds)."""
        try:
            self.writer.add_many([request for request, _asked, _done in batch], min(a for _r, a, _d in batch))
            return [None] * len(batch)
        except Exception:  # noqa: BLE001 - retried one by one below, where each gets its own error
            pass
        errors: list[BaseException | None] = []
        for request, asked, _done in batch:
            try:
                self.writer.add_many([request], asked)
                errors.append(None)
            except Exception as exc:  # noqa: BLE001 - the waiting answer fails with it: no reply
                errors.append(exc)
        return errors

    def _finish(self, loop: asyncio.AbstractEventLoop, batch: list[Waiting],
                errors: list[BaseException | None]) -> None:
        self.running = False
        for (_request, _asked, done), error in zip(batch, errors, strict=True):
            if done.done():
                continue  # its answer was cancelled
            if error is None:
                done.set_result(None)
            else:
                done.set_exception(error)
        if self.pending:
            self._start(loop)
