"""The audit's work shared out over forked processes gives what one process gives: the walk (every
entry and hash, with links, a FIFO, a socket, an unreadable file, hard links, files rewritten while
it runs), the rule stages (walk_shares.shared_out: the same findings, in the same order) and the
npm tarballs (pinned_archives.py: read by forked processes, kept as manifests for the next audit). Real trees, a
real `npm ci` and a real `python -m venv`."""

from __future__ import annotations

import hashlib
import os
import select
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from dejima.adapters import fork_workers, npm_cache, pinned_archives, walk_shares
from dejima.adapters.tree_walk import take_snapshot, walk_changes
from dejima.core.audit import Finding, rules
from dejima.core.audit.isolation import ceiling
from dejima.core.audit.model import Artifact
from dejima.core.audit.rules import StageRunner, audit
from dejima.core.snapshot import Snapshot, diff
from dejima.orchestration.exit_audit import Mount, capture
from tests.unit.racy import tick
from tests.unit.test_npm_verify import npm, packed, project  # noqa: F401 - packed is a fixture

NOBODY = 65534


@pytest.fixture
def tree() -> Iterator[Path]:
    """A directory anyone may enter (the walks run as an ordinary user, for whom a mode 0 file is
    unreadable); removed afterwards."""
    top = Path(tempfile.mkdtemp(prefix="dejima-parallel-"))
    top.chmod(0o755)
    try:
        yield top
    finally:
        shutil.rmtree(top, ignore_errors=True)


def _build(root: Path) -> None:
    for i in range(4):
        for j in range(6):
            leaf = root / f"top{i}" / f"mid{j}"
            leaf.mkdir(parents=True)
            for k in range(10):
                (leaf / f"f{k}.txt").write_text(f"{i} {j} {k}\n" * (k * 40))
            (leaf / "link").symlink_to("f0.txt")
            (leaf / "dangling").symlink_to("nowhere")
    (root / "outside").symlink_to("/etc")
    (root / "dirlink").symlink_to("top0")
    os.mkfifo(root / "top1" / "pipe")
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(str(root / "top2" / "socket"))
    (root / "top3" / "big.bin").write_bytes(os.urandom(3 << 20))  # read in more than one chunk
    (root / "top3" / "empty").write_bytes(b"")
    os.link(root / "top0" / "mid0" / "f5.txt", root / "top3" / "hardlink")
    (root / "top2" / "secret").write_text("no one reads this\n")
    (root / "top2" / "secret").chmod(0)
    for path in [root, *root.rglob("*")]:
        if not path.is_symlink() and path.is_dir():
            path.chmod(0o755)
        os.chown(path, NOBODY, NOBODY, follow_symlinks=False)


def _as_nobody(work: Callable[[], Any]) -> Any:
    """``work()`` in a forked child as an ordinary user (a mode 0 file is unreadable there, as it
    is not to root), its result marshalled back."""
    def child() -> Any:
        if os.getuid() == 0:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
        return work()

    return fork_workers.collect(fork_workers.fork(child))


def _rows(snapshot: Snapshot) -> list[tuple[object, ...]]:
    return sorted(tuple(entry) for entry in snapshot.values())


def test_the_walk_on_two_or_three_processes_records_what_one_records(tree: Path) -> None:
    _build(tree)

    def walks() -> tuple[object, ...]:
        alone = take_snapshot(tree, previous={}, workers=1)
        assert alone["top2/secret"].sha256 == "unreadable:13"  # EACCES: the walk ran as an ordinary user
        shared = [take_snapshot(tree, previous={}, workers=count) for count in (2, 3)]
        start = take_snapshot(tree, workers=1)
        return _rows(alone), [_rows(s) for s in shared], _rows(start), \
            _rows(take_snapshot(tree, workers=2))

    alone, shared, start, start_shared = _as_nobody(walks)
    assert shared == [alone, alone]
    assert start_shared == start
    kinds = {row[0]: row[1] for row in alone}
    assert {kinds["top1/pipe"], kinds["top2/socket"], kinds["outside"], kinds["top3/big.bin"]} == \
        {"fifo", "socket", "symlink", "file"}
    hashes = {row[0]: row[10] for row in alone}
    assert hashes["top3/big.bin"] == hashlib.sha256((tree / "top3" / "big.bin").read_bytes()).hexdigest()


def test_the_end_walk_on_two_processes_finds_what_one_finds(tree: Path) -> None:
    _build(tree)
    before = take_snapshot(tree, workers=1)
    tick()
    (tree / "top0" / "mid1" / "f3.txt").write_text("changed\n")
    (tree / "top1" / "mid2" / "f4.txt").unlink()
    shutil.rmtree(tree / "top2" / "mid3")
    (tree / "top3" / "mid0" / "new.txt").write_text("new\n")
    (tree / "top1" / "pipe").unlink()
    (tree / "top1" / "pipe").write_text("a file where the FIFO was\n")
    results = []
    for count in (1, 2):
        contents: dict[str, bytes] = {}
        listed: dict[str, list[str]] = {}
        after, changed = walk_changes(tree, dict(before), workers=count, contents=contents, listed=listed)
        results.append((_rows(after), sorted(changed), contents, listed, [
            (c.path, c.what) for c in diff(before, after, changed)]))
    assert results[1] == results[0]
    assert ("top1/pipe", "type") in results[0][4] and ("top2/mid3/f0.txt", "removed") in results[0][4]


def test_files_rewritten_while_the_walk_runs_are_recorded_as_either_content(tree: Path) -> None:
    """A host process rewriting files (in place, the same size) while the parallel walk runs: every
    other entry is the one-process walk's, and each rewritten file is recorded with one of the two
    contents it had, never dropped."""
    _build(tree)
    moving = [tree / f"top{i}" / f"mid{j}" / "f9.txt" for i in range(4) for j in range(6)]
    contents = [b"A" * 360, b"B" * 360]
    for path in moving:
        path.write_bytes(contents[0])
    still = _rows(take_snapshot(tree, previous={}, workers=1))
    stop = threading.Event()

    def rewrite() -> None:
        for turn in range(100_000):  # bounded; stopped once the walks are done
            if stop.is_set():
                return
            for path in moving:
                fd = os.open(path, os.O_WRONLY)
                try:
                    os.pwrite(fd, contents[turn % 2], 0)
                finally:
                    os.close(fd)

    writer = threading.Thread(target=rewrite)
    writer.start()
    try:
        walked = [take_snapshot(tree, previous={}, workers=2) for _ in range(3)]
    finally:
        stop.set()
        writer.join()
    rewritten = {str(path.relative_to(tree)) for path in moving}
    expected = {hashlib.sha256(data).hexdigest() for data in contents}
    for snapshot in walked:
        assert [row for row in _rows(snapshot) if row[0] not in rewritten] == \
            [row for row in still if row[0] not in rewritten]
        assert {snapshot[path].sha256 for path in rewritten} <= expected


def _venv(workspace: Path) -> None:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(workspace / ".venv")], check=True,
                   timeout=120)
    site = next((workspace / ".venv").glob("lib/python*/site-packages"))
    (site / "evil.pth").write_text("import os; os.system('id')\n")  # no installer writes this


@pytest.mark.parametrize("tampered", ["", "modified", "planted"], ids=["clean install", "tampered", "planted"])
def test_the_rule_stages_shared_out_find_what_one_process_finds(tmp_path: Path, packed: Path,  # noqa: F811
                                                               tampered: str) -> None:
    workspace, home = project(tmp_path, packed)
    (workspace / "tests").mkdir()
    state = capture(Mount("workspace", workspace))
    tick()
    npm(workspace, home / ".npm", "ci")
    _venv(workspace)
    (workspace / "tests" / "conftest.py").write_text("import os\n")
    (workspace / ".vscode").mkdir()
    (workspace / ".vscode" / "tasks.json").write_text('{"tasks": [{"runOptions": {"runOn": "folderOpen"}}]}')
    if tampered == "modified":  # found by the verification (tree_judgements)
        (workspace / "node_modules" / "tinytool" / "index.js").write_text("require('child_process');\n")
    if tampered == "planted":  # found by the checks beside it (tree_tampering), which the stages run apart
        (workspace / "node_modules" / "evil.js").write_text("require('child_process');\n")
    after = take_snapshot(workspace, previous=state.snapshot, workers=1)

    def contents(side: str, path: str) -> bytes | None:
        if side == "before":
            return state.kept.get(path)
        try:
            return (workspace / path).read_bytes()
        except OSError:
            return None

    def findings(share: StageRunner | None = None) -> list[Finding]:
        return audit(state.snapshot, after, contents, "workspace", artifacts=npm_cache.tarballs([home / ".npm"]),
                     share=share)

    alone = findings()
    assert {(f.rule, f.path) for f in alone} >= {("B07", "node_modules"), ("B09", "tests/conftest.py")}
    tree = next(f for f in alone if f.rule == "B07" and f.path == "node_modules")
    assert tree.severity == ("high" if tampered else "low"), tree
    assert ("node_modules/evil.js: a file in node_modules that no package puts there" in tree.evidence) is \
        (tampered == "planted")
    assert findings(partial(walk_shares.shared_out, count=2)) == alone
    assert findings(partial(walk_shares.shared_out, count=3)) == alone


@pytest.mark.parametrize("part", ["tree_judgements", "tree_tampering"])
def test_a_tree_part_that_fails_in_the_shared_stages_is_a_finding_and_hides_no_other(
        tmp_path: Path, packed: Path, monkeypatch: pytest.MonkeyPatch, part: str) -> None:  # noqa: F811
    """The two parts of the tree rules run apart (rules._shared) and are combined after: either one
    that raises leaves an X00 of the tree rules at the mount, at their worst severity, and every other
    stage's finding stands; run in one process or shared out, the same."""
    workspace, home = project(tmp_path, packed)
    (workspace / "tests").mkdir()
    state = capture(Mount("workspace", workspace))
    tick()
    npm(workspace, home / ".npm", "ci")
    (workspace / "tests" / "conftest.py").write_text("import os\n")
    after = take_snapshot(workspace, previous=state.snapshot, workers=1)

    def broken(view: object) -> object:
        raise RuntimeError(f"{part} broke")

    monkeypatch.setattr(rules, part, broken)  # the fault: no input makes these raise as a whole

    def findings(share: StageRunner) -> list[Finding]:
        return audit(state.snapshot, after, lambda side, path: state.kept.get(path) if side == "before" else
                     (workspace / path).read_bytes(), "workspace", artifacts=npm_cache.tarballs([home / ".npm"]),
                     share=share)

    here = findings(lambda tasks: [task() for task in tasks])
    failed = [f for f in here if f.rule == "X00"]
    assert [(f.key, f.path, f.severity) for f in failed] == [(rules._HEAVIEST, "", ceiling(rules._HEAVIEST))]
    assert f"{part} broke" in failed[0].evidence
    assert ("B09", "tests/conftest.py") in {(f.rule, f.path) for f in here}  # another stage's finding stands
    assert findings(partial(walk_shares.shared_out, count=2)) == here


def test_tasks_taken_by_children_come_back_in_order() -> None:
    parent = os.getpid()
    taken, told = os.pipe()

    def task(value: int) -> tuple[int, int]:
        if os.getpid() != parent:
            os.write(told, b"x")
        elif value == 0:  # this process waits until a child has taken one (bounded)
            assert select.select([taken], [], [], 30)[0], "no child took a task"
        return value, os.getpid()

    try:
        results = walk_shares.shared_out([partial(task, n) for n in range(8)], count=2)
    finally:
        os.close(taken)
        os.close(told)
    assert [value for value, _ in results] == list(range(8))
    assert {pid for _, pid in results} - {parent}  # some ran in the child


def test_a_stage_whose_process_fails_is_run_again_here() -> None:
    parent = os.getpid()
    taken, told = os.pipe()

    def dies_in_a_child(value: int) -> int:
        if os.getpid() != parent:
            os.write(told, b"x")  # a child took this one, and dies
            os._exit(3)
        if value == 0:  # this process waits until a child has taken one (bounded)
            assert select.select([taken], [], [], 30)[0], "no child took a task"
        return value

    try:
        assert walk_shares.shared_out([partial(dies_in_a_child, n) for n in range(6)], count=3) == list(range(6))
    finally:
        os.close(taken)
        os.close(told)


def test_tarballs_read_by_forked_processes_are_what_one_process_reads_and_are_kept(
        tmp_path: Path, packed: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    monkeypatch.setattr(pinned_archives, "FORK_AFTER", 2)  # two tarballs are shared out as hundreds are
    workspace, home = project(tmp_path, packed)
    npm(workspace, home / ".npm", "ci")
    integrity = next(iter(v["integrity"] for k, v in _lock(workspace).items() if k))
    unknown = "sha512-" + "A" * 86 + "=="
    one = {i: npm_cache.tarball([home / ".npm"], i) for i in (integrity, unknown)}

    def read(keys: list[str]) -> dict[str, Artifact | str]:
        got = pinned_archives.read_all(keys, lambda key: npm_cache.tarball([home / ".npm"], key), "tarball",
                                       "npm", known=tmp_path / "kept")
        fork_workers.finish_behind()  # the manifests are written by a process the audit does not wait for
        return got

    got = read([integrity, unknown])
    assert got == one
    artifact = one[integrity]
    assert not isinstance(artifact, str) and "index.js" in artifact.files
    kept = tmp_path / "kept" / "npm"
    assert len(list(kept.iterdir())) == 1  # what could not be read: not kept
    assert stat.S_IMODE(kept.stat().st_mode) == 0o700
    shutil.rmtree(home / ".npm")  # the manifest kept is enough: the pinned bytes' content does not change
    assert read([integrity])[integrity] == got[integrity]
    manifest = next(kept.iterdir())
    manifest.write_bytes(manifest.read_bytes()[:-3])  # damaged: read again, here from no cache at all
    again = read([integrity])[integrity]
    assert isinstance(again, str) and "not in the npm cache" in again


def _lock(workspace: Path) -> dict[str, dict[str, str]]:
    import json

    return json.loads((workspace / "package-lock.json").read_text())["packages"]  # type: ignore[no-any-return]
