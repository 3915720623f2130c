"""Handing the heap back to the kernel after a burst of queries.

The resolver's maps empty on a timer once their answers expire, but freed memory stays with the
process: CPython keeps free lists of small objects (tuples, floats, dicts...), whose cached
objects lie scattered over the heap and keep its pages resident, and glibc keeps freed pages for
reuse. So the stdlib's caches of address classes are emptied, a full collection empties the free
lists, and ``malloc_trim`` returns every whole free page. The filter's image runs Python with
``PYTHONMALLOC=malloc``: objects live in glibc's heap, where a survivor keeps its 4 KiB page, not
in CPython's 1 MiB arenas, where it keeps the arena (measured in docs/performance.md), and with a
fixed mmap threshold (``GLIBC_TUNABLES``): a large table is unmapped when freed, not left as a hole.
"""

from __future__ import annotations

import ctypes
import gc
import ipaddress
from collections.abc import Callable

GIVE_BACK_AFTER = 1024  # entries dropped since the last give-back: worth a full collection (~3 ms) at once


def _trim() -> Callable[[], object]:
    """glibc's malloc_trim(0), or nothing on another C library (the memory stays until reused)."""
    try:
        trim = ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return lambda: None
    return lambda: trim(0)


class HeapReturn:
    """Counts the entries the prunes dropped and gives their memory back: at once when they reach
    ``after``, else at the first prune that drops nothing (the burst is over; the tail it left
    would otherwise keep its pages until the next burst)."""

    def __init__(self, after: int = GIVE_BACK_AFTER, trim: Callable[[], object] | None = None) -> None:
        self.after, self.trim = after, trim or _trim()
        self.dropped = 0  # since the last give-back

    def pruned(self, dropped: int) -> bool:
        """Note ``dropped`` entries gone; True when that gave the memory back."""
        self.dropped += dropped
        if self.dropped == 0 or (dropped > 0 and self.dropped < self.after):
            return False
        self.dropped = 0
        forget_address_caches()
        gc.collect()  # the full collection also empties the free lists
        self.trim()
        return True


def forget_address_caches() -> None:
    """Empty the stdlib's caches of address classes: ``is_private`` keeps the last 128 addresses
    it was asked about (functools.lru_cache), objects made during the burst that would each keep
    the heap page they sit on."""
    for kind in (ipaddress.IPv4Address, ipaddress.IPv6Address, ipaddress.IPv4Network, ipaddress.IPv6Network):
        for member in vars(kind).values():
            clear = getattr(getattr(member, "fget", None), "cache_clear", None)
            if clear is not None:
                clear()
