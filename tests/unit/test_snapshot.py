"""The snapshot walker on real trees: what it records, what it never does, and what diff reports."""

from __future__ import annotations

import os
import struct
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from dejima.adapters.mount_state import load_snapshot, save_snapshot
from dejima.adapters.tree_walk import InconsistentWalk, SnapshotError, take_snapshot
from dejima.core.snapshot import Change, SnapshotEntry, diff
from tests.unit.walk_parts import either_walk_part  # noqa: F401 - each test runs with and without the C part


def whats(changes: list[Change]) -> set[tuple[str, str]]:
    return {(c.path, c.what) for c in changes}


def later() -> None:
    time.sleep(0.02)  # before Linux 6.13, ctime ticks coarsely: let it move between the two snapshots


def end_of_session(root: Path, change: Callable[[Path], None]) -> tuple[list[Change], dict[str, SnapshotEntry]]:
    before = take_snapshot(root)  # every file hashed: "modified" means new content, not a new ctime
    later()
    change(root)
    after = take_snapshot(root, previous=before)
    return diff(before, after), after


def nested_tree(root: Path) -> None:
    for i in range(6):
        for j in range(5):
            directory = root / f"top{i}" / f"mid{j}" / "leaf"
            directory.mkdir(parents=True)
            for k in range(8):
                (directory / f"f{k}.txt").write_text(f"{i} {j} {k}\n")
            (root / f"top{i}" / f"mid{j}" / "link").symlink_to("leaf/f0.txt")
    (root / "loose.txt").write_text("loose\n")


def test_symlinks_are_recorded_never_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    (outside / "deep").mkdir(parents=True)
    (outside / "deep" / "secret").write_text("x")
    root = tmp_path / "root"
    root.mkdir()
    (root / "out").symlink_to(outside)
    snapshot = take_snapshot(root)
    assert snapshot["out"].kind == "symlink"
    assert snapshot["out"].target == str(outside)
    assert set(snapshot) == {"out"}


@pytest.mark.timeout(10)
def test_a_fifo_is_recorded_and_never_opened(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe")
    before = take_snapshot(tmp_path)
    assert before["pipe"].kind == "fifo" and before["pipe"].sha256 is None
    assert take_snapshot(tmp_path, previous=before)["pipe"] is before["pipe"]


def test_a_rewrite_with_mtime_set_back_is_still_modified(tmp_path: Path) -> None:
    path = tmp_path / "tool.py"
    path.write_text("print('safe')\n")
    times = os.stat(path).st_atime_ns, os.stat(path).st_mtime_ns

    def rewrite(root: Path) -> None:
        path.write_text("print('evil')\n")  # same size
        os.utime(path, ns=times)

    changes, after = end_of_session(tmp_path, rewrite)
    assert whats(changes) == {("tool.py", "modified")}
    assert after["tool.py"].mtime_ns == times[1]
    assert after["tool.py"].sha256 is not None and after["tool.py"].caps is False


def test_added_removed_and_type_changes(tmp_path: Path) -> None:
    (tmp_path / "gone").mkdir()
    (tmp_path / "gone" / "inner.txt").write_text("x")
    (tmp_path / "becomes-file").mkdir()
    (tmp_path / "becomes-file" / "child").write_text("x")
    (tmp_path / "stays.txt").write_text("x")

    def change(root: Path) -> None:
        (root / "gone" / "inner.txt").unlink()
        (root / "gone").rmdir()
        (root / "becomes-file" / "child").unlink()
        (root / "becomes-file").rmdir()
        (root / "becomes-file").write_text("now a file")
        (root / "new").mkdir()
        (root / "new" / "file.txt").write_text("y")

    changes, after = end_of_session(tmp_path, change)
    assert whats(changes) == {("gone", "removed"), ("gone/inner.txt", "removed"), ("becomes-file", "type"),
                              ("becomes-file/child", "removed"), ("new", "added"), ("new/file.txt", "added")}
    assert after["new/file.txt"].sha256 is not None


def test_a_directory_replaced_by_a_link_is_not_walked_through(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "planted").write_text("x")
    root = tmp_path / "root"
    (root / "src").mkdir(parents=True)
    (root / "src" / "main.py").write_text("x")

    def swap(root: Path) -> None:
        (root / "src" / "main.py").unlink()
        (root / "src").rmdir()
        (root / "src").symlink_to(outside)

    changes, after = end_of_session(root, swap)
    assert whats(changes) == {("src", "type"), ("src/main.py", "removed")}
    assert set(after) == {"src"}


def test_a_walk_that_does_not_add_up_is_walked_again_listing_every_directory(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "real").write_text("x")
    before = take_snapshot(tmp_path)
    # What a host write within the clock tick of the start walk leaves (git gc pruning a loose
    # object as the walk passed): an entry gone from a directory whose ctime did not move.
    before["sub/ghost"] = before["sub/real"]._replace(path="sub/ghost")
    after = take_snapshot(tmp_path, previous=before)
    assert sorted(after) == ["sub", "sub/real"]
    assert [(c.path, c.what) for c in diff(before, after)] == [("sub/ghost", "removed")]


def test_what_no_walk_can_account_for_is_named(tmp_path: Path) -> None:
    (tmp_path / "real").write_text("x")
    before = take_snapshot(tmp_path)
    before["gone/ghost"] = before["real"]._replace(path="gone/ghost")  # its directory is in no listing
    with pytest.raises(InconsistentWalk, match="unsure about gone/ghost") as raised:
        take_snapshot(tmp_path, previous=before)
    assert raised.value.paths == ["gone/ghost"] and "real" in raised.value.snapshot


def test_mode_owner_link_target_and_nlink_changes(tmp_path: Path) -> None:
    (tmp_path / "script").write_text("#!/bin/sh\n")
    (tmp_path / "owned").write_text("x")
    (tmp_path / "pointer").symlink_to("script")

    def change(root: Path) -> None:
        (root / "script").chmod(0o4755)
        os.chown(root / "owned", 1234, 1234)
        (root / "pointer").unlink()
        (root / "pointer").symlink_to("/etc/passwd")
        os.link(root / "script", root / "hardlink")

    changes, _ = end_of_session(tmp_path, change)
    assert whats(changes) == {("script", "mode"), ("script", "nlink"), ("owned", "owner"),
                              ("pointer", "link-target"), ("hardlink", "added")}


def test_file_capabilities_are_read_for_new_and_changed_files(tmp_path: Path) -> None:
    (tmp_path / "plain").write_text("x")
    (tmp_path / "tool").write_text("x")
    start = take_snapshot(tmp_path, hash_path=lambda path: False)
    assert start["tool"].caps is None  # not read: not hashed

    def grant(root: Path) -> None:  # cap_net_bind_service=ep, as setcap writes it
        try:
            os.setxattr(root / "tool", "security.capability", struct.pack("<5I", 0x02000001, 1 << 10, 0, 0, 0))
        except OSError as exc:
            pytest.skip(f"no security xattrs here: {exc}")

    later()
    grant(tmp_path)
    after = take_snapshot(tmp_path, previous=start)
    assert after["tool"].caps is True and after["plain"] is start["plain"]
    assert take_snapshot(tmp_path, previous={})["plain"].caps is False


def test_untouched_entries_are_the_same_objects(tmp_path: Path) -> None:
    nested_tree(tmp_path)
    before = take_snapshot(tmp_path)
    after = take_snapshot(tmp_path, previous=before)
    assert all(after[path] is entry for path, entry in before.items()) and len(after) == len(before)
    assert diff(before, after) == []


def test_diff_compares_values_of_snapshots_built_by_hand() -> None:
    old = SnapshotEntry("a", "file", 0o644, 0, 0, 1, 1, 7, 100, 100, sha256="x")
    before = {"a": old, "b": old._replace(path="b")}
    after = {"a": old._replace(sha256="y"), "c": old._replace(path="c"), "b": old._replace(path="b")}
    assert whats(diff(before, after)) == {("a", "modified"), ("c", "added")}
    assert [c.path for c in diff(after, before)] == ["a", "c"]


@pytest.mark.parametrize("workers", [2, 3, 5])
def test_the_parallel_walk_equals_the_walk_in_process(tmp_path: Path, workers: int) -> None:
    nested_tree(tmp_path)
    alone = take_snapshot(tmp_path, hash_path=lambda path: path.endswith("3.txt"), workers=1)
    assert len(alone) > 300
    assert take_snapshot(tmp_path, hash_path=lambda path: path.endswith("3.txt"), workers=workers) == alone

    def change(root: Path) -> None:
        (root / "top1" / "mid2" / "leaf" / "f3.txt").write_text("changed\n")
        (root / "top4" / "mid0" / "leaf" / "f5.txt").unlink()
        for top in ("top2", "top5"):
            for path in sorted((root / top).rglob("*"), reverse=True):
                path.unlink() if not path.is_dir() or path.is_symlink() else path.rmdir()
        (root / "top3" / "mid1" / "added").write_text("new\n")

    later()
    change(tmp_path)
    in_process = take_snapshot(tmp_path, previous=alone, workers=1)
    assert take_snapshot(tmp_path, previous=alone, workers=workers) == in_process
    counts = Counter(c.what for c in diff(alone, in_process))
    assert counts == {"modified": 1, "added": 1, "removed": 1 + 2 * (5 * (2 + 8 + 1))}


def test_a_failing_walker_process_is_an_error(tmp_path: Path) -> None:
    nested_tree(tmp_path)
    parent = os.getpid()
    with pytest.raises(SnapshotError, match="ZeroDivisionError"):
        take_snapshot(tmp_path, hash_path=lambda path: os.getpid() == parent or bool(1 / 0), workers=3)


def test_save_and_load_round_trip(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    nested_tree(tree)
    (tree / "caf\udce9").write_bytes(b"not utf-8 name")
    snapshot = take_snapshot(tree)
    state = tmp_path / "state"
    save_snapshot(state, snapshot)
    assert load_snapshot(state) == snapshot
    assert state.stat().st_mode & 0o777 == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state", "tree"]  # no temporary file left


@pytest.mark.parametrize("damage", [lambda d: d[:-7], lambda d: b"{}", lambda d: d[:-1] + bytes([d[-1] ^ 1])])
def test_a_damaged_state_file_raises_value_error(tmp_path: Path, damage: Callable[[bytes], bytes]) -> None:
    (tmp_path / "a").write_text("x")
    state = tmp_path / "state"
    save_snapshot(state, take_snapshot(tmp_path))
    state.write_bytes(damage(state.read_bytes()))
    with pytest.raises(ValueError, match="state"):
        load_snapshot(state)


def test_an_unreadable_file_does_not_stop_the_walk(tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("x")
    secret.chmod(0)
    (tmp_path / "after.txt").write_text("y")
    snapshot = take_snapshot(tmp_path)
    assert {"secret.txt", "after.txt"} <= set(snapshot)
    assert snapshot["secret.txt"].mode == 0
