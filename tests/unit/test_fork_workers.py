"""A walker process's result (dejima/adapters/fork_workers.py): taken as soon as it is whole, its exit
reaped later; anything that is not a whole result is an error, never a partial snapshot."""

from __future__ import annotations

import marshal
import os
import select
import subprocess
import sys
from pathlib import Path

import pytest

from dejima.adapters import fork_workers
from dejima.adapters.fork_workers import SnapshotError


def test_a_whole_result_is_taken_and_its_child_reaped_by_the_next_fork() -> None:
    first = fork_workers.fork(lambda: ("rows", [1, 2], 3))
    assert fork_workers.collect(first) == ("rows", [1, 2], 3)
    second = fork_workers.fork(lambda: ())  # reaps the first, if collect left it
    assert fork_workers._unreaped in ([], [second[0]])
    assert fork_workers.collect(second) == ()
    fork_workers.reap()
    assert fork_workers._unreaped == []
    for pid, _ in (first, second):
        with pytest.raises(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)  # reaped: no zombie left


def test_a_walker_that_raises_is_an_error() -> None:
    with pytest.raises(SnapshotError, match="ZeroDivisionError"):
        fork_workers.collect(fork_workers.fork(lambda: 1 // 0))


def test_a_walker_that_dies_before_its_result_is_an_error() -> None:
    with pytest.raises(SnapshotError, match="exit status 3"):
        fork_workers.collect(fork_workers.fork(lambda: os._exit(3)))


def _child_with(data: bytes) -> fork_workers.Child:
    """A child that has not necessarily exited, and a pipe that holds ``data`` as its result."""
    hold_read, hold_write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(hold_write)
        os.read(hold_read, 1)  # until the test lets it go
        os._exit(0)
    os.close(hold_read)
    read_end, write_end = os.pipe()
    os.write(write_end, data)
    os.close(write_end)
    os.close(hold_write)  # it exits now: before collect looks, or after
    return pid, read_end


@pytest.mark.parametrize("cut", [False, True], ids=["whole", "control: cut short"])
def test_only_a_whole_result_is_taken_before_the_child_exits(cut: bool) -> None:
    data = marshal.dumps((["a/b", "file"], [("a", ["b"])], 2, []))
    child = _child_with(data[:-3] if cut else data)
    if cut:
        with pytest.raises(SnapshotError, match="unreadable result"):
            fork_workers.collect(child)
    else:
        assert fork_workers.collect(child) == marshal.loads(data)
    fork_workers.reap()


def test_work_left_behind_holds_no_standard_stream_of_its_parent(tmp_path: Path) -> None:
    """A program that runs the audit and is read to its end (a launcher's output captured) ends
    when it ends, not when the work it left behind does."""
    go = tmp_path / "go"
    os.mkfifo(go)
    script = ("import sys; from dejima.adapters import fork_workers; "
              f"fork_workers.fork_behind(lambda: open({str(go)!r}, 'rb').read(1)); print('done')")
    try:
        result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=20)
        assert result.stdout == "done\n"  # read to its end while the child still waits
    finally:
        with open(go, "wb") as fifo:  # let the child go, failed or not
            fifo.write(b"x")


def test_work_left_behind_holds_no_descriptor_and_no_one_waits_for_it(tmp_path: Path) -> None:
    """A child forked to work behind (the kept manifests) keeps no descriptor of its parent's: a
    pipe whose other holders are gone reads to its end while it still runs; the next fork reaps it
    only once it is done; finish_behind waits for it (it never looks for the request: it ends on its own)."""
    read_end, write_end = os.pipe()
    go, done = tmp_path / "go", tmp_path / "done"
    os.mkfifo(go)

    def work() -> None:
        try:
            os.fstat(write_end)
            held = "inherited"
        except OSError:
            held = "closed"
        with open(go, "rb") as fifo:  # until the test lets it go (opened by path: it holds no descriptor)
            fifo.read(1)
        done.write_text(held)

    assert fork_workers.fork_behind(work)
    pid = fork_workers._behind[-1]
    os.close(write_end)
    try:
        # At its end at once (waited for at most 10 s): the child, still running, holds no write end.
        assert select.select([read_end], [], [], 10)[0] == [read_end] and os.read(read_end, 1) == b""
        fork_workers.reap()  # does not wait for it
        assert fork_workers._behind == [pid]
    finally:
        os.close(read_end)
        with open(go, "wb") as fifo:  # let it go, failed or not: no child is left waiting
            fifo.write(b"x")
        fork_workers.finish_behind()
    assert fork_workers._behind == [] and done.read_text() == "closed"
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # reaped: no zombie left
