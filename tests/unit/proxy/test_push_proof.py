"""Hostile fast-forward proofs, against a forge that is real git (http-backend): a commit whose headers
git reads otherwise than a naive reader, commits stored as deltas (in the pack, or against what the forge
has), a symbolic ref on the forge that points at the default branch, commands split into tiny pieces.
Whatever the session sends, no existing branch is rewritten and the default branch does not move."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from dejima.core.pushrules import FLUSH, pkt
from dejima.proxy.records import read_records
from tests.unit.proxy.fakes import raw_exchange
from tests.unit.proxy.gitworld import World, commit, forge_refs, git, git_world
from tests.unit.proxy.packs import commit_id, delta, pack
from tests.unit.proxy.test_push_paths import assert_nothing_moved, basic, push_body, raw_push, rev

PUSH = "/r/github-git/owner/repo.git/git-receive-pack"
WHO = b"t <t@t> 1700000000 +0000"


@pytest.fixture
def kept(world: World) -> Iterator[tuple[World, str, str]]:
    """A branch ``keep`` on the forge, one commit past main: (world, keep's commit, main's tree)."""
    git("checkout", "-q", "-b", "keep", cwd=world.clone)
    commit(world, "kept")
    git("push", "-q", "origin", "keep", cwd=world.clone, env=world.env)
    yield world, rev(world, "keep"), rev(world, "origin/main^{tree}")


def assert_refused_unread(world: World, before: dict[str, str], answer: bytes) -> None:
    """Refused as a pack the proxy will not vouch for: 400 with the reason, the forge's refs unchanged (it
    got the pack without its trailing hash, so it stored nothing), a violation recorded."""
    assert answer.startswith(b"HTTP/1.1 400") and b"has a header git does not write" in answer, answer[:400]
    world.forge.settled()
    assert forge_refs(world.forge) == before
    assert "has a header git does not write" in str(read_records(world.proxy.violations))


def header(*lines: bytes) -> bytes:
    return b"\n".join(lines) + b"\n\nforged\n"


def forgeries(tree: str, old: str) -> dict[str, bytes]:
    """Commits whose ``parent`` git does not read where a line-by-line reader finds it: to git each is a
    root commit (or no commit at all), so a push of it over ``old`` rewrites the branch."""
    t, p = f"tree {tree}".encode(), f"parent {old}".encode()
    a, c = b"author " + WHO, b"committer " + WHO
    return {
        "parent after author": header(t, a, p, c),
        "parent after committer": header(t, a, c, p),
        "parent after another header": header(t, a, c, b"encoding UTF-8", p),
        "parent before tree": header(p, t, a, c),
        "tree twice": header(t, t, p, a, c),
        "parent in upper case": header(t, f"parent {old.upper()}".encode(), a, c),
    }


@pytest.mark.parametrize("name", list(forgeries("0" * 40, "1" * 40)))
def test_a_commit_header_git_reads_otherwise_proves_nothing(kept: tuple[World, str, str], name: str) -> None:
    world, old, tree = kept
    forged = forgeries(tree, old)[name]
    body = pkt(f"{old} {commit_id(forged)} refs/heads/keep\0report-status side-band-64k\n".encode()) + FLUSH + pack(
        [("commit", forged)])
    before = forge_refs(world.forge)
    assert_refused_unread(world, before, raw_push(world.proxy.port, PUSH, body, basic(world)))


def test_the_real_git_client_cannot_rewrite_a_branch_with_a_forged_parent(kept: tuple[World, str, str]) -> None:
    """The issue's own steps: `git push --force origin $F:refs/heads/keep`, F's parent after its author."""
    world, old, tree = kept
    forged = forgeries(tree, old)["parent after author"]
    made = subprocess.run(["git", "hash-object", "-t", "commit", "-w", "--literally", "--stdin"], cwd=world.clone,
                          input=forged, capture_output=True, check=True, timeout=60).stdout.decode().strip()
    before = forge_refs(world.forge)
    result = git("push", "--force", "origin", f"{made}:refs/heads/keep", cwd=world.clone, env=world.env, check=False)
    world.forge.settled()
    assert result.returncode != 0 and forge_refs(world.forge) == before, result.stderr
    assert "has a header git does not write" in str(read_records(world.proxy.violations))


def test_a_well_formed_commit_with_extra_headers_still_proves(kept: tuple[World, str, str]) -> None:
    """The control: tree, parent, author, committer, then headers git writes (encoding, a signature with
    its continuation lines) is an ordinary fast-forward, and the forge moves."""
    world, old, tree = kept
    signed = (f"tree {tree}\nparent {old}\nauthor ".encode() + WHO + b"\ncommitter " + WHO
              + b"\nencoding UTF-8\ngpgsig -----BEGIN PGP SIGNATURE-----\n parent " + old.encode()
              + b"\n -----END PGP SIGNATURE-----\n\nsigned\n")
    body = pkt(f"{old} {commit_id(signed)} refs/heads/keep\0report-status\n".encode()) + FLUSH + pack(
        [("commit", signed)])
    answer = raw_push(world.proxy.port, PUSH, body, basic(world))
    assert b"ok refs/heads/keep" in answer, answer[:400]
    assert forge_refs(world.forge)["owner/repo.git:refs/heads/keep"] == commit_id(signed)


def honest(tree: str, parent: str, message: str) -> bytes:
    return f"tree {tree}\nparent {parent}\nauthor ".encode() + WHO + b"\ncommitter " + WHO + f"\n\n{message}\n".encode()


def test_commits_stored_as_deltas_in_the_pack_are_read_as_git_reads_them(kept: tuple[World, str, str]) -> None:
    """OFS_DELTA: an honest commit stored as a delta of another in the pack proves; a forged header hidden
    in a delta's result proves nothing."""
    world, old, tree = kept
    first = honest(tree, old, "one")
    second = honest(tree, commit_id(first), "two")
    body = pkt(f"{old} {commit_id(second)} refs/heads/keep\0report-status\n".encode()) + FLUSH + pack(
        [("commit", first), ("ofs", 0, delta(first, second))])
    answer = raw_push(world.proxy.port, PUSH, body, basic(world))
    assert b"ok refs/heads/keep" in answer, answer[:400]
    moved = commit_id(second)
    forged = forgeries(tree, moved)["parent after committer"]
    body = pkt(f"{moved} {commit_id(forged)} refs/heads/keep\0report-status\n".encode()) + FLUSH + pack(
        [("commit", first), ("ofs", 0, delta(first, forged))])
    before = forge_refs(world.forge)
    assert_refused_unread(world, before, raw_push(world.proxy.port, PUSH, body, basic(world)))


def test_a_commit_stored_against_a_base_the_pack_lacks_proves_nothing(kept: tuple[World, str, str]) -> None:
    """REF_DELTA against the forge's own commit (a thin pack): git completes it from the forge, the proxy
    has no base to read it from, so the update cannot be proven and is refused, saying so."""
    world, old, tree = kept
    base = git("cat-file", "commit", old, cwd=world.clone).stdout.encode()
    forged = forgeries(tree, old)["parent after author"]
    body = pkt(f"{old} {commit_id(forged)} refs/heads/keep\0report-status\n".encode()) + FLUSH + pack(
        [("ref", old, delta(base, forged))])
    before = forge_refs(world.forge)
    answer = raw_push(world.proxy.port, PUSH, body, basic(world))
    assert b"ng refs/heads/keep not a fast-forward" in answer, answer[:400]
    assert_nothing_moved(world, before, answer)


def test_an_ordinary_thin_push_of_a_fast_forward_goes_through(kept: tuple[World, str, str]) -> None:
    """The control for the above: the real client's thin pack (trees and blobs against the forge's) proves."""
    world, _, _ = kept
    (world.clone / "kept").write_text("kept\n" * 200 + "changed\n")
    git("commit", "-q", "-am", "edit", cwd=world.clone)
    result = git("push", "--thin", "origin", "keep", cwd=world.clone, env=world.env, check=False)
    assert result.returncode == 0, result.stderr
    assert forge_refs(world.forge)["owner/repo.git:refs/heads/keep"] == rev(world, "HEAD")


def symref(world: World, name: str, target: str) -> None:
    git("symbolic-ref", name, target, cwd=world.forge.root / "owner" / "repo.git")


def push_to_an_alias_of_main(world: World) -> str:
    """A commit pushed to ``alias``, a symbolic ref to main on the forge; asserts nothing moved. git's
    stderr."""
    symref(world, "refs/heads/alias", "refs/heads/main")
    commit(world, "a")
    before = forge_refs(world.forge)
    result = git("push", "origin", "HEAD:refs/heads/alias", cwd=world.clone, env=world.env, check=False)
    world.forge.settled()
    assert result.returncode != 0 and forge_refs(world.forge) == before, result.stderr
    return result.stderr


def test_a_push_through_a_symbolic_ref_to_the_default_branch_moves_nothing(world: World) -> None:
    """git's receive-pack moves the target of a symbolic ref: pushing to ``alias`` moves main."""
    assert "refs/heads/alias is a symbolic ref to the default branch (main)" in push_to_an_alias_of_main(world)


def test_a_push_through_a_symbolic_ref_to_another_branch_is_judged_on_its_target(world: World) -> None:
    """The control: a symbolic ref to an ordinary branch moves that branch, a fast-forward proven."""
    git("push", "-q", "origin", "HEAD:refs/heads/feature", cwd=world.clone, env=world.env)
    symref(world, "refs/heads/alias", "refs/heads/feature")
    commit(world, "a")
    result = git("push", "origin", "HEAD:refs/heads/alias", cwd=world.clone, env=world.env, check=False)
    assert result.returncode == 0, result.stderr
    assert forge_refs(world.forge)["owner/repo.git:refs/heads/feature"] == rev(world, "HEAD")


@pytest.fixture
def old_forge(tmp_path: Path) -> Iterator[World]:
    """A forge that speaks only protocol v0: it never says which refs are symbolic, except HEAD."""
    with git_world(tmp_path, protocol_v2=False) as built:
        yield built


def test_a_forge_without_v2_cannot_hide_an_alias_of_the_default_branch(old_forge: World) -> None:
    """With no way to list symbolic refs, an update whose old value is the default branch's tip may be an
    alias of it: refused, saying why; an update of a branch elsewhere still goes through."""
    world = old_forge
    assert "does not say which refs are symbolic (git protocol v0)" in push_to_an_alias_of_main(world)
    git("push", "-q", "origin", "HEAD:refs/heads/feature", cwd=world.clone, env=world.env)
    commit(world, "b")
    result = git("push", "origin", "HEAD:refs/heads/feature", cwd=world.clone, env=world.env, check=False)
    assert result.returncode == 0, result.stderr


def chunked_push(port: int, credential: str, body: bytes, size: int) -> bytes:
    """The body in chunks of ``size`` bytes: the commands arrive split across many pieces."""
    chunks = b"".join(b"%x\r\n" % len(body[at:at + size]) + body[at:at + size] + b"\r\n"
                      for at in range(0, len(body), size))
    head = (f"POST {PUSH} HTTP/1.1\r\nHost: forge\r\n{credential}\r\n"
            "Content-Type: application/x-git-receive-pack-request\r\n"
            "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n")
    return raw_exchange(port, head.encode() + chunks + b"0\r\n\r\n")


@pytest.mark.parametrize("size", [1, 3])
def test_commands_split_across_pieces_are_judged_whole(world: World, size: int) -> None:
    commit(world, "a")
    to_main = push_body(world, rev(world, "origin/main"), rev(world, "HEAD"), "refs/heads/main", "origin/main")
    before = forge_refs(world.forge)
    answer = chunked_push(world.proxy.port, basic(world), to_main, size)
    assert b"ng refs/heads/main pushing to the default branch (main) is not allowed" in answer, answer[:400]
    assert_nothing_moved(world, before, answer)
    topic = push_body(world, "0" * 40, rev(world, "HEAD"), "refs/heads/topic", "origin/main")
    answer = chunked_push(world.proxy.port, basic(world), topic, size)
    assert b"ok refs/heads/topic" in answer, answer[:400]


def test_a_refused_push_closes_the_connection_its_client_asked_to_close(world: World) -> None:
    """A client that reads to the end (Connection: close) gets the report, then the end of the stream."""
    import socket

    commit(world, "a")
    body = push_body(world, rev(world, "origin/main"), rev(world, "HEAD"), "refs/heads/main", "origin/main")
    head = (f"POST {PUSH} HTTP/1.1\r\nHost: forge\r\n{basic(world)}\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n")
    with socket.create_connection(("127.0.0.1", world.proxy.port), timeout=20) as sock:
        sock.sendall(head.encode() + body)
        answer = b""
        while chunk := sock.recv(65536):  # a proxy that kept the connection open times out here
            answer += chunk
    assert b"ng refs/heads/main" in answer and b"Connection: close" in answer
