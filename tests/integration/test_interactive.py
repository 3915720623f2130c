"""`dejima PATH` gives a real TTY: a shell that sees the terminal size, and follows resizes."""

from __future__ import annotations

import fcntl
import os
import select
import struct
import subprocess
import termios
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from dejima.adapters.runtime import Runtime
from tests.world import REPO, User, containers_of

# Blocks SIGWINCH, says so, then waits for it: the resize below is then seen, not raced.
WAIT_FOR_RESIZE = (
    b"python3 -c 'import os, signal; signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGWINCH]); "
    b"print(\"WAITING-FOR-\" + \"WINCH\", flush=True); signal.sigwait([signal.SIGWINCH]); "
    b"s = os.get_terminal_size(); print(f\"resized to {s.lines}x{s.columns}\")'\r"
)


def set_size(fd: int, rows: int, cols: int) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def _chunk(fd: int, deadline: float, waiting_for: str, seen: bytes) -> bytes:
    """The terminal's next output (b"" once it closed: EIO when the launcher and its children are gone)."""
    ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
    if not ready:
        raise AssertionError(f"{waiting_for} not seen in time; got {seen[-1500:]!r}")
    try:
        return os.read(fd, 4096)
    except OSError:
        return b""


def read_until(fd: int, marker: bytes, timeout: float = 60) -> bytes:
    deadline, seen = time.monotonic() + timeout, b""
    while marker not in seen:
        chunk = _chunk(fd, deadline, repr(marker), seen)
        if not chunk:
            raise AssertionError(f"terminal closed before {marker!r}; got {seen[-1500:]!r}")
        seen += chunk
    return seen


@contextmanager
def on_a_terminal(user: User, scope: str, *args: str, rows: int = 24, cols: int = 80,
                  env: dict[str, str] | None = None) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    """The real launcher with a new pseudo-terminal as its controlling terminal (stdin, stdout and stderr),
    ``env`` added to its environment; yields the process and the terminal's master side, to read and type on."""
    master, slave = os.openpty()
    set_size(master, rows, cols)
    process = subprocess.Popen(
        ["setsid", "--ctty", *user.command(*args)], stdin=slave, stdout=slave, stderr=slave,
        env=user.env(scope, TERM="xterm", **(env or {})), cwd=str(REPO), close_fds=True, **user.popen_kwargs(),
    )
    os.close(slave)
    try:
        yield process, master
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=30)
        os.close(master)


def exit_on_a_terminal(user: User, scope: str, *args: str, timeout: float = 120, **env: str) -> tuple[int, bytes]:
    """The launcher run on a terminal of its own until it exits: (its status, what it printed)."""
    with on_a_terminal(user, scope, *args, env=env) as (process, master):
        deadline, seen = time.monotonic() + timeout, b""
        while chunk := _chunk(master, deadline, "the launcher's exit", seen):
            seen += chunk
        return process.wait(timeout=30), seen


def test_interactive_shell_has_a_tty_that_follows_resizes(runtime: Runtime, images: object, user: User,
                                                          scope: str, workspace: Path) -> None:
    with on_a_terminal(user, scope, str(workspace), rows=30, cols=100) as (process, master):
        # The docker CLI sets the container's terminal size just after it starts, so a command typed
        # at once may still see 0 0: ask until the size arrives (a bounded number of round trips).
        for attempt in range(20):
            os.write(master, f"stty size; tty; echo MARK-$((1+{attempt}))\r".encode())
            first = read_until(master, f"MARK-{1 + attempt}".encode())
            if b"30 100" in first:
                break
        assert b"30 100" in first
        assert b"/dev/pts/" in first
        os.write(master, WAIT_FOR_RESIZE)
        read_until(master, b"WAITING-FOR-WINCH")
        set_size(master, 40, 120)  # the kernel sends SIGWINCH to the terminal's foreground process
        assert b"resized to 40x120" in read_until(master, b"resized to")
        os.write(master, b"exit 3\r")
        assert process.wait(timeout=60) == 3
    assert containers_of(runtime, scope) == []
