"""A session's start reads ahead the tarballs its npm lockfile pins (pinned_archives.read_ahead,
exit_audit.read_ahead): what it keeps is what the end audit's own reading finds (the long way),
never a manifest of bytes that do not hash to their pin; the end audit stops one still running."""

from __future__ import annotations

import hashlib
import io
import json
import os
import select
import signal
import tarfile
import threading
from base64 import b64encode
from collections.abc import Callable, Iterator
from contextlib import contextmanager
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


def stamp(cache: Path) -> Callable[[str], object]:
    return lambda integrity: npm_cache.cached_stamp([cache], integrity)


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

    assert pinned_archives.read_ahead(pin, one, "npm", stamp(cache), known=ahead)
    fork_workers.finish_behind()
    kept = {path.name for path in (ahead / "npm").iterdir()}
    assert kept == {pinned_archives._manifest_name(key) for key in good}  # not the rewritten, not the absent
    fresh = pinned_archives.read_all(pin, one, "tarball", "npm", known=long_way)
    read = pinned_archives.read_all(pin, one, "tarball", "npm", known=ahead)
    fork_workers.finish_behind()
    assert read == fresh and "does not hash" in str(read[rewritten]) and "not in the npm cache" in str(read[absent])
    for key in good:
        assert pinned_archives._known(ahead / "npm", key) == one(key)
    # Nothing left to read: no process started.
    assert pinned_archives.read_ahead(good, one, "npm", stamp(cache), known=ahead) == 0


@contextmanager
def _session_started(session: str, workspace: Path, home: Path) -> Iterator[list[int]]:
    """A session's start on the workspace and its home, as the launcher makes it: the read ahead's
    pids while in it; on leaving, the read ahead asked to finish (what it can read then, read) and
    the start's threads joined."""
    states = exit_audit.start(session, [Mount("workspace", workspace), Mount("home", home)])
    try:
        yield exit_audit._reading_ahead
    finally:
        fork_workers.finish_behind()
        exit_audit._reading_ahead.clear()
        for state in states:
            state.join()


def test_a_sessions_start_reads_ahead_what_its_lockfile_pins_from_the_session_homes_cache(tmp_path: Path) -> None:
    workspace, home = tmp_path / "workspace", tmp_path / "home"
    workspace.mkdir()
    good, rewritten, absent = _pins(home / ".npm")
    packages = {"": {"name": "ws"}, **{f"node_modules/p{i}": {"version": "1.0.0", "integrity": integrity}
                                        for i, integrity in enumerate([*good, rewritten, absent])}}
    (workspace / "package-lock.json").write_text(json.dumps({"lockfileVersion": 3, "packages": packages}))
    with _session_started("ahead-1", workspace, home) as reading:
        assert reading
    directory = pinned_archives.manifests_dir() / "npm"
    assert {path.name for path in directory.iterdir()} == {pinned_archives._manifest_name(key) for key in good}


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
        fork_workers.finish_behind()


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

    pid = pinned_archives.read_ahead(["k"], one, "npm", lambda key: 0, known=tmp_path / "kept", limit=1)
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


# What a project's first session does: its npm cache holds none of the pins at the start, its `npm ci` fetches
# them while the read ahead runs. Each wait below is bounded; one that would hang fails (pytest-timeout too).
FAST = 0.05  # a read ahead's polling period in these tests (the product's: POLL_SECONDS)


def _fetched(cache: Path, data: bytes, stored: bytes | None = None) -> str:
    """``_cached``, written as cacache writes (a temporary file renamed to the address): a new file."""
    integrity = _integrity(data)
    hexdigest = hashlib.sha512(data).hexdigest()
    entry = cache / f"_cacache/content-v2/sha512/{hexdigest[:2]}/{hexdigest[2:4]}/{hexdigest[4:]}"
    entry.parent.mkdir(parents=True, exist_ok=True)
    temporary = cache / "_cacache/tmp" / hexdigest[:16]
    temporary.parent.mkdir(parents=True, exist_ok=True)
    temporary.write_bytes(data if stored is None else stored)
    os.replace(temporary, entry)
    return integrity


def _integrity(data: bytes) -> str:
    return "sha512-" + b64encode(hashlib.sha512(data).digest()).decode()


def _ended_alone(pid: int, seconds: float = 30) -> bool:
    """Whether the read ahead ``pid`` ends by itself (no request, no signal) within ``seconds``, successfully."""
    status = _exit_status(pid, seconds)
    assert status is None or os.waitstatus_to_exitcode(status) == 0
    return status is not None


def _exit_status(pid: int, seconds: float) -> int | None:
    """``pid``'s wait status once it ends, within ``seconds`` (then reaped; None: still running)."""
    ended: list[int] = []

    def wait() -> None:
        try:
            ended.append(os.waitpid(pid, 0)[1])
        except ChildProcessError:  # reaped by the test's finish_behind once this wait timed out
            pass
    waiter = threading.Thread(target=wait, daemon=True)
    waiter.start()
    waiter.join(timeout=seconds)
    if ended:
        fork_workers._behind.remove(pid)
    return ended[0] if ended else None


def _kept(directory: Path) -> set[str]:
    return {path.name for path in directory.iterdir()} if directory.exists() else set()


def _names(keys: list[str]) -> set[str]:
    return {pinned_archives._manifest_name(key) for key in keys}


def _told(reader: int, seconds: float = 30) -> str:
    """The next line the read ahead's reader told through the fifo ``reader`` (empty: none within ``seconds``)."""
    line = b""
    while not line.endswith(b"\n"):
        if not select.select([reader], [], [], seconds)[0]:
            return ""
        line += os.read(reader, 1)
    return line.decode().strip()


def _telling(cache: Path, fifo: Path) -> Callable[[str], Artifact | str]:
    """npm_cache.tarball, each answer told through ``fifo`` (the test reads it: what the child did, when)."""
    def one(integrity: str) -> Artifact | str:
        answer = npm_cache.tarball([cache], integrity)
        with open(fifo, "w") as told:
            told.write(f"{integrity} {'kept' if isinstance(answer, Artifact) else 'refused'}\n")
        return answer
    return one


@pytest.mark.timeout(120)
def test_a_pin_whose_tarball_the_session_fetches_is_kept_by_the_read_ahead_before_the_end_audit(
        tmp_path: Path) -> None:
    """The first session's start: the session home's cache is empty; the session's install then
    fetches every pinned tarball. The read ahead keeps each before the end audit, and ends by itself
    once none is left to wait for. Before: it read what the cache held at the start (nothing) and
    ended, and the end audit inflated every tarball."""
    workspace, home = tmp_path / "workspace", tmp_path / "home"
    workspace.mkdir()
    home.mkdir()
    tarballs = [_tarball(index) for index in range(20)]
    pins = [_integrity(data) for data in tarballs]
    packages = {"": {"name": "ws"}, **{f"node_modules/p{i}": {"version": "1.0.0", "integrity": integrity}
                                        for i, integrity in enumerate(pins)}}
    (workspace / "package-lock.json").write_text(json.dumps({"lockfileVersion": 3, "packages": packages}))
    with _session_started("first-1", workspace, home) as reading:
        [pid] = reading
        for data in tarballs:  # the session's `npm ci`
            _fetched(home / ".npm", data)
        assert _ended_alone(pid), "the read ahead still waited after every pinned tarball was fetched"
        assert _kept(pinned_archives.manifests_dir() / "npm") == _names(pins)
        for pin in pins:
            assert pinned_archives._known(pinned_archives.manifests_dir() / "npm", pin) == \
                npm_cache.tarball([home / ".npm"], pin)


@pytest.mark.timeout(120)
def test_an_optional_pin_is_not_waited_for(tmp_path: Path) -> None:
    """A package marked optional (another platform's build: npm never fetches it here) is not
    looked for again: a start whose only pins not cached are optional ones ends its read ahead
    after the first look, and an optional tarball that comes later is left to the end audit."""
    workspace, home = tmp_path / "workspace", tmp_path / "home"
    workspace.mkdir()
    cached = _cached(home / ".npm", _tarball(1))
    other_platform = _integrity(_tarball(2))
    packages = {"": {"name": "ws"}, "node_modules/here": {"version": "1.0.0", "integrity": cached},
                "node_modules/@esbuild/win32-x64": {"version": "1.0.0", "integrity": other_platform,
                                                     "optional": True}}
    (workspace / "package-lock.json").write_text(json.dumps({"lockfileVersion": 3, "packages": packages}))
    with _session_started("optional-1", workspace, home) as reading:
        [pid] = reading
        assert _ended_alone(pid), "the read ahead waited for another platform's optional package"
        assert _kept(pinned_archives.manifests_dir() / "npm") == _names([cached])


@pytest.mark.timeout(120)
def test_only_the_awaited_pins_are_looked_for_again(tmp_path: Path) -> None:
    """Told by the reader itself: after the first pass (the one cached pin read), the optional pin's
    tarball comes, then the awaited one's; only the awaited one is read, and the read ahead ends."""
    cache, kept, fifo = tmp_path / ".npm", tmp_path / "kept", tmp_path / "told"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDWR)  # a writer's open never blocks
    awaited, optional = _tarball(3), _tarball(4)
    cached = _cached(cache, _tarball(5))
    keys = [_integrity(awaited), _integrity(optional), cached]  # the cached one read last in the first pass
    pid = pinned_archives.read_ahead(keys, _telling(cache, fifo), "npm", stamp(cache), awaited=[keys[0]],
                                     known=kept, poll=FAST)
    try:
        assert _told(reader) == f"{cached} kept"  # the first pass is over
        _fetched(cache, optional)
        _fetched(cache, awaited)
        assert _told(reader) == f"{keys[0]} kept"
        assert _ended_alone(pid)
        assert _told(reader, 0) == "" and _kept(kept / "npm") == _names([keys[0], cached])
    finally:
        os.close(reader)
        fork_workers.finish_behind()


@pytest.mark.timeout(120)
def test_bytes_that_do_not_hash_to_the_pin_are_never_kept_and_read_again_a_bounded_number_of_times(
        tmp_path: Path) -> None:
    """The session writes other bytes at an awaited pin's address, a new file each time: each is
    read once and refused, never kept; after READS_OF_ONE the pin is no longer waited for (the end
    audit reads it, and says what it holds)."""
    cache, kept, fifo = tmp_path / ".npm", tmp_path / "kept", tmp_path / "told"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDWR)
    data = _tarball(6)
    pin = _integrity(data)
    pid = pinned_archives.read_ahead([pin], _telling(cache, fifo), "npm", stamp(cache), awaited=[pin], known=kept,
                                     poll=FAST)
    try:
        for attempt in range(pinned_archives.READS_OF_ONE):
            _fetched(cache, data, stored=_tarball(200 + attempt))
            assert _told(reader) == f"{pin} refused"
            assert _kept(kept / "npm") == set()
        assert _ended_alone(pid), "the read ahead still waited for a pin whose file was refused each time"
        assert _kept(kept / "npm") == set()
    finally:
        os.close(reader)
        fork_workers.finish_behind()


@pytest.mark.timeout(120)
def test_a_file_refused_is_read_again_once_it_is_another(tmp_path: Path) -> None:
    """Bytes that do not hash to the pin yet (a file not whole, or the session's), then the pinned
    tarball renamed in, as cacache writes it: refused, then kept."""
    cache, kept, fifo = tmp_path / ".npm", tmp_path / "kept", tmp_path / "told"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDWR)
    data = _tarball(8)
    pin = _integrity(data)
    pid = pinned_archives.read_ahead([pin], _telling(cache, fifo), "npm", stamp(cache), awaited=[pin], known=kept,
                                     poll=FAST)
    try:
        _fetched(cache, data, stored=data[:len(data) // 2])
        assert _told(reader) == f"{pin} refused"
        _fetched(cache, data)
        assert _told(reader) == f"{pin} kept"
        assert _ended_alone(pid)
        assert pinned_archives._known(kept / "npm", pin) == npm_cache.tarball([cache], pin)
    finally:
        os.close(reader)
        fork_workers.finish_behind()


@pytest.mark.timeout(120)
def test_asked_to_finish_the_read_ahead_keeps_what_a_full_read_would_then_and_ends(tmp_path: Path) -> None:
    """What the cache holds when finish_behind asks (cached at the start, fetched since, optional or
    not, bytes that do not hash, a pin never fetched): the read ahead keeps exactly the manifests
    read_all reads from it then, and ends, though a pin it waits for never came. No caller hangs."""
    cache, ahead, long_way, fifo = tmp_path / ".npm", tmp_path / "ahead", tmp_path / "long", tmp_path / "told"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDWR)
    good, rewritten, never = _pins(cache)
    awaited, optional, refused = (_integrity(_tarball(i)) for i in (30, 31, 32))
    pins = [*good, rewritten, never, awaited, optional, refused]
    pid = pinned_archives.read_ahead(pins, _telling(cache, fifo), "npm", stamp(cache),
                                     awaited=[never, awaited, refused], known=ahead)
    try:
        assert pid
        for _ in range(len(good) + 1):  # the first pass over: what was cached at the start
            assert _told(reader)
        _fetched(cache, _tarball(30))
        _fetched(cache, _tarball(31))
        _fetched(cache, _tarball(32), stored=_tarball(33))
        fork_workers.finish_behind()
        assert fork_workers._behind == []
        with pytest.raises(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)  # ended and reaped
    finally:
        os.close(reader)
        fork_workers.finish_behind()
    fresh = pinned_archives.read_all(pins, lambda i: npm_cache.tarball([cache], i), "tarball", "npm", known=long_way)
    fork_workers.finish_behind()
    assert _kept(ahead / "npm") == _names([key for key, read in fresh.items() if isinstance(read, Artifact)]) == \
        _names([*good, awaited, optional])
    for key in [*good, awaited, optional]:
        assert pinned_archives._known(ahead / "npm", key) == fresh[key]


@pytest.mark.timeout(120)
def test_a_read_ahead_waiting_for_a_pin_never_fetched_ends_itself_after_its_limit(tmp_path: Path) -> None:
    """No install fetches the pin and no end audit comes (its launcher died): the read ahead looking
    for it ends by its own alarm, as one stuck on an archive does."""
    cache = tmp_path / ".npm"
    never = _integrity(b"never fetched")
    pid = pinned_archives.read_ahead([never], lambda i: npm_cache.tarball([cache], i), "npm", stamp(cache),
                                     awaited=[never], known=tmp_path / "kept", limit=1, poll=FAST)
    status = _exit_status(pid, 60)
    fork_workers.finish_behind()  # one left by a failure
    assert status is not None, "the read ahead still looked for its pin a minute after its one-second limit"
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGALRM
