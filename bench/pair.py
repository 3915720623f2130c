"""What one session pair costs a machine (or a Kubernetes node): the filter's memory at rest and after a
burst of DNS queries, and the session container's own overhead, read from the engine's stats of a
running pair. docs/kubernetes.md's sizing comes from here; the goal is absolute: the filter fits in
the memory request the Kubernetes render gives it (core/kubernetes.py MEMORY_REQUEST).

The anchor is a bare `docker run IMAGE sleep` of the same session image: what the agent's container
costs without dejima.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bench.common import DEJIMA, Env, Row, dejima_images, docker, load
from dejima.core.kubernetes import MEMORY_REQUEST

MIB = 1 << 20
HOLD = "sleep 120"  # the session waits here while its pair is measured (the bench ends it first)
# Names the session's resolver is asked for: refused (not allowed) without reaching any upstream, so
# the burst needs no network, and exercises the resolver's parsing, policy, records and refusals.
BURST = r"""
import socket, sys
for i in range(int(sys.argv[1])):
    try:
        socket.getaddrinfo(f"n{i}.burst.example", 443, proto=socket.IPPROTO_TCP)
    except socket.gaierror:
        pass
print("burst-done", flush=True)
"""


def run(env: Env, queries: int) -> list[Row]:
    workspace = env.workspace("pair")
    _, session_image = dejima_images(env, workspace)
    before = load()
    with _pair(env, workspace, ["sh", "-c", f"echo held; {HOLD}"], "held") as (filter_id, session_id):
        idle_filter, idle_session = _memory(filter_id), _memory(session_id)
    with _pair(env, workspace, ["sh", "-c", f"python3 -c '{BURST}' {queries}; {HOLD}"], "burst-done") as (filter_id, _):
        busy_filter = _memory(filter_id)
    bare = docker("run", "-d", "--label", f"dejima.scope={env.scope}", "--entrypoint", "sleep", session_image, "120")
    try:
        anchor = _memory(bare)
    finally:
        docker("rm", "-f", bare, check=False)
    after = load()
    note = f"session container {idle_session / MIB:.2f} MiB at rest; the bare container {anchor / MIB:.2f} MiB"
    return [
        Row("pair: filter memory at rest", "MiB", idle_filter / MIB, anchor / MIB, "bare docker run IMAGE sleep",
            MEMORY_REQUEST / MIB, absolute=True, note=note, load=[before, after]),
        Row(f"pair: filter memory after {queries} DNS queries", "MiB", busy_filter / MIB, anchor / MIB,
            "bare docker run IMAGE sleep", MEMORY_REQUEST / MIB, absolute=True, load=[before, after]),
    ]


@contextmanager
def _pair(env: Env, workspace: Path, command: list[str], marker: str) -> Iterator[tuple[str, str]]:
    """A session on ``workspace`` running ``command``, once it printed ``marker``: (filter, session) ids."""
    process = subprocess.Popen([*DEJIMA, "-q", str(workspace), "--", *command], env=env.vars,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        for line in process.stdout:  # bounded: the session's command ends within HOLD
            if marker in line:
                break
        else:
            told = process.stderr.read() if process.stderr else ""
            raise RuntimeError(f"the session ended before {marker!r}: {told}")
        ids = {role: docker("ps", "-q", "--filter", f"label=dejima.scope={env.scope}",
                            "--filter", f"label=dejima.role={role}") for role in ("filter", "session")}
        yield ids["filter"], ids["session"]
    finally:
        process.terminate()  # the launcher tears the pair down on SIGTERM
        process.wait(timeout=60)


def _memory(container: str) -> float:
    """Bytes the container's cgroup charges now, as `docker stats` shows them (page cache left out)."""
    stats = json.loads(docker("stats", "--no-stream", "--format", "{{json .}}", container))
    used = stats["MemUsage"].split("/")[0].strip()
    for unit, factor in (("GiB", 1 << 30), ("MiB", MIB), ("KiB", 1 << 10), ("B", 1)):
        if used.endswith(unit):
            return float(used.removesuffix(unit)) * factor
    raise RuntimeError(f"docker stats gave {used!r}")
