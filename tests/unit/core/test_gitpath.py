"""A git route's request read one way only: every encoded, dotted, doubled or repeated form of a push
is either recognised as that push (and made canonical) or refused; nothing passes as something else."""

from __future__ import annotations

import pytest

from dejima.core.gitpath import GitTarget, Unjudgeable, judge_git_target, mentions_push

PUSH = GitTarget("/owner/repo.git/git-receive-pack", "push", "owner/repo.git")


@pytest.mark.parametrize("tail", [
    "/owner/repo.git/git-receive-pack",
    "/owner/repo.git/git%2Dreceive%2Dpack",  # an encoded hyphen
    "/owner/repo.git/%67%69%74-receive-pack",  # encoded letters
    "/owner/repo%2Egit/git-receive-pack",  # an encoded dot
    "//owner///repo.git//git-receive-pack",  # duplicate slashes
    "/owner/./repo.git/./git-receive-pack",  # dot segments
    "/owner/repo.git/info/../git-receive-pack",
    "/owner/repo.git/info/%2e%2e/git-receive-pack",  # an encoded dot-dot
    "/x/../owner/repo.git/git-receive-pack",
    "/owner/repo.git/git-receive-pack/",  # a trailing slash
    "/owner/repo.git/git-receive-pack/.",
])
def test_every_spelling_of_a_push_is_that_push(tail: str) -> None:
    assert judge_git_target("POST", tail) == PUSH


@pytest.mark.parametrize("tail, repository", [
    ("/owner/repo.git/GIT-RECEIVE-PACK", "owner/repo.git"),  # a forge that ignores case
    ("/Owner/Repo/Git-Receive-Pack", "Owner/Repo"),
])
def test_a_push_in_any_case_is_a_push(tail: str, repository: str) -> None:
    judged = judge_git_target("POST", tail)
    assert judged.kind == "push" and judged.repository == repository and judged.tail == tail


@pytest.mark.parametrize("tail", [
    "/owner/repo.git/info/refs?service=git-receive-pack",
    "/owner/repo.git/info/refs?service=git%2Dreceive%2Dpack",
    "/owner/repo.git/INFO/Refs?SERVICE=GIT-RECEIVE-PACK",
    "/owner/repo.git/x/../info/refs?service=git-receive-pack",
])
def test_every_spelling_of_the_push_advertisement_is_that(tail: str) -> None:
    judged = judge_git_target("GET", tail)
    assert judged.kind == "advertise" and judged.repository.lower() == "owner/repo.git"


@pytest.mark.parametrize("tail, reason", [
    ("/owner%2Frepo.git/git-receive-pack", "encoded slash"),
    ("/owner/repo.git%2Fgit-receive-pack", "encoded slash"),
    ("/owner/repo.git/git-receive-pack%2F", "encoded slash"),
    ("/owner/repo.git%5Cgit-receive-pack", "encoded backslash"),
    ("/owner/repo.git\\git-receive-pack", "backslash"),
    ("/owner/repo.git/git%252Dreceive-pack", "encoded percent sign"),  # double encoding
    ("/owner/repo.git/git-receive-pack%00", r"encoded character U\+0000"),
    ("/owner/repo.git/git-receive-pack;x=1", "semicolon"),  # path parameters some servers strip
    ("/owner/repo.git/git-receive-pack%3Fx", "encoded question mark"),
    ("/owner/repo.git/git-receive-pack%23", "encoded hash"),
    ("/owner/repo.git/git-receive-pack%", "malformed percent-encoding"),
    ("/owner/repo.git/git-receive-pack%G1", "malformed percent-encoding"),
    ("/owner/repo.git/git-receive-pack%C3%A9", r"U\+00C3"),
    ("/../owner/repo.git/git-receive-pack", "climbs out"),
    ("/owner/../../repo.git/git-receive-pack", "climbs out"),
    ("/owner/repo.git/git-receive-pack/x", "goes on after git-receive-pack"),
    ("/owner/repo.git/info/refs?service=git-upload-pack&service=git-receive-pack", "more than once"),
    ("/owner/repo.git/info/refs?service=x&SERVICE=git-receive-pack", "more than once"),
    ("/owner/repo.git/info/refs?service=git-receive-pack&&", "empty query parameter"),
    ("/owner/repo.git/info/refs?service=git%2Dreceive%2Dpack%26x", "encoded ampersand"),
    ("/owner/repo.git/info/refs?service=git+receive", "plus sign"),
])
def test_what_a_forge_could_read_another_way_is_refused(tail: str, reason: str) -> None:
    with pytest.raises(Unjudgeable, match=reason):
        judge_git_target("POST", tail)


@pytest.mark.parametrize("method, tail, allowed", [
    ("GET", "/o/r.git/info/refs?service=git-upload-pack", True),
    ("POST", "/o/r.git/git-upload-pack", True),
    ("HEAD", "/o/r.git/info/refs", True),
    ("OPTIONS", "/o/r.git/info/refs", True),
    ("POST", "/o/r.git/info/lfs/objects/batch", True),
    ("PUT", "/o/r.git/info/lfs/objects/" + "a" * 64, True),  # git-lfs uploads
    ("PUT", "/o/r.git/refs/heads/main", False),  # WebDAV (dumb HTTP) push
    ("MOVE", "/o/r.git/refs/heads/x", False),
    ("MKCOL", "/o/r.git/objects/ab", False),
    ("LOCK", "/o/r.git/info/refs", False),
    ("DELETE", "/o/r.git/refs/heads/x", False),
    ("PROPFIND", "/o/r.git/", False),
])
def test_methods_on_a_git_route(method: str, tail: str, allowed: bool) -> None:
    if allowed:
        assert judge_git_target(method, tail).kind is None
    else:
        with pytest.raises(Unjudgeable, match="WebDAV"):
            judge_git_target(method, tail)


def test_fetches_and_lfs_are_forwarded_canonical_and_unjudged() -> None:
    fetch = judge_git_target("GET", "/o/r.git/info/refs?service=git%2Dupload-pack")
    assert fetch == GitTarget("/o/r.git/info/refs?service=git-upload-pack", None, "")
    assert judge_git_target("GET", "/").tail == "/"


@pytest.mark.parametrize("target, named", [
    ("/r/api/v1/messages", False),
    ("/r/api/repos/o/r/git/refs/heads/main", False),
    ("/r/api/o/r.git/git-receive-pack", True),
    ("/r/api/o/r.git/GIT-Receive-Pack", True),
    ("/r/api/o/r.git/git%2Dreceive%2Dpack", True),
    ("/r/api/o/r.git/git%252Dreceive%25252Dpack", True),  # nested encodings, undone as often as they nest
    ("/r/api/o/r.git/info/refs?service=git-receive-pack", True),
    ("/r/api/o/r.git/git%" + "25" * 11 + "2Dreceive-pack", True),  # nested deeper than any server decodes
    ("/r/api/o/r.git/git%" + "25" * 5 + "2Dupload-pack", False),
])
def test_other_routes_recognise_a_push_in_any_spelling(target: str, named: bool) -> None:
    assert mentions_push(target) is named
