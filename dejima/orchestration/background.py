"""One call on its own thread, for work that waits on the engine while the launcher goes on."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Background(Generic[T]):
    """Runs ``call`` on a daemon thread at once; ``join`` waits and returns what it returned, or
    raises what it raised; ``wait`` only waits (when another error is already the story)."""

    def __init__(self, call: Callable[[], T], name: str) -> None:
        self._result: list[T] = []
        self._error: BaseException | None = None

        def run() -> None:
            try:
                self._result.append(call())
            except BaseException as exc:  # noqa: BLE001 - handed to join()
                self._error = exc

        self._thread = threading.Thread(target=run, name=name, daemon=True)
        self._thread.start()

    def wait(self) -> None:
        self._thread.join()

    def join(self) -> T:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._result[0]
