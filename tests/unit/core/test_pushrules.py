"""Push rules, pure: commands and advertisements read as they arrive, the pack's commits (checked
against git itself) read within a budget, reports."""

from collections.abc import Callable
from pathlib import Path

import pytest

from dejima.core.packscan import PackError, PackScanner, apply_delta, commit_parents
from dejima.core.pushrules import (
    DELIM,
    FLUSH,
    MAX_COMMAND_BYTES,
    AdvertisementReader,
    Command,
    CommandReader,
    ForgeRefs,
    LsRefsReader,
    PktReader,
    PushError,
    PushPolicy,
    PushRequest,
    decide,
    ls_refs_request,
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


def feed_in_steps(feed: Callable[[bytes], object], body: bytes, step: int) -> tuple[int, object]:
    """Feed ``body`` ``step`` bytes at a time until ``feed`` answers something true: (bytes fed, answer)."""
    for at in range(0, len(body), step):
        answer = feed(body[at:at + step])
        if answer:
            return at + step, answer
    return len(body), None


@pytest.mark.parametrize("step", [1, 5, 10_000])
def test_a_v0_advertisement_names_head_from_its_first_line(step: int) -> None:
    first = pkt(b"# service=git-upload-pack\n") + FLUSH + pkt(
        f"{A} HEAD\0multi_ack symref=HEAD:refs/heads/trunk agent=x\n".encode())
    body = first + pkt(f"{A} refs/heads/trunk\n".encode()) + FLUSH
    reader = AdvertisementReader()
    fed, complete = feed_in_steps(reader.feed, body, step)
    assert complete and not reader.v2 and reader.refs == ForgeRefs("refs/heads/trunk", symbolic_known=False,
                                                                   default_tip=A)
    assert fed < len(first) + step  # read no further than the first ref line
    empty = AdvertisementReader()
    assert empty.feed(pkt(b"# service=git-upload-pack\n") + FLUSH + FLUSH) and empty.refs == ForgeRefs(
        None, symbolic_known=False)


@pytest.mark.parametrize("service_line", [True, False])
def test_a_v2_advertisement_says_so_with_its_object_format(service_line: bool) -> None:
    body = pkt(b"version 2\n") + pkt(b"agent=git/2.39\n") + pkt(b"ls-refs=unborn\n") + pkt(
        b"object-format=sha256\n") + FLUSH
    if service_line:  # http-backend leaves it out in v2; some forges send it all the same
        body = pkt(b"# service=git-upload-pack\n") + FLUSH + body
    reader = AdvertisementReader()
    assert feed_in_steps(reader.feed, body, 3)[1] and reader.v2 and reader.object_format == "sha256"
    assert reader.refs is None


def test_ls_refs_asks_for_head_and_the_pushed_refs_only() -> None:
    request = ls_refs_request(["refs/heads/b", "refs/heads/a", "refs/heads/a", "refs/heads/x\nref-prefix y"],
                              "sha1")
    assert PktReader.section(request.replace(DELIM, b"")) == [
        b"command=ls-refs\n", b"object-format=sha1\n", b"symrefs\n", b"ref-prefix HEAD\n",
        b"ref-prefix refs/heads/a\n", b"ref-prefix refs/heads/b\n"]
    assert DELIM in request


@pytest.mark.parametrize("step", [1, 7, 10_000])
def test_ls_refs_answer_gives_the_default_and_each_pushed_symbolic_ref(step: int) -> None:
    body = (pkt(f"{A} HEAD symref-target:refs/heads/main\n".encode()) + pkt(f"{A} refs/heads/main\n".encode())
            + pkt(f"{A} refs/heads/alias symref-target:refs/heads/main\n".encode())
            + pkt(f"{A} refs/heads/alias-other symref-target:refs/heads/main\n".encode())  # matched the prefix only
            + pkt(f"{B} refs/heads/plain\n".encode()) + FLUSH + b"0002")
    reader = LsRefsReader(["refs/heads/alias", "refs/heads/plain"])
    refs = feed_in_steps(reader.feed, body, step)[1]
    assert refs == ForgeRefs("refs/heads/main", {"refs/heads/alias": "refs/heads/main"})
    with pytest.raises(PushError):
        LsRefsReader([]).feed(pkt(b"not an id refs/heads/x\n") + FLUSH)


def test_decisions() -> None:
    policy = PushPolicy(("o/r",))
    request = PushRequest((Command(Z, A, "refs/heads/new"), Command(A, B, "refs/heads/ff"),
                           Command(B, A, "refs/heads/rewind"), Command(A, Z, "refs/heads/gone"),
                           Command(A, B, "refs/heads/main")), frozenset())
    parents: dict[str, tuple[str, ...]] = {B: (A,)}
    refs = ForgeRefs("refs/heads/main")
    before_pack = dict(decide(request, refs, policy, None))
    assert before_pack["refs/heads/rewind"] is None and before_pack["refs/heads/main"] is not None
    reasons = dict(decide(request, refs, policy, parents))
    assert reasons["refs/heads/new"] is None and reasons["refs/heads/ff"] is None
    assert "not a fast-forward" in str(reasons["refs/heads/rewind"])
    assert "deleting" in str(reasons["refs/heads/gone"]) and "default branch (main)" in str(reasons["refs/heads/main"])
    lenient = PushPolicy(("o/r",), allow_force=True, allow_default_branch=True)
    assert all(reason is None for _, reason in decide(request, refs, lenient, parents))


def test_the_default_branch_is_judged_on_what_the_forge_moves() -> None:
    policy = PushPolicy(("o/r",))
    request = PushRequest((Command(A, B, "refs/heads/alias"), Command(A, B, "refs/heads/feature"),
                           Command(Z, B, "refs/heads/new")), frozenset())
    through = dict(decide(request, ForgeRefs("refs/heads/main", {"refs/heads/alias": "refs/heads/MAIN"}), policy,
                          None))
    assert "refs/heads/alias is a symbolic ref to the default branch (main)" in str(through["refs/heads/alias"])
    assert through["refs/heads/feature"] is None and through["refs/heads/new"] is None
    v0 = dict(decide(request, ForgeRefs("refs/heads/main", symbolic_known=False, default_tip=A), policy, None))
    assert "may be an alias of main" in str(v0["refs/heads/alias"]) and "may be an alias" in str(
        v0["refs/heads/feature"])
    assert v0["refs/heads/new"] is None  # a new ref: no old value to stand anywhere
    elsewhere = dict(decide(request, ForgeRefs("refs/heads/main", symbolic_known=False, default_tip=B), policy, None))
    assert all(reason is None for reason in elsewhere.values())


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


T, P = "c" * 40, "d" * 40
WHO = b" t <t@t> 1 +0000"


@pytest.mark.parametrize("lines, parents", [
    ([f"tree {T}", f"parent {P}", f"parent {A}", "author" + WHO.decode(), "committer" + WHO.decode()], (P, A)),
    ([f"tree {T}", "author" + WHO.decode(), "committer" + WHO.decode(), "encoding x", "gpgsig a", f" parent {P}"],
     ()),
])
def test_commit_parents_are_the_lines_git_reads(lines: list[str], parents: tuple[str, ...]) -> None:
    content = ("\n".join(lines) + "\n\nmessage\nparent " + B + "\n").encode()  # the message is no header
    assert commit_parents(content) == parents
    assert commit_parents(("\n".join(lines) + "\n").encode()) == parents  # no message: no blank line needed


@pytest.mark.parametrize("content, reason", [
    (f"tree {T}\nauthor{WHO.decode()}\nparent {P}\ncommitter{WHO.decode()}\n\n", "committer line"),
    (f"tree {T}\nauthor{WHO.decode()}\ncommitter{WHO.decode()}\nparent {P}\n\n", "parent line out of its place"),
    (f"parent {P}\ntree {T}\nauthor{WHO.decode()}\ncommitter{WHO.decode()}\n\n", "tree line"),
    (f"tree {T}\ntree {T}\nauthor{WHO.decode()}\ncommitter{WHO.decode()}\n\n", "author"),
    (f"tree {T}\nparent {P.upper()}\nauthor{WHO.decode()}\ncommitter{WHO.decode()}\n\n", "lower-case hex"),
    (f"tree {T}\nparent {P} \nauthor{WHO.decode()}\ncommitter{WHO.decode()}\n\n", "lower-case hex"),
    (f"tree {T}\nauthor{WHO.decode()}\nauthor{WHO.decode()}\ncommitter{WHO.decode()}\n\n", "committer"),
    (f"tree {T}\nauthor{WHO.decode()}\ncommitter{WHO.decode()}", "newline"),
    (f"tree {T}\nauthor{WHO.decode()}\0\ncommitter{WHO.decode()}\n\n", "NUL"),
    (f"tree {T[:-1]}\nauthor{WHO.decode()}\ncommitter{WHO.decode()}\n\n", "tree line"),
])
def test_a_commit_header_git_would_read_otherwise_is_refused(content: str, reason: str) -> None:
    with pytest.raises(PackError, match=reason):
        commit_parents(content.encode())
