"""The walk's C part (dejima/adapters/_stat_compare.c) answers what os.lstat answers: each field
of ``lstat_all`` is os.lstat's, for every kind of entry and name; ``same_stats`` is True exactly
when each child's columns are those given, and False on anything it cannot compare exactly. Real
entries in a temporary directory; os.lstat is the reference."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from dejima.adapters import tree_walk
from dejima.adapters._stat_compare import lstat_all, same_stats  # not built: this module fails to load, red
from dejima.core.snapshot import START_COLUMNS

FIELDS = ("st_mode", "st_ino", "st_dev", "st_nlink", "st_uid", "st_gid", "st_size", "st_mtime_ns", "st_ctime_ns")
COLUMNS = {"inode": "st_ino", "ctime_ns": "st_ctime_ns", "mtime_ns": "st_mtime_ns", "size": "st_size",
           "nlink": "st_nlink", "uid": "st_uid", "gid": "st_gid"}


def test_the_c_part_is_built_where_dejima_is_tested() -> None:
    # The suite and the bench must measure the walk that ships; a missing build is a red test, not a skip.
    assert tree_walk.NATIVE


@pytest.fixture
def directory(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    (tmp_path / "file").write_bytes(b"x" * 100)
    (tmp_path / "empty").write_bytes(b"")
    (tmp_path / "dir").mkdir()
    (tmp_path / "link").symlink_to("file")
    (tmp_path / "dangling").symlink_to("nowhere")
    (tmp_path / "loop").symlink_to("loop")
    os.mkfifo(tmp_path / "fifo")
    with socket.socket(socket.AF_UNIX) as bound:
        bound.bind(str(tmp_path / "socket"))
    os.link(tmp_path / "file", tmp_path / "hard")
    (tmp_path / "ünï cödé").write_text("utf-8 name")
    (tmp_path / os.fsdecode(b"not-utf8-\xff\xfe")).write_text("a name only surrogateescape decodes")
    future = tmp_path / "far future"
    future.write_text("mtime set by the session")
    os.utime(future, ns=(0, 40_000_000_000 * 10**9 + 7))  # past a long long of nanoseconds
    past = tmp_path / "far past"
    past.write_text("mtime set by the session")
    os.utime(past, ns=(0, -40_000_000_000 * 10**9 - 3))
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        yield fd, tmp_path
    finally:
        os.close(fd)


def test_lstat_all_gives_os_lstat_fields_for_every_kind_of_entry(directory: tuple[int, Path]) -> None:
    fd, _ = directory
    listing = os.listdir(fd)
    names, stats = lstat_all(fd, listing)
    assert names is listing and len(stats) == len(listing) == 13
    for name, got in zip(names, stats, strict=True):
        expected = os.lstat(name, dir_fd=fd)
        assert {f: getattr(got, f) for f in FIELDS} == {f: getattr(expected, f) for f in FIELDS}, name


def test_lstat_all_leaves_out_what_is_gone_or_cannot_be_named(directory: tuple[int, Path]) -> None:
    fd, root = directory
    listing = ["file", "gone", "dir", "with\x00nul", "dir/../file", "link"]
    names, stats = lstat_all(fd, listing)
    # "dir/../file" is a path, not a name, but lstat takes it as os.lstat does: the walk passes only names.
    assert names == ["file", "dir", "dir/../file", "link"] and listing[1] == "gone"
    assert [s.st_ino for s in stats] == [os.lstat(n, dir_fd=fd).st_ino for n in names]
    assert lstat_all(fd, []) == ([], [])


def test_lstat_all_refuses_what_is_not_a_list_of_names(directory: tuple[int, Path]) -> None:
    fd, _ = directory
    with pytest.raises(TypeError):
        lstat_all(fd, ["file", b"bytes"])  # type: ignore[list-item]
    with pytest.raises(TypeError):
        lstat_all(fd, ("file",))  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        lstat_all(-1, ["file"])


def values_of(fd: int, names: list[str], columns: tuple[str, ...]) -> list[list[int]]:
    stats = [os.lstat(name, dir_fd=fd) for name in names]
    return [[getattr(s, COLUMNS[column]) for s in stats] for column in columns]


ALL_COLUMNS = tuple(COLUMNS)


def test_same_stats_is_true_for_the_columns_os_lstat_gives(directory: tuple[int, Path]) -> None:
    fd, _ = directory
    names = sorted(n for n in os.listdir(fd) if not n.startswith("far"))
    assert same_stats(fd, names, START_COLUMNS, values_of(fd, names, START_COLUMNS))
    assert same_stats(fd, names, ALL_COLUMNS, values_of(fd, names, ALL_COLUMNS))
    assert same_stats(fd, [], START_COLUMNS, [[], [], []])


@pytest.mark.parametrize("column", ALL_COLUMNS)
def test_same_stats_is_false_when_any_one_value_differs(directory: tuple[int, Path], column: str) -> None:
    fd, _ = directory
    names = sorted(n for n in os.listdir(fd) if not n.startswith("far"))
    for index in (0, len(names) // 2, len(names) - 1):
        values = values_of(fd, names, ALL_COLUMNS)
        values[ALL_COLUMNS.index(column)][index] += 1
        assert not same_stats(fd, names, ALL_COLUMNS, values), (column, names[index])


def test_same_stats_is_false_on_what_it_cannot_compare_exactly(directory: tuple[int, Path]) -> None:
    fd, _ = directory
    names = ["file", "dir"]
    good = values_of(fd, names, START_COLUMNS)
    assert same_stats(fd, names, START_COLUMNS, good)
    assert not same_stats(fd, ["file", "gone"], START_COLUMNS, good)  # a child gone
    assert not same_stats(fd, ["file", "d\x00ir"], START_COLUMNS, good)  # a name the kernel would cut short
    assert not same_stats(fd, names, START_COLUMNS, [column[:1] for column in good])  # not one value per child
    assert not same_stats(fd, names, START_COLUMNS, [[-1, *column[1:]] if i == 0 else column  # no inode is negative
                                                     for i, column in enumerate(good)])
    assert not same_stats(fd, names, START_COLUMNS, [[2**64 + v for v in column] for column in good])  # too large
    # mtimes beyond a long long of nanoseconds: the long way (Python's integers) compares them
    far = ["far future", "far past"]
    assert not same_stats(fd, far, ("mtime_ns",), values_of(fd, far, ("mtime_ns",)))
    assert same_stats(fd, far, ("inode", "size"), values_of(fd, far, ("inode", "size")))


def test_same_stats_refuses_what_is_not_its_arguments(directory: tuple[int, Path]) -> None:
    fd, _ = directory
    good = values_of(fd, ["file"], START_COLUMNS)
    with pytest.raises(ValueError, match="column"):
        same_stats(fd, ["file"], ("mode",), [[0]])
    with pytest.raises(ValueError, match="one list of values per column"):
        same_stats(fd, ["file"], START_COLUMNS, good[:2])
    with pytest.raises(TypeError):
        same_stats(fd, ["file"], START_COLUMNS, [[str(v) for v in column] for column in good])  # type: ignore[misc]
    with pytest.raises(TypeError):
        same_stats(fd, ["file"], list(START_COLUMNS), good)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        same_stats(fd, [b"file"], START_COLUMNS, good)  # type: ignore[list-item]


@pytest.mark.parametrize("built", [True, False])
def test_doctor_says_which_walk_the_exit_audit_runs(monkeypatch: pytest.MonkeyPatch, built: bool) -> None:
    from dejima.orchestration.doctor import walk_check

    monkeypatch.setattr(tree_walk, "NATIVE", built)
    check = walk_check()
    assert check.ok  # the same findings either way: only the time differs
    assert ("with its C part" in check.detail) is built
    assert ("in Python" in check.detail and "reinstall dejima" in check.detail) is not built
