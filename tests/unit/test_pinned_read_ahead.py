"""A session's start reads ahead the tarballs its npm lockfile pins (pinned_archives.read_ahead,
exit_audit.read_ahead): what it keeps is what the end audit's own reading finds (the long way),
never a manifest of bytes that do not hash to their pin; the end audit stops one still running."""

from __future__ import annotations

import hashlib
import io
import json
import os
import signal
import tarfile
import threading
from base64 import b64encode
from pathlib import Path

import pytest

from dejima.adapters import fork_workers, npm_cache, pinned_archives
from dejima.core.audit.model import Artifact
from dejima.orchestration import exit_audit
from dejima.orchestration.exit_audit import Mount


def _tarball(index: int) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for path, data in ((f"package/index{index}.js", b"x" * index), ("package/package.json", b"{}")):
            info = tarfile.TarInfo(path)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _cached(cache: Path, data: bytes, stored: bytes | None = None) -> str:
    """``data``'s integrity, ``stored`` (default: ``data``) at its address in an npm cache."""
    digest = hashlib.sha512(data).digest()
    hexdigest = digest.hex()
    entry = cache / f"_cacache/content-v2/sha512/{hexdigest[:2]}/{hexdigest[2:4]}/{hexdigest[4:]}"
    entry.parent.mkdir(parents=True, exist_ok=True)
    entry.write_bytes(data if stored is None else stored)
    return "sha512-" + b64encode(digest).decode()


def _pins(cache: Path) -> tuple[list[str], str, str]:
    """20 tarballs cached as pinned (more than FORK_AFTER), one rewritten in the cache, one absent."""
    good = [_cached(cache, _tarball(index)) for index in range(20)]
    rewritten = _cached(cache, _tarball(100), stored=_tarball(101))
    absent = "sha512-" + b64encode(hashlib.sha512(b"absent").digest()).decode()
    return good, rewritten, absent


def test_what_is_read_ahead_is_what_the_end_audit_reads_and_nothing_unpinned(tmp_path: Path) -> None:
    cache, ahead, long_way = tmp_path / ".npm", tmp_path / "ahead", tmp_path / "long"
    good, rewritten, absent = _pins(cache)
    pin = [*good, rewritten, absent]

    def one(integrity: str) -> Artifact | str:
        return npm_cache.tarball([cache], integrity)

    assert pinned_archives.read_ahead(pin, one, "npm", known=ahead)
    fork_workers.wait_behind()
    kept = {path.name for path in (ahead / "npm").iterdir()}
    assert kept == {pinned_archives._manifest_name(key) for key in good}  # not the rewritten, not the absent
    fresh = pinned_archives.read_all(pin, one, "tarball", "npm", known=long_way)
    read = pinned_archives.read_all(pin, one, "tarball", "npm", known=ahead)
    fork_workers.wait_behind()
    assert read == fresh and "does not hash" in str(read[rewritten]) and "not in the npm cache" in str(read[absent])
    for key in good:
        assert pinned_archives._known(ahead / "npm", key) == one(key)
    # Nothing left to read: no process started.
    assert pinned_archives.read_ahead(good, one, "npm", known=ahead) == 0


def test_a_sessions_start_reads_ahead_what_its_lockfile_pins_from_the_session_homes_cache(tmp_path: Path) -> None:
    workspace, home = tmp_path / "workspace", tmp_path / "home"
    workspace.mkdir()
    good, rewritten, absent = _pins(home / ".npm")
    packages = {"": {"name": "ws"}, **{f"node_modules/p{i}": {"version": "1.0.0", "integrity": integrity}
                                        for i, integrity in enumerate([*good, rewritten, absent])}}
    (workspace / "package-lock.json").write_text(json.dumps({"lockfileVersion": 3, "packages": packages}))
    states = exit_audit.start("ahead-1", [Mount("workspace", workspace), Mount("home", home)])
    try:
        assert exit_audit._reading_ahead
    finally:
        fork_workers.wait_behind()
    directory = pinned_archives.manifests_dir() / "npm"
    assert {path.name for path in directory.iterdir()} == {pinned_archives._manifest_name(key) for key in good}
    for state in states:
        state.join()
    exit_audit._reading_ahead.clear()


def test_the_end_audit_stops_a_read_ahead_still_running_and_no_other_process(tmp_path: Path) -> None:
    go = tmp_path / "go"
    os.mkfifo(go)
    pid = fork_workers.fork_behind(lambda: open(go, "rb").read(1))
    try:
        assert pid and pid in fork_workers._behind
        fork_workers.stop_behind(os.getpid())  # not a child it left: nothing happens (this test goes on)
        fork_workers.stop_behind(pid)
        assert pid not in fork_workers._behind
        with pytest.raises(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)  # killed and reaped
    finally:
        fd = os.open(go, os.O_RDWR | os.O_NONBLOCK)  # a child left by a failure: let it go
        os.write(fd, b"x")
        os.close(fd)
        fork_workers.wait_behind()


def test_the_largest_archives_are_read_first_and_what_is_read_is_the_same(tmp_path: Path) -> None:
    """Ordered by the cached file's size (the processes end together), never answered otherwise."""
    cache = tmp_path / ".npm"
    pins = [_cached(cache, _tarball(index)) for index in (3, 900, 40)]  # fewer than FORK_AFTER: read here, in order
    taken: list[str] = []

    def one(integrity: str) -> Artifact | str:
        taken.append(integrity)
        return npm_cache.tarball([cache], integrity)

    sized = pinned_archives.read_all(pins, one, "tarball", size=lambda i: npm_cache.cached_size([cache], i))
    assert taken == sorted(pins, key=lambda i: npm_cache.cached_size([cache], i), reverse=True) == [pins[1], pins[2],
                                                                                                    pins[0]]
    assert sized == pinned_archives.read_all(pins, lambda i: npm_cache.tarball([cache], i), "tarball")
    assert npm_cache.cached_size([cache], "sha512-" + b64encode(b"absent").decode()) == 0


def test_a_read_ahead_no_end_audit_stops_ends_itself_after_its_limit(tmp_path: Path) -> None:
    """A launcher that died leaves no one to stop it: a read ahead stuck on an archive ends by its own
    alarm, killed by SIGALRM, having kept nothing."""
    stuck = tmp_path / "stuck"
    os.mkfifo(stuck)

    def one(key: str) -> Artifact | str:
        with open(stuck, "rb") as never_written:  # blocks: no writer opens it
            never_written.read(1)
        return "unreachable"

    pid = pinned_archives.read_ahead(["k"], one, "npm", known=tmp_path / "kept", limit=1)
    assert pid
    status: list[int] = []
    waiter = threading.Thread(target=lambda: status.append(os.waitpid(pid, 0)[1]), daemon=True)
    waiter.start()
    waiter.join(timeout=60)
    try:
        assert status, "the read ahead was still running a minute after its one-second limit"
        assert os.WIFSIGNALED(status[0]) and os.WTERMSIG(status[0]) == signal.SIGALRM
        assert not (tmp_path / "kept" / "npm").exists() or not any((tmp_path / "kept" / "npm").iterdir())
    finally:
        if not status:  # let a child left by a failure go
            fd = os.open(stuck, os.O_RDWR | os.O_NONBLOCK)
            os.write(fd, b"x")
            os.close(fd)
            waiter.join(timeout=60)
        fork_workers._behind.remove(pid)
