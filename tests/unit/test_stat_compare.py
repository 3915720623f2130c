"""The walk's C part (dejima/adapters/_stat_compare.c) answers what os.listdir and os.lstat
answer: each field of ``lstat_all`` is os.lstat's, for every kind of entry and name;
``same_directory`` is True exactly when the directory lists the start's names in their order and
each child's columns are those given, and False on anything it cannot compare exactly. Real
entries in a temporary directory; os.listdir and os.lstat are the reference."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from dejima.adapters import tree_walk
from dejima.adapters._stat_compare import lstat_all, same_directory  # not built: this module fails to load, red
from dejima.core.snapshot import START_COLUMNS, joined_names

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


def start_of(fd: int, directory: str, columns: tuple[str, ...] = START_COLUMNS) -> tuple[str, str, list[list[int]]]:
    """What the walk passes for a directory: the start's names as joined_names joins them (listing
    order), the separator, and the columns' values."""
    names = os.listdir(fd)
    return joined_names(directory, names), f"/{directory}/" if directory else "/", values_of(fd, names, columns)


def test_same_directory_is_true_for_the_listing_and_columns_os_gives(directory: tuple[int, Path]) -> None:
    fd, _ = directory
    for name in ("", "src", "a/b c/d"):  # the separator holds the directory's path; names hold no '/'
        joined, separator, values = start_of(fd, name)
        assert same_directory(fd, joined, separator, START_COLUMNS, values)
        assert os.listdir(fd) == joined.split(separator)  # the descriptor is left as it was found
    joined, separator, values = start_of(fd, "src", ALL_COLUMNS[:2] + ("size", "nlink", "uid", "gid"))
    assert same_directory(fd, joined, separator, ALL_COLUMNS[:2] + ("size", "nlink", "uid", "gid"), values)


def test_same_directory_of_an_empty_directory(tmp_path: Path) -> None:
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert same_directory(fd, "", "/d/", START_COLUMNS, [[], [], []])
        assert not same_directory(fd, "x", "/d/", START_COLUMNS, [[1], [1], [1]])
        (tmp_path / "x").write_text("")
        assert not same_directory(fd, "", "/d/", START_COLUMNS, [[], [], []])
    finally:
        os.close(fd)


def test_same_directory_is_false_when_a_name_differs_in_any_way(directory: tuple[int, Path]) -> None:
    fd, _ = directory
    joined, separator, values = start_of(fd, "d")
    names = joined.split(separator)
    assert same_directory(fd, joined, separator, START_COLUMNS, values)
    others = [
        names[1:] + names[:1],  # the same names in another order
        names[:-1],  # one fewer (and one fewer value per column below)
        [*names, "extra"],  # one more
        [names[0] + "x", *names[1:]],  # a longer name
        [names[0][:-1], *names[1:]],  # a shorter name
        [names[0].upper(), *names[1:]],
    ]
    for other in others:
        columns = [column[:len(other)] + [0] * (len(other) - len(column)) for column in values]
        assert not same_directory(fd, separator.join(other), separator, START_COLUMNS, columns), other
    # text that is not names joined by the separator
    for text in (joined + separator, separator + joined, joined.replace(separator, "/x/", 1), joined + "/"):
        assert not same_directory(fd, text, separator, START_COLUMNS, values), text
    assert not same_directory(fd, joined, "/e/", START_COLUMNS, values)


@pytest.mark.parametrize("column", ALL_COLUMNS)
def test_same_directory_is_false_when_any_one_value_differs(directory: tuple[int, Path], column: str) -> None:
    fd, _ = directory
    joined, separator, values = start_of(fd, "d", ALL_COLUMNS)
    names = joined.split(separator)
    for index in (0, len(names) // 2, len(names) - 1):
        if column == "mtime_ns" and names[index].startswith("far"):
            continue  # beyond a long long: never equal (below)
        changed = [list(v) for v in values]
        changed[ALL_COLUMNS.index(column)][index] += 1
        assert not same_directory(fd, joined, separator, ALL_COLUMNS, changed), (column, names[index])


def test_same_directory_is_false_on_what_it_cannot_compare_exactly(directory: tuple[int, Path]) -> None:
    fd, _ = directory
    joined, separator, values = start_of(fd, "d")
    assert same_directory(fd, joined, separator, START_COLUMNS, values)
    assert not same_directory(fd, joined, separator, START_COLUMNS, [column[:-1] for column in values])
    assert not same_directory(fd, joined, separator, START_COLUMNS, [[-1, *values[0][1:]], *values[1:]])
    assert not same_directory(fd, joined, separator, START_COLUMNS, [[2**64 + v for v in c] for c in values])
    # mtimes beyond a long long of nanoseconds (set by the session): the long way compares them exactly
    joined, separator, mtimes = start_of(fd, "d", ("mtime_ns",))
    assert not same_directory(fd, joined, separator, ("mtime_ns",), mtimes)
    os.utime("far future", ns=(0, 0), dir_fd=fd)
    os.utime("far past", ns=(0, 0), dir_fd=fd)
    joined, separator, mtimes = start_of(fd, "d", ("mtime_ns",))
    assert same_directory(fd, joined, separator, ("mtime_ns",), mtimes)


def test_same_directory_refuses_what_is_not_its_arguments(directory: tuple[int, Path]) -> None:
    fd, _ = directory
    joined, separator, values = start_of(fd, "d")
    with pytest.raises(ValueError, match="column"):
        same_directory(fd, joined, separator, ("mode",), values[:1])
    with pytest.raises(ValueError, match="one list of values per column"):
        same_directory(fd, joined, separator, START_COLUMNS, values[:2])
    with pytest.raises(ValueError, match="separator"):
        same_directory(fd, joined, "d", START_COLUMNS, values)
    with pytest.raises(TypeError):
        same_directory(fd, joined, separator, START_COLUMNS, [[str(v) for v in c] for c in values])  # type: ignore[misc]
    with pytest.raises(TypeError):
        same_directory(fd, joined, separator, list(START_COLUMNS), values)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        same_directory(fd, os.fsencode(joined), separator, START_COLUMNS, values)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        same_directory(-1, joined, separator, START_COLUMNS, values)


@pytest.mark.parametrize("walk", [True, False])
@pytest.mark.parametrize("headers", [True, False])
def test_doctor_says_which_walk_the_exit_audit_runs(monkeypatch: pytest.MonkeyPatch, walk: bool, headers: bool) -> None:
    from dejima.adapters import pinned_archives
    from dejima.orchestration.doctor import walk_check

    monkeypatch.setattr(tree_walk, "NATIVE", walk)
    monkeypatch.setattr(pinned_archives, "NATIVE_HEADERS", headers)
    check = walk_check()
    assert check.ok  # the same findings either way: only the time differs
    assert ("with its C parts" in check.detail) is (walk and headers)
    assert ("in Python" in check.detail and "reinstall dejima" in check.detail) is not (walk and headers)
    assert ("_stat_compare.c: the walk" in check.detail) is not walk
    assert ("_tar_headers.c: the archives' headers" in check.detail) is not headers
