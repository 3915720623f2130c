"""read_regular: what the rules read of a file the session wrote, its bytes whole up to a limit,
never through a link or from a FIFO."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from dejima.adapters.nofollow_open import open_directory, read_regular


@pytest.fixture
def directory(tmp_path: Path) -> Iterator[int]:
    fd = open_directory(tmp_path, [])
    try:
        yield fd
    finally:
        os.close(fd)


@pytest.mark.parametrize("size", [0, 1, 4095, 4096, 4097, 1 << 20])
def test_a_file_is_read_whole(tmp_path: Path, directory: int, size: int) -> None:
    data = os.urandom(size)
    (tmp_path / "f").write_bytes(data)
    assert read_regular(directory, "f", 1 << 20) == data


def test_a_file_that_holds_more_than_its_size_says_is_read_on_to_the_limit() -> None:
    """As one read of the limit would: a file that grew after its fstat (here a /proc file, whose
    size is 0) is not cut at the size fstat gave."""
    fd = open_directory(f"/proc/{os.getpid()}", [])
    try:
        data = read_regular(fd, "status", 1 << 20)
        assert os.stat("status", dir_fd=fd).st_size == 0
    finally:
        os.close(fd)
    assert data.startswith(b"Name:") and data.endswith(b"\n") and len(data) > 100
    fd = open_directory(f"/proc/{os.getpid()}", [])
    try:
        assert len(read_regular(fd, "status", 10)) == 10  # and not past the limit
    finally:
        os.close(fd)


def test_past_the_limit_a_link_and_a_fifo_are_refused(tmp_path: Path, directory: int) -> None:
    (tmp_path / "big").write_bytes(b"x" * 11)
    with pytest.raises(ValueError, match="larger than 10 bytes"):
        read_regular(directory, "big", 10)
    (tmp_path / "link").symlink_to("big")
    with pytest.raises(OSError):
        read_regular(directory, "link", 100)
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(ValueError, match="not a regular file"):
        read_regular(directory, "fifo", 100)  # opened without waiting for a writer
