"""The end walk trusts a directory that lists as the start walk saw it (dejima/adapters/tree_walk.py:
names, mode, inode, device, ctime, mtime and size of each child) and finds what was removed through
the start's children per directory: whatever a session does inside, the end finds what a comparison
of every entry finds. Real trees; the session's writes are made by the test between start and end."""

from __future__ import annotations

import hashlib
import io
import os
import shutil
from collections.abc import Callable
from operator import attrgetter
from pathlib import Path
from typing import Any

import pytest

from dejima.adapters import tree_walk as walker
from dejima.adapters import walk_shares
from dejima.adapters.hashed_file import hashed_content
from dejima.core import snapshot
from dejima.core.snapshot import Snapshot, children_of, diff, missing, nested_dirs, subtree_sizes
from dejima.orchestration import exit_audit
from dejima.orchestration.exit_audit import Mount
from dejima.ui.console import UI, plain_console
from tests.unit.racy import short_racy_window, tick  # noqa: F401 - the fixture applies by being imported
from tests.unit.walk_parts import either_walk_part  # noqa: F401 - each test runs with and without the C part

DEEP = "a/b/c/d/e/f/g/h"


def write(root: Path, path: str, text: str) -> None:
    target = root / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    write(repo, ".git/config", "[core]\n\tbare = false\n")
    for top in range(3):
        for n in range(5):
            write(repo, f"src/m{top}/f{n}.py", f"x = {top * 10 + n}\n")
    parts = DEEP.split("/")
    for depth in range(1, len(parts) + 1):
        for n in range(3):
            write(repo, "/".join(parts[:depth]) + f"/f{n}.txt", f"level {depth} file {n}\n")
    tick()
    return repo


def changes(before: Snapshot, after: Snapshot) -> set[tuple[str, str]]:
    return {(c.path, c.what) for c in diff(before, after)}


def quiet() -> UI:
    return UI(plain_console(io.StringIO()))


@pytest.mark.parametrize("naive", [False, True], ids=["ctime", "control: ctime left out of the digest"])
def test_a_rewrite_with_size_and_mtime_kept_in_a_trusted_directory_is_found(
        root: Path, monkeypatch: pytest.MonkeyPatch, naive: bool) -> None:
    if naive:  # what a digest without ctime (forgeable from inside: mtime, size) would let through
        monkeypatch.setattr(walker, "_STAT_KEY", attrgetter("st_mode", "st_ino", "st_dev", "st_mtime_ns", "st_size"))
    states = exit_audit.start("s1", [Mount("workspace", root)])
    state = states[0]
    assert state.start is not None and "src/m1" in state.start.digests  # the end walk may trust it
    tick()
    target = root / "src/m1/f3.py"
    before = os.stat(target)
    target.write_text("x = 99\n")  # the same size
    os.utime(target, ns=(before.st_atime_ns, before.st_mtime_ns))
    now = os.stat(target)
    assert (now.st_size, now.st_mtime_ns, now.st_ino) == (before.st_size, before.st_mtime_ns, before.st_ino)
    _, after = exit_audit.audit_mount(state, "s1")
    assert (("src/m1/f3.py", "modified") in changes(state.snapshot, after)) is not naive


@pytest.mark.parametrize("workers", [1, 2])
def test_a_new_file_in_a_deep_directory_is_found(root: Path, workers: int) -> None:
    walked = walker.start_snapshot(root)
    assert DEEP in walked.digests and "a/b/c" in walked.digests
    tick()
    write(root, f"{DEEP}/new.txt", "new\n")
    after, changed = walker.walk_changes(root, walked.snapshot, workers=workers, trusted=walked.digests)
    assert changes(walked.snapshot, after) == {(f"{DEEP}/new.txt", "added")}
    # Only the directory that changed, its entry and the new file were recorded: the rest was trusted.
    assert set(changed) == {f"{DEEP}/new.txt", DEEP}
    assert after == walker.take_snapshot(root, previous=walked.snapshot, workers=workers)


@pytest.mark.parametrize("naive", [False, True], ids=["digest", "control: blind to a subdirectory's times"])
@pytest.mark.parametrize("workers", [1, 2])
def test_a_file_put_in_a_directory_empty_at_the_start_is_found(
        root: Path, monkeypatch: pytest.MonkeyPatch, workers: int, naive: bool) -> None:
    # Below a trusted directory the end walks only into the subdirectories that held entries at the
    # start: one that was empty is entered again only when its parent's digest moved with it.
    (root / "src/m1/empty").mkdir()
    tick()
    if naive:  # ext4 keeps a directory's size as a file is added: mode, inode and size alone stay the same
        monkeypatch.setattr(walker, "_STAT_KEY", attrgetter("st_mode", "st_ino", "st_dev", "st_size"))
    walked = walker.start_snapshot(root)
    assert "src/m1" in walked.digests and "src/m1/empty" in walked.snapshot
    tick()
    before = os.stat(root / "src/m1/empty")
    write(root, "src/m1/empty/hook.py", "import os\n")
    os.utime(root / "src/m1/empty", ns=(before.st_atime_ns, before.st_mtime_ns))
    assert os.stat(root / "src/m1/empty").st_size == before.st_size
    after, _ = walker.walk_changes(root, walked.snapshot, workers=workers, trusted=walked.digests,
                                   children=children_of(walked.snapshot))
    assert (("src/m1/empty/hook.py", "added") in changes(walked.snapshot, after)) is not naive
    if not naive:
        assert after == walker.take_snapshot(root, previous=walked.snapshot, workers=workers)


def test_subdirectories_to_walk_below_a_trusted_directory_are_those_that_held_entries(root: Path) -> None:
    (root / "src/m1/empty").mkdir()
    nested = nested_dirs(children_of(walker.take_snapshot(root)))
    assert sorted(nested[""]) == [".git", "a", "src"]
    assert sorted(nested["src"]) == ["src/m0", "src/m1", "src/m2"] and "src/m1" not in nested
    assert nested["a/b/c"] == ["a/b/c/d"] and DEEP not in nested


@pytest.mark.parametrize("workers", [1, 2])
def test_what_was_removed_deep_inside_is_found_through_the_children_index(root: Path, workers: int) -> None:
    walked = walker.start_snapshot(root)
    index = children_of(walked.snapshot)
    tick()
    (root / "a/b/c/d/f1.txt").unlink()
    shutil.rmtree(root / "a/b/c/d/e/f")
    write(root, "a/b/c/d/e/f", "a file where a directory was\n")
    after, _ = walker.walk_changes(root, walked.snapshot, workers=workers, trusted=walked.digests, children=index)
    expected = {("a/b/c/d/f1.txt", "removed"), ("a/b/c/d/e/f", "type")}
    expected |= {(p, "removed") for p in walked.snapshot if p.startswith("a/b/c/d/e/f/")}
    assert len(expected) == 2 + 3 * 3 + 2  # files of f, g and h, and the directories g and h
    assert changes(walked.snapshot, after) == expected
    assert after == walker.take_snapshot(root, previous=walked.snapshot, workers=workers)


def test_missing_through_the_index_is_the_pass_over_every_entry(root: Path) -> None:
    before = walker.take_snapshot(root)
    listings = [("a/b/c/d", ["e", "f0.txt"]), ("src", ["m0"]), ("", ["a", ".git", "src"]), ("nowhere", [])]
    by_index = missing(before, listings, children_of(before))
    assert sorted(by_index) == sorted(missing(before, listings))
    assert "a/b/c/d/f2.txt" in by_index and "src/m2/f4.py" in by_index


def test_the_start_keeps_no_digest_of_a_directory_it_did_not_see(root: Path) -> None:
    states = exit_audit.start("s1", [Mount("workspace", root)])
    exit_audit.finish("s1", quiet(), states=states)
    tick()
    shutil.rmtree(root / "src/m2")  # gone between sessions: its old digest names nothing now
    tick()
    states = exit_audit.start("s2", [Mount("workspace", root)])
    assert states[0].start is not None and states[0].start.digests
    assert "src/m2" not in states[0].start.digests and "src/m1" in states[0].start.digests
    exit_audit.finish("s2", quiet(), states=states)


def test_subtree_sizes_count_every_entry_below_each_directory(root: Path) -> None:
    snapshot = walker.take_snapshot(root)
    sizes = subtree_sizes(children_of(snapshot))
    assert sizes[""] == len(snapshot)
    assert sizes["a/b/c"] == len([p for p in snapshot if p.startswith("a/b/c/")])
    assert sizes[DEEP] == 3 and "src/m0/f0.py" not in sizes


def test_the_walk_is_dealt_out_by_entries(tmp_path: Path) -> None:
    # One top directory holds most of the tree, in subdirectories: dealt by directory, one process
    # would walk it all; split, its subdirectories are dealt too, the largest first.
    for n in range(40):
        write(tmp_path, f"big/s{n}/f.txt", "x")
        for m in range(9 + n % 3):
            write(tmp_path, f"big/s{n}/g{m}.txt", "x")
    for n in range(7):
        write(tmp_path, f"small{n}/f.txt", "x")
    before = walker.take_snapshot(tmp_path)
    children = children_of(before)
    sizes = subtree_sizes(children)
    front = walker._Walk(str(tmp_path), os.stat(tmp_path).st_dev, before, lambda path: True)
    units = walk_shares.frontier(front, 2, children, sizes)
    assert "big" not in {u[0] for u in units} and sum(1 for u in units if u[0].startswith("big/")) == 40
    ordered = [sizes.get(u[0], 0) for u in walk_shares.by_size(units, sizes)]
    assert ordered == sorted(ordered, reverse=True) and ordered[0] == 12 and ordered[-1] == 1
    after, changed = walker.walk_changes(tmp_path, before, workers=2, children=children, sizes=sizes)
    assert after == before and changed == []


def test_a_tree_installed_in_the_session_is_dealt_out_by_its_widest_new_directory(tmp_path: Path) -> None:
    # An environment installed in the session: its packages under three directories of a few
    # entries, and old directories enough for a fair share besides. Dealt as the unit ".venv", one
    # process would read and hash every new file; dealt by site-packages' packages, both share them.
    for n in range(20):
        write(tmp_path, f"src/m{n}/f.py", "x")
    before = walker.take_snapshot(tmp_path)
    site = ".venv/lib/python3.11/site-packages"
    write(tmp_path, ".venv/pyvenv.cfg", "home = /usr/bin\n")
    write(tmp_path, ".venv/bin/python", "")
    for n in range(30):
        for m in range(3):
            write(tmp_path, f"{site}/pkg{n}/mod{m}.py", "x = 1\n")
    children = children_of(before)
    sizes = subtree_sizes(children)
    front = walker._Walk(str(tmp_path), os.stat(tmp_path).st_dev, before, lambda path: True)
    units = {u[0] for u in walk_shares.frontier(front, 2, children, sizes)}
    assert {f"{site}/pkg{n}" for n in range(30)} <= units
    assert not units & {".venv", ".venv/lib", ".venv/lib/python3.11", site}
    after, changed = walker.walk_changes(tmp_path, before, workers=2, children=children, sizes=sizes)
    alone, changed_alone = walker.walk_changes(tmp_path, before, workers=1)
    assert after == alone and sorted(changed) == sorted(changed_alone) and f"{site}/pkg29/mod2.py" in after


@pytest.mark.parametrize("count", [5, walk_shares.Queue.RECORDS * 3 + 1])
def test_each_unit_is_taken_once_by_whichever_process_asks(count: int) -> None:
    units = [(f"d{n}", n % 2 == 0) for n in range(count)]
    queue = walk_shares.Queue(units)
    try:
        first, second = queue.taken(), queue.taken()  # two takers, as two processes read one pipe
        taken = [next(first), next(second), next(second)]
        taken += [*first, *second]  # the first takes all the rest: the second finds none left
    finally:
        queue.close()
    assert sorted(taken) == sorted(units)


def test_the_start_paths_joined_during_the_session_are_given_for_that_snapshot_only(root: Path) -> None:
    state = exit_audit.start("s1", [Mount("workspace", root)])[0]
    state.join()
    assert state.joined_paths(state.snapshot) == snapshot.joined_paths(state.snapshot)
    assert state.joined_paths(dict(state.snapshot)) is None  # another snapshot (an earlier audit's baselines)


def test_the_copy_made_during_the_session_is_updated_by_one_end_walk_only(root: Path) -> None:
    state = exit_audit.start("s1", [Mount("workspace", root)])[0]
    state.join()
    assert state.copy is not None
    copy = state.copy[1]
    tick()
    write(root, "src/m0/new.py", "x = 1\n")
    _, after = exit_audit.audit_mount(state, "s1")
    assert after is copy and changes(state.snapshot, after) == {("src/m0/new.py", "added")}
    assert "src/m0/new.py" not in state.snapshot  # the start itself untouched
    (root / "src/m0/new.py").unlink()
    write(root, "src/m1/other.py", "x = 2\n")
    _, again = exit_audit.audit_mount(state, "s1")  # no copy left: the walk copies the start itself
    assert again is not copy and changes(state.snapshot, again) == {("src/m1/other.py", "added")}
    exit_audit.finish("s1", quiet(), states=[state])


@pytest.mark.parametrize("replaced", [False, True], ids=["same snapshot", "control: the snapshot replaced"])
def test_a_copy_of_another_snapshot_is_never_the_end_walks(root: Path, replaced: bool) -> None:
    state = exit_audit.start("s1", [Mount("workspace", root)])[0]
    state.join()
    if replaced:  # e.g. read back again: the copy may not be what the end compares with
        state.snapshot = dict(state.snapshot)
    assert (state.end_entries() is None) is replaced
    assert state.end_entries() is None  # once
    exit_audit.finish("s1", quiet(), states=[state])


@pytest.mark.parametrize("workers", [1, 2])
def test_the_end_walk_sends_back_the_bytes_it_hashed(root: Path, workers: int) -> None:
    walked = walker.start_snapshot(root)
    tick()
    write(root, "src/m0/f1.py", "x = 'changed'\n")
    write(root, "a/new.txt", "new\n")
    write(root, "src/m2/big.txt", "y" * (walker.SEND_FILE + 1))  # too big to send: the rules read it
    contents: dict[str, bytes] = {}
    after, _ = walker.walk_changes(root, walked.snapshot, workers=workers, trusted=walked.digests,
                                   contents=contents)
    assert contents == {"src/m0/f1.py": b"x = 'changed'\n", "a/new.txt": b"new\n"}
    assert all(after[path].sha256 == hashlib.sha256(data).hexdigest() for path, data in contents.items())


@pytest.mark.parametrize("other", [False, True], ids=["the bytes hashed", "control: other bytes sent back"])
def test_the_rules_read_what_the_end_walk_sent_back(root: Path, monkeypatch: pytest.MonkeyPatch, other: bool) -> None:
    if other:  # a walk that sent back bytes other than the file's would hide what is in it
        hashed = hashed_content  # what tree_walk calls, replaced there by a wrapper
        monkeypatch.setattr(walker, "hashed_content", lambda *a: (hashed(*a)[0], b"" if a[3] else None, None))
    state = exit_audit.start("s1", [Mount("workspace", root)])[0]
    tick()
    write(root, "src/m0/notes.txt", "# vim: set makeprg=./evil:\n")
    write(root, "src/m1/big.txt", "z\n" * walker.SEND_FILE + "# vim: set makeprg=./worse:\n")  # read by the rules
    found, _ = exit_audit.audit_mount(state, "s1")
    flagged = {f.path for f in found if f.rule == "I12"}
    assert flagged == ({"src/m1/big.txt"} if other else {"src/m0/notes.txt", "src/m1/big.txt"})
    exit_audit.finish("s1", quiet(), states=[state])


@pytest.mark.parametrize("partial", [False, True], ids=["the walk's listing", "control: a listing short of a name"])
def test_the_rules_see_a_directory_as_the_end_walk_listed_it(
        root: Path, monkeypatch: pytest.MonkeyPatch, partial: bool) -> None:
    if partial:  # the rules take the walk's listing as it is: one short of a name hides a collision
        walk = walker.walk_changes  # what exit_audit calls, replaced there by a wrapper

        def short(*args: Any, **kwargs: Any) -> tuple[Snapshot, list[str]]:
            walked = walk(*args, **kwargs)
            kwargs["listed"]["src/m0"].remove("f0.py")
            return walked

        monkeypatch.setattr(exit_audit, "walk_changes", short)
    state = exit_audit.start("s1", [Mount("workspace", root)])[0]
    tick()
    write(root, "src/m0/F0.py", "x = 0\n")  # differs only in case from f0.py
    found, _ = exit_audit.audit_mount(state, "s1")
    assert any(f.rule == "F08" and f.path == "src/m0/F0.py" for f in found) is not partial
    exit_audit.finish("s1", quiet(), states=[state])


def _same_size_rewrite(root: Path) -> None:
    """A file rewritten in place with its size and mtime as they were: only its ctime moves."""
    target = root / "src/m1/f3.py"
    before = os.stat(target)
    target.write_text("x = 99\n")
    os.utime(target, ns=(before.st_atime_ns, before.st_mtime_ns))


def _replaced_by_a_directory(path: Path) -> None:
    path.unlink()
    path.mkdir()


SESSION_ACTS: dict[str, Callable[[Path], object]] = {
    "rewrite, size and mtime kept": _same_size_rewrite,
    "renamed over another": lambda root: os.replace(root / "src/m1/f0.py", root / "src/m1/f1.py"),
    "added": lambda root: write(root, "src/m2/new.py", "x = 1\n"),
    "removed": lambda root: (root / "a/b/f1.txt").unlink(),
    "mode": lambda root: os.chmod(root / "src/m0/f2.py", 0o755),
    "hard link elsewhere": lambda root: os.link(root / "src/m0/f4.py", root / "a/linked.py"),
    "replaced by a directory": lambda root: _replaced_by_a_directory(root / "src/m2/f0.py"),
}


@pytest.mark.parametrize("act", SESSION_ACTS)
@pytest.mark.parametrize("workers", [1, 2])
def test_a_directory_trusted_by_its_start_listing_is_what_the_long_way_finds(
        root: Path, act: str, workers: int) -> None:
    # The start's entries of each directory's children (names, inode, ctime, size) stand in for the
    # listing digest: whatever the session did, the end is the walk that compares every child.
    state = exit_audit.start("s1", [Mount("workspace", root)])[0]
    state.join()
    listings = state.start_listings()
    assert state.start is not None and listings is not None and "src/m1" in listings
    tick()
    SESSION_ACTS[act](root)
    after, _ = walker.walk_changes(root, state.snapshot, workers=workers, trusted=state.start.digests,
                                   children=state.children, listings=listings)
    assert after == walker.take_snapshot(root, previous=state.snapshot, workers=workers)
    assert changes(state.snapshot, after)
    exit_audit.finish("s1", quiet(), states=[state])


def test_the_start_listings_trust_without_a_digest(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A digest is made only of a directory whose listing is not the start's any more.
    state = exit_audit.start("s1", [Mount("workspace", root)])[0]
    state.join()
    assert state.start is not None
    tick()
    write(root, "src/m2/new.py", "x = 1\n")
    made: list[str] = []
    digest = walker._digest

    def counted(names: list[str], infos: list[os.stat_result]) -> bytes:
        made.append(",".join(names))
        return digest(names, infos)

    monkeypatch.setattr(walker, "_digest", counted)
    for listings in (state.start_listings(), None):
        made.clear()
        after, _ = walker.walk_changes(root, state.snapshot, workers=1, trusted=state.start.digests,
                                       children=state.children, listings=listings)
        assert changes(state.snapshot, after) == {("src/m2/new.py", "added")}
        if listings:
            # src's: its child m2 moved (src/m2 itself, its entry changed, is listed without one)
            assert len(made) == 1 and sorted(made[0].split(",")) == ["m0", "m1", "m2"]
        else:
            assert len(made) >= 10  # each directory the walk went into but the root (always listed)
    exit_audit.finish("s1", quiet(), states=[state])


@pytest.mark.parametrize("naive", [False, True], ids=["ctime", "control: ctime left out of the listing"])
def test_a_rewrite_with_size_and_mtime_kept_is_found_through_the_start_listing(
        root: Path, monkeypatch: pytest.MonkeyPatch, naive: bool) -> None:
    if naive:  # what a comparison without ctime (forgeable from inside: mtime, size) would let through
        monkeypatch.setattr(snapshot, "START_COLUMNS", ("inode", "size"))
    state = exit_audit.start("s1", [Mount("workspace", root)])[0]
    state.join()
    tick()
    _same_size_rewrite(root)
    _, after = exit_audit.audit_mount(state, "s1")
    assert (("src/m1/f3.py", "modified") in changes(state.snapshot, after)) is not naive
    exit_audit.finish("s1", quiet(), states=[state])


def test_start_listings_join_names_as_the_end_walk_does(root: Path) -> None:
    before = walker.take_snapshot(root)
    index = children_of(before)
    listings = snapshot.start_listings(before, index, ["", "src", DEEP, "src/m1"])
    for directory, (names, columns) in listings.items():
        children = [path.rpartition("/")[2] for path in index[directory]]
        assert names == snapshot.joined_names(directory, children)
        assert columns[1] == [before[path].ctime_ns for path in index[directory]]
    assert snapshot.start_listings({}, {}, ["empty"]) == {"empty": ("", [[], [], []])}


def test_a_start_listing_that_names_other_children_trusts_nothing(root: Path) -> None:
    # The start held src/m1/f9.py where the disk holds f3.py, every value the same: the names decide.
    disk = walker.take_snapshot(root)
    start = {("src/m1/f9.py" if path == "src/m1/f3.py" else path):
             (entry._replace(path="src/m1/f9.py") if path == "src/m1/f3.py" else entry) for path, entry in disk.items()}
    index = children_of(start)
    listings = snapshot.start_listings(start, index, index)
    after, _ = walker.walk_changes(root, start, workers=1, trusted={d: b"matches nothing" for d in index},
                                   children=index, listings=listings)
    assert changes(start, after) == {("src/m1/f3.py", "added"), ("src/m1/f9.py", "removed")}


def test_a_directory_added_to_in_an_earlier_session_is_trusted_by_its_start_listing(
        root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Its entries recorded again keep its listing's order, in the start snapshot and in the state
    # the next start loads (base and delta): the end compares the directory without a digest.
    made: list[str] = []
    digest = walker._digest

    def counted(names: list[str], infos: list[os.stat_result]) -> bytes:
        made.append(",".join(names))
        return digest(names, infos)

    for session in ("s1", "s2", "s3", "s4"):
        states = exit_audit.start(session, [Mount("workspace", root)])
        states[0].join()
        tick()
        if session != "s1":
            monkeypatch.setattr(walker, "_digest", counted)
            exit_audit.audit_mount(states[0], session)
            assert made == [], session  # every directory trusted by its start listing
            monkeypatch.setattr(walker, "_digest", digest)
        if session in ("s1", "s2"):  # what the next starts find added (s2: to what the delta holds)
            for n in range(6):
                write(root, f"src/m1/{session}-{n}.py", f"x = {n}\n")
            write(root, f"a/b/c/{session}.txt", "later\n")
        exit_audit.finish(session, quiet(), states=states)
        tick()
