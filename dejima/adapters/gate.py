"""The session's start gate on the host: a FIFO the session's entrypoint reads before it runs the
command (core/plan.py: GATE_SCRIPT). The launcher holds it open before the session's container
starts and writes the word once the filter is verified; if the launcher goes away first, its end
closes, the reader sees end of file, and the command never runs."""

from __future__ import annotations

import os
from pathlib import Path

from dejima.core.plan import GATE_FIFO, GATE_WORD


def make_gate(directory: Path) -> Path:
    """The gate's directory (readable by the session's user, who must open the FIFO) and FIFO."""
    directory.mkdir(mode=0o755, exist_ok=True)
    directory.chmod(0o755)
    fifo = directory / GATE_FIFO
    os.mkfifo(fifo)
    fifo.chmod(0o644)  # whatever the umask: the session's user reads it, only the launcher writes
    return fifo


class Gate:
    """The launcher's end of the FIFO. Opened read-write so that opening never blocks and the pipe
    lives while the launcher does, whether or not the session has opened its end yet."""

    def __init__(self, fifo: str) -> None:
        self.fifo = Path(fifo)
        self._fd: int | None = os.open(fifo, os.O_RDWR | os.O_CLOEXEC)

    def release(self) -> None:
        if self._fd is None:
            raise ValueError("the gate is closed")
        os.write(self._fd, f"{GATE_WORD}\n".encode())

    def close(self) -> None:
        """Close the launcher's end (a reader still waiting sees end of file) and remove the gate."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
            self.fifo.unlink(missing_ok=True)
            self.fifo.parent.rmdir()
