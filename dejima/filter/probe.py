"""The filter's readiness, as a cluster's probe asks it: `python3 -m dejima.filter.probe FILE`.

The filter writes FILE once its ruleset is verified and its resolver answers, with the start time
of its own process. The probe exits 0 only when FILE holds the start time of the container's
current PID 1: a file left by a filter that died (an emptyDir outlives a container's restart)
does not count, so a restarted filter is not ready until it has verified its ruleset again.
"""

from __future__ import annotations

import sys

NOT_READY = 1


def start_time(pid: str = "self") -> str:
    """The process's start time (clock ticks since boot: field 22 of /proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
    return fields[19]


def ready_text() -> str:
    return f"started={start_time()}\n"


def is_ready(path: str) -> bool:
    try:
        with open(path) as marker:
            written = marker.read()
        return written == f"started={start_time('1')}\n"
    except OSError:
        return False


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python3 -m dejima.filter.probe READY_FILE", file=sys.stderr)
        return NOT_READY
    return 0 if is_ready(argv[0]) else NOT_READY


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
