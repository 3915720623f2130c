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


@pytest.mark.parametrize("version", [2, 3, 4])
def test_a_path_longer_than_the_length_field_keeps_the_entries_after_it_in_step(tmp_path: Path, version: int) -> None:
    # The flags hold a name's length up to 0xFFF; a longer one is read up to its NUL, as git does.
    # (An index entry needs no file: one this long could not be created under a temporary directory.)
    git = ["git", "-C", str(tmp_path)]
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    blob = subprocess.run([*git, "hash-object", "-w", "--stdin"], input=b"x", capture_output=True,
                          check=True).stdout.decode().strip()
    deep = "/".join(["d" * 250] * 17) + "/a.txt"  # 4,256 bytes
    for name in (deep, "e.txt", "z.txt"):
        subprocess.run([*git, "update-index", "--add", "--cacheinfo", f"100644,{blob},{name}"], check=True)
    subprocess.run([*git, "update-index", "--index-version", str(version)], check=True)
    assert hidden_paths((tmp_path / ".git" / "index").read_bytes()) == {}
    subprocess.run([*git, "update-index", "--assume-unchanged", deep, "z.txt"], check=True)
    assert hidden_paths((tmp_path / ".git" / "index").read_bytes()) == {
        deep: "assume-unchanged", "z.txt": "assume-unchanged"}
