"""The host keeps working while a session runs: git's own housekeeping (`git gc --auto` after a
commit on the host, a repack) rewrites .git/objects while the audit walks the tree. The audit tells
"my walk did not add up" from "the tree was changed": it walks again, treats git's object store as
git's, and fails closed only for what it really cannot account for, naming it."""

from __future__ import annotations

import io
import subprocess
from pathlib import Path

import pytest

from dejima.core.audit import rank
from dejima.orchestration import exit_audit
from dejima.ui.console import UI, plain_console

GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", "-c", "init.defaultBranch=main"]
# Sessions audited while the host repacks. Before the fix the end walk raced it in 1 to 6 cycles of 40
# on this machine: the deterministic tests in test_snapshot.py pin the same case (a directory whose
# ctime did not move lost an entry), these runs pin the whole path.


def housekeeping_loop(root: Path) -> str:
    """Shell for a host that keeps writing loose objects and packing them away (bounded)."""
    git = f"git -C '{root}'"
    return (f"i=0; while [ ! -e '{root}.stop' ] && [ $i -lt 2000 ]; do i=$((i+1)); "
            f"for j in 1 2 3 4 5 6 7 8; do echo \"$i $j\" | {git} hash-object -w --stdin >/dev/null; done; "
            f"{git} repack -q -d; {git} prune-packed; done")


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    subprocess.run([*GIT, "init", "-q", str(root)], check=True)
    for i in range(1500):
        directory = root / f"d{i % 40}"
        directory.mkdir(exist_ok=True)
        (directory / f"f{i}.txt").write_text(f"{i}\n")
    subprocess.run([*GIT, "-C", str(root), "add", "-A"], check=True)
    subprocess.run([*GIT, "-C", str(root), "commit", "-qm", "base"], check=True)
    return root


def test_a_host_repack_during_sessions_is_no_finding(repository: Path) -> None:
    """The host packs objects away while sessions start and end (the walks run alongside it)."""
    host = subprocess.Popen(["sh", "-c", housekeeping_loop(repository)])
    found = []
    try:
        for cycle in range(20):
            states = exit_audit.start(f"h{cycle}", [exit_audit.Mount("workspace", repository)])
            if cycle == 0:  # and a whole gc during a session
                subprocess.run([*GIT, "-C", str(repository), "gc", "-q", "--prune=now"], check=True)
            found += exit_audit.finish(f"h{cycle}", UI(plain_console(io.StringIO())), states=states)
    finally:
        Path(f"{repository}.stop").touch()
        host.wait(timeout=60)
    assert [(f.rule, f.severity, f.path, f.evidence) for f in found if rank(f.severity) >= rank("low")] == []


def test_what_the_walk_cannot_account_for_is_named_and_git_housekeeping_is_not(tmp_path: Path) -> None:
    root = tmp_path / "w"
    (root / ".git" / "objects").mkdir(parents=True)
    (root / "src").mkdir()
    (root / "src" / "app.py").write_text("x\n")
    state = exit_audit.capture(exit_audit.Mount("workspace", root))
    entry = state.snapshot["src/app.py"]
    # Entries in directories no walk lists: what a tree rewritten under the walk leaves behind.
    state.snapshot[".git/objects/pack-tmp/tmp_pack_1"] = entry._replace(path=".git/objects/pack-tmp/tmp_pack_1")
    state.snapshot["src/gone/planted.sh"] = entry._replace(path="src/gone/planted.sh")
    found, after = exit_audit.audit_mount(state, "s1")
    assert [(f.rule, f.severity) for f in found] == [("X00", "critical")]
    assert "src/gone/planted.sh" in found[0].evidence and ".git/objects" not in found[0].evidence
    assert "src/gone/planted.sh" not in after and "src/app.py" in after


def test_only_housekeeping_it_cannot_account_for_is_no_finding(tmp_path: Path) -> None:
    root = tmp_path / "w"
    (root / ".git" / "objects").mkdir(parents=True)
    state = exit_audit.capture(exit_audit.Mount("workspace", root))
    state.snapshot[".git/objects/ab/cdef"] = exit_audit.capture(exit_audit.Mount("workspace", root)).snapshot[
        ".git/objects"]._replace(path=".git/objects/ab/cdef", kind="file")
    found, _ = exit_audit.audit_mount(state, "s1")
    assert found == []
