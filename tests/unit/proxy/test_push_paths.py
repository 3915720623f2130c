"""Hostile pushes toward a forge that decodes paths (as CGI's PATH_INFO is decoded): a session with its
own HTTP client spells the push's path every way a forge could read as a push. Whatever the spelling,
the push is judged by the push rules or refused, a violation says so, and no ref on the forge moves."""

from __future__ import annotations

import base64
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from dejima.core.pushrules import FLUSH, PushPolicy, pkt
from dejima.proxy.gitpush import GitPushGuard
from dejima.proxy.records import read_records
from dejima.proxy.routes import RouteSpec
from tests.unit.proxy.fakes import fixed, raw_exchange, route, running_proxy
from tests.unit.proxy.gitworld import TOKEN, World, commit, fake_forge, forge_refs, git, git_world

ZERO = "0" * 40


def rev(world: World, name: str) -> str:
    return git("rev-parse", name, cwd=world.clone).stdout.strip()


def push_body(world: World, old: str, new: str, ref: str, known: str) -> bytes:
    """A receive-pack request: the command, then a pack of what ``new`` has that ``known`` has not."""
    pack = subprocess.run(["git", "pack-objects", "--stdout", "--revs", "-q"], cwd=world.clone,
                          input=f"{new}\n^{known}\n".encode(), capture_output=True, check=True, timeout=60).stdout
    return pkt(f"{old} {new} {ref}\0report-status side-band-64k\n".encode()) + FLUSH + pack


def raw_push(port: int, target: str, body: bytes, credential: str) -> bytes:
    head = (f"POST {target} HTTP/1.1\r\nHost: forge\r\n{credential}\r\n"
            "Content-Type: application/x-git-receive-pack-request\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n")
    return raw_exchange(port, head.encode() + body)


def basic(world: World) -> str:
    placeholder = world.proxy.routes()["github-git"].placeholder
    return "Authorization: Basic " + base64.b64encode(f"x-access-token:{placeholder}".encode()).decode()


def assert_nothing_moved(world: World, before: dict[str, str], answer: bytes) -> None:
    world.forge.settled()  # what reached the forge was acted on: a push it completed would show now
    assert forge_refs(world.forge) == before, answer[:300]
    assert not any(p.endswith("git-receive-pack") for p in world.forge.paths_seen[-1:]) or answer.startswith(
        b"HTTP/1.1 200") and b"ng refs/" in answer
    kinds = {v["kind"] for v in read_records(world.proxy.violations)}
    assert kinds & {"push-refused", "ambiguous-request"}, answer[:300]


@pytest.mark.parametrize("service", [
    "git%2Dreceive%2Dpack",  # an encoded hyphen: the forge decodes it back
    "%67it-receive-pack",
    "info/../git-receive-pack",
    "info/%2e%2e/git-receive-pack",
    "./git-receive-pack",
    "GIT-RECEIVE-PACK",
    "git-receive-pack/",
])
def test_a_push_to_the_default_branch_in_any_spelling_moves_nothing(world: World, service: str) -> None:
    commit(world, "a")
    body = push_body(world, rev(world, "origin/main"), rev(world, "HEAD"), "refs/heads/main", "origin/main")
    before = forge_refs(world.forge)
    answer = raw_push(world.proxy.port, f"/r/github-git/owner/repo.git/{service}", body, basic(world))
    assert b"ng refs/heads/main pushing to the default branch (main) is not allowed" in answer
    assert_nothing_moved(world, before, answer)


@pytest.mark.parametrize("target", [
    "/r/github-git/other/repo.git/git%2Dreceive%2Dpack",
    "/r/github-git/%6Fther/repo.git/git-receive-pack",
    "/r/github-git/owner/../other/repo.git/git-receive-pack",
    "/r/github-git/owner/repo.git/%2e%2e/%2e%2e/other/repo.git/git-receive-pack",
    "/r/github-git//other//repo.git/git-receive-pack",
])
def test_a_push_to_another_repository_in_any_spelling_moves_nothing(world: World, target: str) -> None:
    commit(world, "a")
    body = push_body(world, ZERO, rev(world, "HEAD"), "refs/heads/planted", "origin/main")
    before = forge_refs(world.forge)
    answer = raw_push(world.proxy.port, target, body, basic(world))
    assert b"403 Forbidden" in answer and b"pushes through this session go only to owner/repo, not other/repo" in answer
    assert_nothing_moved(world, before, answer)


@pytest.mark.parametrize("target, reason", [
    ("/r/github-git/other%2Frepo.git/git-receive-pack", b"an encoded slash (%2F)"),
    ("/r/github-git/owner/repo.git%2Fgit-receive-pack", b"an encoded slash (%2F)"),
    ("/r/github-git/owner/repo.git/git%252Dreceive-pack", b"an encoded percent sign (%25)"),
    ("/r/github-git/owner/repo.git/git-receive-pack;x", b"a semicolon"),
    ("/r/github-git/owner/repo.git\\git-receive-pack", b"a backslash"),
    ("/r/github-git/owner/repo.git/git-receive-pack/..%2f..%2fother", b"an encoded slash"),
])
def test_what_the_proxy_cannot_read_one_way_is_refused_and_recorded(world: World, target: str,
                                                                   reason: bytes) -> None:
    commit(world, "a")
    body = push_body(world, ZERO, rev(world, "HEAD"), "refs/heads/x", "origin/main")
    before = forge_refs(world.forge)
    seen = len(world.forge.paths_seen)
    answer = raw_push(world.proxy.port, target, body, basic(world))
    assert b"403 Forbidden" in answer and reason in answer
    assert forge_refs(world.forge) == before and len(world.forge.paths_seen) == seen  # nothing reached the forge
    assert [v["kind"] for v in read_records(world.proxy.violations)] == ["ambiguous-request"]


def test_a_force_push_in_an_encoded_spelling_is_judged_on_its_pack(world: World) -> None:
    git("checkout", "-q", "-b", "feature", cwd=world.clone)
    commit(world, "a")
    git("push", "-q", "origin", "feature", cwd=world.clone, env=world.env)
    old = rev(world, "HEAD")
    git("reset", "-q", "--hard", "HEAD~1", cwd=world.clone)
    commit(world, "rewritten")
    body = push_body(world, old, rev(world, "HEAD"), "refs/heads/feature", "origin/main")
    before = forge_refs(world.forge)
    answer = raw_push(world.proxy.port, "/r/github-git/owner/repo.git/git%2Dreceive%2Dpack", body, basic(world))
    assert b"ng refs/heads/feature not a fast-forward" in answer
    assert_nothing_moved(world, before, answer)


def test_the_forge_gets_the_canonical_path_of_an_allowed_push(world: World) -> None:
    commit(world, "a")
    body = push_body(world, ZERO, rev(world, "HEAD"), "refs/heads/topic", "origin/main")
    answer = raw_push(world.proxy.port, "/r/github-git//owner/./repo%2Egit/git%2Dreceive%2Dpack", body, basic(world))
    assert answer.startswith(b"HTTP/1.1 200") and b"ok refs/heads/topic" in answer
    assert world.forge.paths_seen[-1] == "/owner/repo.git/git-receive-pack"
    assert forge_refs(world.forge)["owner/repo.git:refs/heads/topic"] == rev(world, "HEAD")


def test_a_webdav_push_is_refused_on_a_git_route(world: World) -> None:
    request = (f"MOVE /r/github-git/owner/repo.git/refs/heads/x HTTP/1.1\r\nHost: forge\r\n{basic(world)}\r\n"
               "Destination: /owner/repo.git/refs/heads/main\r\nConnection: close\r\n\r\n")
    answer = raw_exchange(world.proxy.port, request.encode())
    assert b"403 Forbidden" in answer and b"WebDAV" in answer


@pytest.fixture
def two_routes(tmp_path: Path) -> Iterator[tuple[World, str]]:
    """The forge reached by its git route and by an API-style route with another header (gitlab-api
    shares gitlab.com with gitlab-git): a push must not slip through the route without push rules."""
    with fake_forge(tmp_path) as forge:
        git_route = route("forge-git", forge.url, "authorization", "Basic", "x-access-token", "github.com")
        api_route = route("forge-api", forge.url, "private-token", "raw", None, "gitlab.com")
        specs = [RouteSpec(git_route, fixed(TOKEN), GitPushGuard(PushPolicy(("owner/repo",)))),
                 RouteSpec(api_route, fixed(TOKEN))]
        with running_proxy(tmp_path, specs) as proxy:
            clone = tmp_path / "work"
            git("clone", "-q", f"{forge.url}/owner/repo.git", str(clone))
            yield World(forge, proxy, {}, clone), f"Private-Token: {api_route.placeholder}"


@pytest.mark.parametrize("service", ["git-receive-pack", "git%2Dreceive%2Dpack", "Git-Receive-Pack",
                                     "git%252Dreceive%252Dpack"])
def test_a_push_through_a_route_without_push_rules_is_refused(two_routes: tuple[World, str], service: str) -> None:
    forge_world, credential = two_routes
    commit(forge_world, "a")
    body = push_body(forge_world, rev(forge_world, "origin/main"), rev(forge_world, "HEAD"), "refs/heads/main",
                     "origin/main")
    before, seen = forge_refs(forge_world.forge), len(forge_world.forge.paths_seen)
    answer = raw_push(forge_world.proxy.port, f"/r/forge-api/owner/repo.git/{service}", body, credential)
    assert b"403 Forbidden" in answer and b"git pushes go through the forge's git route" in answer
    assert forge_refs(forge_world.forge) == before and len(forge_world.forge.paths_seen) == seen
    assert [v["kind"] for v in read_records(forge_world.proxy.violations)] == ["push-refused"]


def feature_update(world: World) -> tuple[str, bytes]:
    """A pushed feature branch and a well-formed update of it (one commit on top): (old, body)."""
    git("checkout", "-q", "-b", "feature", cwd=world.clone)
    commit(world, "a")
    git("push", "-q", "origin", "feature", cwd=world.clone, env=world.env)
    old = rev(world, "HEAD")
    commit(world, "b")
    return old, push_body(world, old, rev(world, "HEAD"), "refs/heads/feature", old)


@pytest.mark.parametrize("spoil, reason", [
    (lambda body: body[:-60] + b"\x00" * 40 + body[-20:], b"does not inflate"),  # spoiled before its end
    (lambda body: body + b"more", b"data after the end of the pack"),
    (lambda body: body[:-21], b"the pack ended early"),
])
def test_a_pack_the_proxy_cannot_read_never_completes_upstream(world: World, spoil: object, reason: bytes) -> None:
    old, body = feature_update(world)
    before = forge_refs(world.forge)
    answer = raw_push(world.proxy.port, "/r/github-git/owner/repo.git/git-receive-pack", spoil(body),  # type: ignore[operator]
                      basic(world))
    assert answer.startswith(b"HTTP/1.1 400") and reason in answer, answer[:400]
    assert forge_refs(world.forge) == before and forge_refs(world.forge)["owner/repo.git:refs/heads/feature"] == old


def test_a_compressed_push_is_refused(world: World) -> None:
    import gzip

    _, body = feature_update(world)
    head = (f"POST /r/github-git/owner/repo.git/git-receive-pack HTTP/1.1\r\nHost: forge\r\n{basic(world)}\r\n"
            f"Content-Encoding: gzip\r\nContent-Length: {len(gzip.compress(body))}\r\nConnection: close\r\n\r\n")
    answer = raw_exchange(world.proxy.port, head.encode() + gzip.compress(body))
    assert b"403 Forbidden" in answer and b"a compressed push body cannot be checked" in answer


def test_push_options_pass_with_the_push(world: World) -> None:
    git("config", "receive.advertisePushOptions", "true", cwd=world.forge.root / "owner" / "repo.git")
    git("checkout", "-q", "-b", "topic", cwd=world.clone)
    commit(world, "a")
    created = git("push", "-o", "ci.skip", "origin", "topic", cwd=world.clone, env=world.env, check=False)
    commit(world, "b")
    updated = git("push", "-o", "ci.skip", "-o", "merge_request.create", "origin", "topic", cwd=world.clone,
                  env=world.env, check=False)  # an update: its pack is read to prove the fast-forward
    assert created.returncode == 0 and updated.returncode == 0, updated.stderr
    assert forge_refs(world.forge)["owner/repo.git:refs/heads/topic"] == rev(world, "HEAD")


@pytest.fixture
def starved(tmp_path: Path) -> Iterator[World]:
    """The world with a budget that holds a push's first read but not a long run of commits."""
    with git_world(tmp_path, memory_budget=512 * 1024) as built:
        yield built


def test_a_push_whose_commits_outgrow_the_budget_is_refused_saying_so(starved: World) -> None:
    git("checkout", "-q", "-b", "feature", cwd=starved.clone)
    commit(starved, "a")
    git("push", "-q", "origin", "feature", cwd=starved.clone, env=starved.env)
    stream = "".join(  # ~4,000 commits on top (more than 512 KiB to keep), the first from the pushed tip
        f"commit refs/heads/feature\ncommitter a <a@a> {n} +0000\ndata 21\ncommit number {n:07d}\n"
        + ("from refs/heads/feature^0\n" if n == 0 else "") + "\n" for n in range(4000))
    subprocess.run(["git", "fast-import", "--quiet"], cwd=starved.clone, input=stream.encode(), check=True,
                   capture_output=True, timeout=60)
    git("reset", "-q", "--hard", "feature", cwd=starved.clone)
    before = forge_refs(starved.forge)
    result = git("push", "origin", "feature", cwd=starved.clone, env=starved.env, check=False)
    assert result.returncode != 0 and "carried more commits than dejima keeps to prove it (512 KiB)" in result.stderr
    assert forge_refs(starved.forge) == before


def test_a_push_past_the_size_limit_never_completes_upstream(tmp_path: Path) -> None:
    with git_world(tmp_path, max_push_bytes=256 * 1024) as small:
        old, _ = feature_update(small)
        (small.clone / "blob").write_bytes(os.urandom(512 * 1024))
        git("add", "blob", cwd=small.clone)
        git("commit", "-q", "-m", "big", cwd=small.clone)
        before = forge_refs(small.forge)
        result = git("push", "origin", "feature", cwd=small.clone, env=small.env, check=False)
        assert result.returncode != 0
        assert forge_refs(small.forge) == before and before["owner/repo.git:refs/heads/feature"] == old
        assert "a push larger than 256 KiB" in json.dumps(read_records(small.proxy.violations))
