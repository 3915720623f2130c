"""Resource limits of the filter and the session: sizes as people write them, resolved to bytes.

Each container gets its own cgroup: a session that hits its pids or memory limit fails its own
forks and allocations (the kernel's OOM killer ends one of its processes), while the filter, with limits
of its own, keeps answering. Memory is a size ("4g", "512m") or a share of the engine's memory
("75%"); swap beyond it is never granted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_SIZE = re.compile(r"^([1-9][0-9]*)([kmg]?)\Z")
_PERCENT = re.compile(r"^([1-9][0-9]?|100)%\Z")
_UNITS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3}
MIN_MEMORY = 32 * 1024**2  # below this a container cannot even start its interpreter
MIN_TMP = 1024**2
MIN_PROXY_MEMORY = 4 * 1024**2  # a push's commands (1 MiB) and a signed request's first reads fit


@dataclass(frozen=True, slots=True)
class ContainerLimits:
    pids: int  # processes and threads together
    memory: int | None  # bytes, swap included (none beyond it); None: not limited
    cpu_shares: int  # relative CPU weight; 1024 is the engine's default
    tmp_size: int | None = None  # bytes of the /tmp tmpfs (the session's; it counts against memory)


def parse_size(text: str) -> int:
    """'512m' -> bytes; raises ValueError naming the accepted forms."""
    match = _SIZE.match(text.strip().lower())
    if not match:
        raise ValueError(f"{text!r} is not a size: write a number with k, m or g, e.g. \"512m\" or \"4g\"")
    return int(match[1]) * _UNITS[match[2]]


def is_share(text: str) -> bool:
    """A share of the engine's memory ("75%"), not a size."""
    return _PERCENT.match(text.strip()) is not None


def resolve_memory(text: str, total: int) -> int:
    """Bytes for a size or a share of ``total`` (the engine's memory), never below MIN_MEMORY."""
    percent = _PERCENT.match(text.strip())
    if percent:
        return max(MIN_MEMORY, total * int(percent[1]) // 100)
    return parse_size(text)


def format_bytes(size: int) -> str:
    for unit, factor in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if size >= factor:
            value = size / factor
            return f"{value:.0f} {unit}" if value == int(value) or value >= 100 else f"{value:.1f} {unit}"
    return f"{size} B"


def describe(limits: ContainerLimits) -> str:
    """One line for the boundary card and the rendered plan."""
    tmp = f", /tmp {format_bytes(limits.tmp_size)}" if limits.tmp_size is not None else ""
    memory = f"{format_bytes(limits.memory)} memory (no swap)" if limits.memory is not None else "memory not limited"
    return f"{limits.pids} processes, {memory}, CPU weight {limits.cpu_shares}{tmp}"


@dataclass(frozen=True, slots=True)
class ProxyLimits:
    """What one session's credential proxy may take of the launcher: the bytes it holds at once for
    requests it must read before forwarding (signed bodies, push proofs), and its connections."""

    memory: int
    connections: int


def describe_proxy(limits: ProxyLimits) -> str:
    return f"holds at most {format_bytes(limits.memory)} of request data at once, {limits.connections} connections"
