"""Real git clone/fetch/push through the proxy to a real `git http-backend`; push rules visible in git's output."""

from __future__ import annotations

import base64
import os

from dejima.proxy.records import read_records
from tests.unit.proxy.gitworld import TOKEN, World, commit, git


def test_clone_fetch_and_push_a_branch_work_with_the_real_token(world: World) -> None:
    assert (world.clone / "README").read_text() == "hello\n"
    expected = "Basic " + base64.b64encode(f"x-access-token:{TOKEN}".encode()).decode()
    assert set(world.forge.auth_seen) == {expected}
    git("fetch", "-q", cwd=world.clone, env=world.env)
    git("checkout", "-q", "-b", "feature", cwd=world.clone)
    commit(world, "a")
    git("push", "-q", "origin", "feature", cwd=world.clone, env=world.env)
    commit(world, "b")
    git("push", "-q", "origin", "feature", cwd=world.clone, env=world.env)  # a fast-forward update
    heads = git("ls-remote", "origin", cwd=world.clone, env=world.env).stdout
    assert git("rev-parse", "HEAD", cwd=world.clone).stdout.strip() + "\trefs/heads/feature" in heads
    assert read_records(world.proxy.violations) == []
    assert TOKEN not in (world.proxy.ledger.read_text() + world.proxy.violations.read_text())


def test_a_force_push_is_refused_with_the_reason_in_gits_output(world: World) -> None:
    git("checkout", "-q", "-b", "feature", cwd=world.clone)
    commit(world, "a")
    git("push", "-q", "origin", "feature", cwd=world.clone, env=world.env)
    before = git("ls-remote", "origin", "feature", cwd=world.clone, env=world.env).stdout
    git("reset", "-q", "--hard", "HEAD~1", cwd=world.clone)
    commit(world, "rewritten")
    result = git("push", "--force", "origin", "feature", cwd=world.clone, env=world.env, check=False)
    assert result.returncode != 0
    assert "[remote rejected] feature -> feature (not a fast-forward" in result.stderr
    assert "remote: dejima: refs/heads/feature: not a fast-forward" in result.stderr
    assert git("ls-remote", "origin", "feature", cwd=world.clone, env=world.env).stdout == before
    assert [v["kind"] for v in read_records(world.proxy.violations)] == ["push-refused"]


def test_a_push_to_the_default_branch_is_refused(world: World) -> None:
    commit(world, "a")
    result = git("push", "origin", "main", cwd=world.clone, env=world.env, check=False)
    assert result.returncode != 0
    assert "[remote rejected] main -> main (pushing to the default branch (main) is not allowed" in result.stderr


def test_a_deletion_is_refused(world: World) -> None:
    git("push", "-q", "origin", "HEAD:refs/heads/temp", cwd=world.clone, env=world.env)
    result = git("push", "origin", ":temp", cwd=world.clone, env=world.env, check=False)
    assert result.returncode != 0 and "deleting a ref is not allowed by dejima" in result.stderr


def test_a_push_to_another_repository_is_refused(world: World) -> None:
    result = git("push", "https://github.example/other/repo.git", "HEAD:refs/heads/x", cwd=world.clone,
                 env=world.env, check=False)
    assert result.returncode != 0
    assert "remote: dejima proxy: pushes through this session go only to owner/repo, not other/repo" in result.stderr
    assert not (world.forge.root / "other" / "repo.git" / "refs" / "heads" / "x").exists()


def test_a_large_push_goes_chunked_and_is_checked(world: World) -> None:
    git("checkout", "-q", "-b", "big", cwd=world.clone)
    (world.clone / "blob").write_bytes(os.urandom(2 * 1024 * 1024))  # over http.postBuffer: git sends chunked
    git("add", "blob", cwd=world.clone)
    git("commit", "-q", "-m", "big", cwd=world.clone)
    pushed = git("push", "origin", "big", cwd=world.clone, env=world.env, check=False)
    assert pushed.returncode == 0, pushed.stderr
    assert "refs/heads/big" in git("ls-remote", "origin", cwd=world.clone, env=world.env).stdout
    pushes = [e for e in read_records(world.proxy.ledger) if str(e["path"]).endswith("/git-receive-pack")]
    assert pushes[-1]["status"] == 200 and int(str(pushes[-1]["bytes_in"])) > 2 * 1024 * 1024

