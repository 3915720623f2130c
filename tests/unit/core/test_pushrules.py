"""Push rules, pure: commands and advertisements read as they arrive, the pack's commits (checked
against git itself) read within a budget, reports."""

from pathlib import Path

import pytest

from dejima.core.packscan import PackError, PackScanner, apply_delta
from dejima.core.pushrules import (
    FLUSH,
    MAX_COMMAND_BYTES,
    AdvertisementReader,
    Command,
    CommandReader,
    PktReader,
    PushError,
    PushPolicy,
    PushRequest,
    decide,
    pkt,
    report,
)
from tests.unit.proxy.gitworld import git

A, B, Z = "a" * 40, "b" * 40, "0" * 40


def test_repositories() -> None:
    policy = PushPolicy(("Owner/Repo",))
    assert policy.allows_repository("owner/repo.git") and not policy.allows_repository("owner/other")


def read_commands(body: bytes, step: int) -> CommandReader:
    """Feed ``body`` ``step`` bytes at a time, as a slow client would send it."""
    reader = CommandReader()
    for at in range(0, len(body), step):
        if reader.feed(body[at:at + step]):
            break
    return reader


@pytest.mark.parametrize("step", [1, 7, 10_000])
def test_commands_and_capabilities_read_as_they_arrive(step: int) -> None:
    head = pkt(f"{Z} {A} refs/heads/x\0report-status side-band-64k\n".encode()) + pkt(
        f"{A} {B} refs/heads/y\n".encode()) + FLUSH
    body = head + b"PACK..."
    reader = read_commands(body, step)
    assert reader.request is not None
    assert reader.request.commands == (Command(Z, A, "refs/heads/x"), Command(A, B, "refs/heads/y"))
    assert "side-band-64k" in reader.request.capabilities
    fed = -(-len(head) // step) * step  # the pieces fed until the head was complete
    assert reader.rest == body[len(head):fed]


def test_push_options_are_read_before_the_pack() -> None:
    body = pkt(f"{Z} {A} refs/heads/x\0report-status push-options\n".encode()) + FLUSH + pkt(
        b"merge_request.create\n") + FLUSH + b"PACK"
    reader = read_commands(body, len(body))
    assert reader.request is not None and reader.rest == b"PACK"


def test_a_lone_flush_is_the_probe() -> None:
    reader = read_commands(FLUSH, 4)
    assert reader.probe and reader.request is None and reader.rest == b""


def test_bad_commands_are_refused() -> None:
    for bad in (pkt(b"nonsense\n") + FLUSH, b"zz00", pkt(b"push-cert\0x\n") + FLUSH, b"0003",
                pkt(f"{Z} {'c' * 64} refs/heads/x\n".encode()) + pkt(f"{Z} {A} refs/heads/y\n".encode()) + FLUSH):
        with pytest.raises(PushError):
            read_commands(bad, len(bad))


def test_commands_are_bounded_whatever_the_pieces() -> None:
    line = pkt(f"{Z} {A} refs/heads/{'x' * 900}\n".encode())
    reader = CommandReader()
    with pytest.raises(PushError, match="larger than"):
        for _ in range(MAX_COMMAND_BYTES // len(line) + 2):
            reader.feed(line)


@pytest.mark.parametrize("step", [1, 5, 10_000])
def test_advertisement_names_head_from_its_first_line(step: int) -> None:
    body = pkt(b"# service=git-upload-pack\n") + FLUSH + pkt(
        f"{A} HEAD\0multi_ack symref=HEAD:refs/heads/trunk agent=x\n".encode()) + pkt(
        f"{A} refs/heads/trunk\n".encode()) + FLUSH
    reader = AdvertisementReader()
    results = [reader.feed(body[at:at + step]) for at in range(0, len(body), step)]
    complete_at = next(i for i, (complete, _) in enumerate(results) if complete)
    assert results[complete_at] == (True, "refs/heads/trunk")
    assert complete_at * step < len(body) - len(pkt(f"{A} refs/heads/trunk\n".encode()))  # read no further
    empty = AdvertisementReader()
    assert empty.feed(pkt(b"# service=git-upload-pack\n") + FLUSH + FLUSH) == (True, None)


def test_decisions() -> None:
    policy = PushPolicy(("o/r",))
    request = PushRequest((Command(Z, A, "refs/heads/new"), Command(A, B, "refs/heads/ff"),
                           Command(B, A, "refs/heads/rewind"), Command(A, Z, "refs/heads/gone"),
                           Command(A, B, "refs/heads/main")), frozenset())
    parents: dict[str, tuple[str, ...]] = {B: (A,)}
    before_pack = dict(decide(request, "refs/heads/main", policy, None))
    assert before_pack["refs/heads/rewind"] is None and before_pack["refs/heads/main"] is not None
    reasons = dict(decide(request, "refs/heads/main", policy, parents))
    assert reasons["refs/heads/new"] is None and reasons["refs/heads/ff"] is None
    assert "not a fast-forward" in str(reasons["refs/heads/rewind"])
    assert "deleting" in str(reasons["refs/heads/gone"]) and "default branch (main)" in str(reasons["refs/heads/main"])
    lenient = PushPolicy(("o/r",), allow_force=True, allow_default_branch=True)
    assert all(reason is None for _, reason in decide(request, "refs/heads/main", lenient, parents))


def test_report_in_side_band_and_plain() -> None:
    results = [("refs/heads/a", "no"), ("refs/heads/b", None)]
    plain = report(results, frozenset({"report-status"}))
    lines = PktReader.section(plain)
    assert lines == [b"unpack ok\n", b"ng refs/heads/a no\n",
                     b"ng refs/heads/b not pushed: another ref of this push broke a dejima push rule\n"]
    banded = report(results, frozenset({"report-status", "side-band-64k"}))
    packets = PktReader.section(banded)
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
    for step in (1, 13, len(pack)):  # byte by byte, in odd pieces, whole
        scanner = scan(pack, step)
        assert set(scanner.parents) == set(revs) and not scanner.incomplete
        for rev in revs:
            expected = git("rev-parse", f"{rev}^@", cwd=repo).stdout.split()
            assert list(scanner.parents[rev]) == expected
    for bad in (b"NOTAPACK" + b"\0" * 8, pack + b"x"):
        with pytest.raises(PackError):
            scan(bad, len(bad))
    with pytest.raises(PackError, match="ended early"):
        scan(pack[:-1], len(pack)).finish()


def scan(pack: bytes, step: int, budget: int = 1 << 30) -> PackScanner:
    left = [budget]

    def reserve(size: int) -> bool:
        left[0] -= size
        return left[0] >= 0

    scanner = PackScanner(False, reserve)
    for at in range(0, len(pack), step):
        scanner.feed(pack[at:at + step])
    return scanner


def test_a_pack_keeps_no_more_than_its_budget(tmp_path: Path) -> None:
    repo = tmp_path / "r"
    git("init", "-q", "-b", "main", str(repo))
    (repo / "blob").write_bytes(bytes(range(256)) * 4096)  # 1 MiB of blob: inflated, never kept
    git("add", "blob", cwd=repo)
    for index in range(20):
        git("commit", "-q", "--allow-empty", "-m", f"commit {index}", cwd=repo)
    pack = git_pack(repo, "HEAD")
    whole = scan(pack, 4096)
    assert len(whole.parents) == 20 and whole.held < 20 * 1024  # commits only, not the blob
    starved = scan(pack, 4096, budget=whole.held // 2)
    assert starved.incomplete and 0 < len(starved.parents) < 20 and starved.held <= whole.held // 2
    assert starved.done  # it read the pack to its end all the same


def git_pack(repo: Path, rev: str) -> bytes:
    import subprocess

    return subprocess.run(["git", "pack-objects", "--stdout", "--revs", "--window=50", "--depth=50"], cwd=repo,
                          input=f"{rev}\n".encode(), capture_output=True, check=True).stdout


def test_apply_delta() -> None:
    base = b"hello world"
    # sizes 11 -> 7; copy 6 bytes from offset 0 ("hello "); insert 1 byte "!"
    delta = bytes([11, 7]) + bytes([0x80 | 0x10, 6]) + bytes([1]) + b"!"
    assert apply_delta(base, delta) == b"hello !"
