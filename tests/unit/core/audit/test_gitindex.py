"""The index reader against indexes git itself writes, in every version."""

import subprocess
from pathlib import Path

import pytest

from dejima.core.audit.gitindex import GitIndexError, hidden_paths


@pytest.mark.parametrize("version", [2, 3, 4])
def test_flags_are_read_from_a_real_index(tmp_path: Path, version: int) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    for name in ("a.txt", "dir/b.txt", "dir/sub/c.txt", "d" * 120 + ".txt"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(name)
    git = ["git", "-C", str(tmp_path)]
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "update-index", "--index-version", str(version)], check=True)
    assert hidden_paths((tmp_path / ".git" / "index").read_bytes()) == {}
    subprocess.run([*git, "update-index", "--assume-unchanged", "dir/b.txt"], check=True)
    subprocess.run([*git, "update-index", "--skip-worktree", "dir/sub/c.txt"], check=True)
    assert hidden_paths((tmp_path / ".git" / "index").read_bytes()) == {
        "dir/b.txt": "assume-unchanged", "dir/sub/c.txt": "skip-worktree"}


@pytest.mark.parametrize("data", [b"", b"DIRC", b"DIRC\0\0\0\x09\0\0\0\0", b"DIRC\0\0\0\x02\0\0\0\x05" + b"\0" * 30])
def test_a_broken_index_is_an_error(data: bytes) -> None:
    with pytest.raises(GitIndexError):
        hidden_paths(data)
