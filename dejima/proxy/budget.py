"""What one session's credential proxy may hold in the launcher's memory at once.

Streaming needs no budget: a relay holds one read (256 KiB) per direction and the transports'
buffers, bounded per connection, and connections are bounded in number. What a request must
*hold* is budgeted: the body of a signed request (SigV4 hashes it whole before sending it), a
push's commands, and the commits a push's pack carries (kept to prove a fast-forward). Every such
byte is reserved here first; a request that would go past the session's budget is refused (413)
or, for a pack, proven with what was kept.
"""

from __future__ import annotations

from types import TracebackType


class Budget:
    """Bytes shared by every request of one session; the event loop's single thread is its only user."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self.peak = 0

    def reserve(self, size: int) -> bool:
        if self.used + size > self.limit:
            return False
        self.used += size
        self.peak = max(self.peak, self.used)
        return True

    def release(self, size: int) -> None:
        self.used -= size

    def refusal(self) -> str:
        """Why a request that would go past the budget is refused (its 413 and its record say it)."""
        return f"the session's credential proxy already holds {self.used} of the {self.limit} bytes of request " \
               "data it may hold at once"


class Hold:
    """What one request reserved, given back whole when the request is done (``with Hold(budget)``)."""

    def __init__(self, budget: Budget) -> None:
        self.budget = budget
        self.size = 0

    def reserve(self, size: int) -> bool:
        if not self.budget.reserve(size):
            return False
        self.size += size
        return True

    def release(self) -> None:
        self.budget.release(self.size)
        self.size = 0

    def __enter__(self) -> Hold:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.release()
