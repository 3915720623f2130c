"""FIFOs the launcher holds open while a session starts: the session's start gate (its command
waits on it, core/plan.py GATE_SCRIPT) and the filter's configuration channel (a filter can start
before its plan exists, orchestration/prestart.py).

The launcher opens its end read-write, so the open never blocks and the pipe lives as long as the
launcher does, whether or not the reader has opened its end yet. If the launcher goes away before
writing, its end closes and the reader sees end of file: the gate's command never runs, the
filter never applies a ruleset.
"""

from __future__ import annotations

import os
from pathlib import Path

from dejima.core.paths import FILTER_CONFIG_FIFO, GATE_FIFO, GATE_WORD


def _make_fifo(path: Path) -> Path:
    os.mkfifo(path)
    path.chmod(0o644)  # whatever the umask: the reader (the session's user, the filter) reads it
    return path


def make_gate(directory: Path) -> Path:
    """The gate's directory (the session's user must reach the FIFO in it) and FIFO."""
    directory.mkdir(mode=0o755, exist_ok=True)
    directory.chmod(0o755)
    return _make_fifo(directory / GATE_FIFO)


def make_run_dir(directory: Path) -> Path:
    """The filter's run directory and its configuration FIFO. The filter (root without
    CAP_DAC_OVERRIDE) makes its sockets there, so the directory is open to it; no one else gets
    near: its parent is the launcher's own 0700 state directory, and it is mounted into the filter
    alone, never into the session."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    directory.chmod(0o777)
    return _make_fifo(directory / FILTER_CONFIG_FIFO)


class HeldFifo:
    """The launcher's end of a FIFO."""

    def __init__(self, fifo: str) -> None:
        self.fifo = Path(fifo)
        self._fd: int | None = os.open(fifo, os.O_RDWR | os.O_CLOEXEC)

    def send(self, data: bytes) -> None:
        """Write ``data`` (past the pipe's 64 KiB this waits for the reader)."""
        if self._fd is None:
            raise ValueError(f"{self.fifo} is closed")
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view):]

    def close(self, remove_directory: bool = False) -> None:
        """Close the launcher's end (a reader still waiting sees end of file) and remove the FIFO."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
            self.fifo.unlink(missing_ok=True)
            if remove_directory:
                self.fifo.parent.rmdir()


class Gate(HeldFifo):
    def release(self) -> None:
        self.send(f"{GATE_WORD}\n".encode())

    def close(self, remove_directory: bool = True) -> None:
        super().close(remove_directory)
