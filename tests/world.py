"""The test world: images, a non-root test user, decoys, and running the real CLI.

Everything made here carries the test run's DEJIMA_SCOPE label and is removed by label.
Traffic goes only to containers these helpers start.
"""

from __future__ import annotations

import json
import os
import re
import select
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TypedDict

from dejima.adapters.runtime import Runtime
from dejima.core import labels
from dejima.orchestration import selftest
from dejima.orchestration.selftest import Decoy, ProbeResult

TEST_UID = 4242
TEST_GID = 4242
REPO = Path(__file__).resolve().parents[1]


def remove_scope(runtime: Runtime, scope: str) -> None:
    for container in runtime.containers({labels.SCOPE: scope}):
        runtime.remove(container.id)


class RunAs(TypedDict, total=False):
    """The subprocess arguments that run a child as another user (none when it is this one)."""

    user: int
    group: int
    extra_groups: list[int]


@dataclass
class User:
    """Who runs the launcher in a test: its uid/gid, its HOME and XDG dirs."""

    uid: int
    gid: int
    home: Path
    python: str = sys.executable
    pythonpath: str | None = None

    def env(self, scope: str, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("DEJIMA_", "XDG_"))}
        env.update(
            HOME=str(self.home), XDG_CONFIG_HOME=str(self.home / ".config"),
            XDG_DATA_HOME=str(self.home / ".local/share"), DEJIMA_SCOPE=scope, PYTHONUNBUFFERED="1",
        )
        if self.pythonpath:
            env["PYTHONPATH"] = self.pythonpath
        env.update(extra)
        return env

    def command(self, *args: str) -> list[str]:
        return [self.python, "-m", "dejima", *args]

    def popen_kwargs(self) -> RunAs:
        if self.uid == os.getuid():
            return {}
        import grp

        docker_gid = grp.getgrnam("docker").gr_gid
        return {"user": self.uid, "group": self.gid, "extra_groups": [docker_gid]}


def make_user(base: Path, uid: int, gid: int) -> User:
    home = base / f"home-{uid}"
    home.mkdir(parents=True, exist_ok=True)
    if uid == os.getuid():
        return User(uid, gid, home)
    os.chown(home, uid, gid)
    if not Path(SYSTEM_PYTHON).exists():
        raise AssertionError(f"running the launcher as uid {uid} needs {SYSTEM_PYTHON}")
    return User(uid, gid, home, python=SYSTEM_PYTHON, pythonpath=str(install_for_other_user(base / "pylib")))


SYSTEM_PYTHON = "/usr/bin/python3"


def _distributions(name: str, seen: set[str]) -> None:
    """Collect a distribution and everything it requires (ignoring extras)."""
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        dist = distribution(name)
    except PackageNotFoundError:
        return
    key = dist.metadata["Name"].lower()
    if key in seen:
        return
    seen.add(key)
    for requirement in dist.requires or []:
        if "extra ==" in requirement:
            continue
        _distributions(re.split(r"[ ;<>=!~\[(]", requirement, maxsplit=1)[0], seen)


def install_for_other_user(target: Path) -> Path:
    """A world-readable copy of dejima and its dependencies, for a launcher run as another uid.

    The test interpreter may live where another user cannot reach it (pyenv under /root), so
    the test user runs the system python with this copy on PYTHONPATH.
    """
    from importlib.metadata import distribution

    if target.exists():
        return target
    import tomllib

    # The repository's own requirements, not the installed dejima's metadata (an editable install made before a
    # dependency was added still names the old list).
    names: set[str] = set()
    for requirement in tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]:
        _distributions(re.split(r"[ ;<>=!~\[(]", requirement, maxsplit=1)[0], names)
    for name in sorted(names - {"dejima"}):
        dist = distribution(name)
        for file in dist.files or []:
            source = Path(str(dist.locate_file(file)))
            if ".dist-info" in str(file) or "__pycache__" in str(file) or not source.is_file():
                continue
            if str(file).startswith(".."):
                continue
            destination = target / file
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, destination)
    shutil.copytree(REPO / "dejima", target / "dejima", ignore=shutil.ignore_patterns("__pycache__"))
    # The package data that pyproject.toml maps into dejima.assets.*: the same layout here.
    for folder in ("docker", "forges", "workflows", "harnesses", "backends"):
        if (REPO / folder).is_dir():
            shutil.copytree(REPO / folder, target / "dejima" / "assets" / folder)
            (target / "dejima" / "assets" / folder / "__init__.py").touch()
    (target / "dejima" / "assets" / "__init__.py").touch()
    for path in [target, *target.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return target




def run_dejima(user: User, scope: str, *args: str, timeout: float = 180,
               **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        user.command(*args), env=user.env(scope, **env), capture_output=True, text=True,
        timeout=timeout, cwd=str(REPO), stdin=subprocess.DEVNULL, **user.popen_kwargs(),
    )


@contextmanager
def spawn_dejima(user: User, scope: str, *args: str, **env: str) -> Iterator[subprocess.Popen[str]]:
    process = subprocess.Popen(
        user.command(*args), env=user.env(scope, **env), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL, text=True, cwd=str(REPO), **user.popen_kwargs(),
    )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=60)
        for pipe in (process.stdout, process.stderr):
            if pipe is not None:
                pipe.close()


def wait_for_line(stream: IO[str] | None, marker: str, timeout: float = 60) -> str:
    """Read lines from a pipe until one contains marker; bounded in time."""
    assert stream is not None, "the process was started without this pipe"
    deadline = time.monotonic() + timeout
    seen: list[str] = []
    fd = stream.fileno()
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            break
        line = stream.readline()
        if not line:
            break
        seen.append(line)
        if marker in line:
            return line
    raise AssertionError(f"{marker!r} did not appear within {timeout}s; saw: {''.join(seen)[-2000:]}")


def docker(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[bytes]:
    """The docker CLI (tests look inside containers with it; dejima itself speaks to the engine's API)."""
    return subprocess.run(["docker", *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout,
                          check=False)


def containers_of(runtime: Runtime, scope: str, **filters: str) -> list[str]:
    extra = {getattr(labels, k.upper()): v for k, v in filters.items()}
    return [c.id for c in runtime.containers({labels.SCOPE: scope, **extra})]


def start_decoy(runtime: Runtime, scope: str, image: str, network: str = "bridge") -> Decoy:
    created: list[str] = []
    return selftest.start_decoy(runtime, scope, image, network, "test", created)


def probe_from_plain_container(runtime: Runtime, scope: str, image: str, address: str,
                               network: str = "bridge") -> ProbeResult:
    return selftest.control_probe(runtime, scope, image, network, "test", address)


def parse_json_line(output: str) -> dict[str, object]:
    line = [line for line in output.splitlines() if line.startswith("{")][-1]
    result: dict[str, object] = json.loads(line)
    return result
