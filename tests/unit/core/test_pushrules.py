"""Push rules, pure: commands, advertisements, the pack's commits (checked against git itself), reports."""

from pathlib import Path

import pytest

from dejima.core.pushrules import (
    FLUSH,
    Command,
    PushError,
    PushPolicy,
    PushRequest,
    apply_delta,
    decide,
    git_request,
    pack_commits,
    parse_advertisement,
    parse_push_request,
    pkt,
    pkt_lines,
    report,
)
from tests.unit.proxy.gitworld import git

A, B, Z = "a" * 40, "b" * 40, "0" * 40


def test_request_kinds_and_repositories() -> None:
    assert git_request("/o/r.git/info/refs?service=git-receive-pack") == ("advertise", "/o/r.git")
    assert git_request("/o/r.git/git-receive-pack") == ("push", "/o/r.git")
    assert git_request("/o/r.git/info/refs?service=git-upload-pack") is None
    policy = PushPolicy(("Owner/Repo",))
    assert policy.allows_repository("/owner/repo.git") and not policy.allows_repository("/owner/other")


def test_commands_and_capabilities() -> None:
    body = pkt(f"{Z} {A} refs/heads/x\0report-status side-band-64k\n".encode()) + pkt(
        f"{A} {B} refs/heads/y\n".encode()) + FLUSH + b"PACK"
    request = parse_push_request(body)
    assert request.commands == (Command(Z, A, "refs/heads/x"), Command(A, B, "refs/heads/y"))
    assert "side-band-64k" in request.capabilities and request.pack == b"PACK"
    for bad in (FLUSH, pkt(b"nonsense\n") + FLUSH, b"00", pkt(b"push-cert\0x\n") + FLUSH):
        with pytest.raises(PushError):
            parse_push_request(bad)


def test_advertisement_names_head() -> None:
    body = pkt(b"# service=git-upload-pack\n") + FLUSH + pkt(
        f"{A} HEAD\0multi_ack symref=HEAD:refs/heads/trunk agent=x\n".encode()) + pkt(
        f"{A} refs/heads/trunk\n".encode()) + FLUSH
    refs, head = parse_advertisement(body)
    assert head == "refs/heads/trunk" and refs["refs/heads/trunk"] == A


def test_decisions() -> None:
    policy = PushPolicy(("o/r",))
    request = PushRequest((Command(Z, A, "refs/heads/new"), Command(A, B, "refs/heads/ff"),
                           Command(B, A, "refs/heads/rewind"), Command(A, Z, "refs/heads/gone"),
                           Command(A, B, "refs/heads/main")), frozenset(), b"")
    parents = {B: (A,)}
    reasons = dict(decide(request, "refs/heads/main", policy, parents))
    assert reasons["refs/heads/new"] is None and reasons["refs/heads/ff"] is None
    assert "not a fast-forward" in str(reasons["refs/heads/rewind"])
    assert "deleting" in str(reasons["refs/heads/gone"]) and "default branch (main)" in str(reasons["refs/heads/main"])
    lenient = PushPolicy(("o/r",), allow_force=True, allow_default_branch=True)
    assert all(reason is None for _, reason in decide(request, "refs/heads/main", lenient, parents))


def test_report_in_side_band_and_plain() -> None:
    results = [("refs/heads/a", "no"), ("refs/heads/b", None)]
    plain = report(results, frozenset({"report-status"}))
    lines, _ = pkt_lines(plain)
    assert lines == [b"unpack ok\n", b"ng refs/heads/a no\n",
                     b"ng refs/heads/b not pushed: another ref of this push broke a dejima push rule\n"]
    banded = report(results, frozenset({"report-status", "side-band-64k"}))
    packets, _ = pkt_lines(banded)
    assert packets[0] == b"\x02dejima: refs/heads/a: no\n" and packets[1] == b"\x01" + plain


def test_pack_commits_match_git(tmp_path: Path) -> None:
    repo = tmp_path / "r"
    git("init", "-q", "-b", "main", str(repo))
    for index in range(6):  # similar commit messages, so that git may store commits as deltas
        (repo / "f").write_text(f"{index}\n" * 50)
        git("add", "f", cwd=repo)
        git("commit", "-q", "-m", "the same long message line " * 20 + str(index), cwd=repo)
    git("merge", "-q", "--no-ff", "-m", "m", "HEAD~2", cwd=repo, check=False)
    revs = git("rev-list", "--all", cwd=repo).stdout.split()
    pack = git_pack(repo, "HEAD")
    parents = pack_commits(pack)
    assert set(parents) == set(revs)
    for rev in revs:
        expected = git("rev-parse", f"{rev}^@", cwd=repo).stdout.split()
        assert list(parents[rev]) == expected
    with pytest.raises(PushError):
        pack_commits(b"NOTAPACK" + b"\0" * 8)


def git_pack(repo: Path, rev: str) -> bytes:
    import subprocess

    return subprocess.run(["git", "pack-objects", "--stdout", "--revs", "--window=50", "--depth=50"], cwd=repo,
                          input=f"{rev}\n".encode(), capture_output=True, check=True).stdout


def test_apply_delta() -> None:
    base = b"hello world"
    # sizes 11 -> 7; copy 6 bytes from offset 0 ("hello "); insert 1 byte "!"
    delta = bytes([11, 7]) + bytes([0x80 | 0x10, 6]) + bytes([1]) + b"!"
    assert apply_delta(base, delta) == b"hello !"
