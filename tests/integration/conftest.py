from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from dejima.adapters.image_builds import ensure_image, recipes, resolve_base
from dejima.adapters.runtime import Runtime
from dejima.core.plan import Identity
from dejima.core.settings import Settings
from dejima.ui.console import UI
from tests.conftest import TEST_SCOPE
from tests.networld import WORLD_LABEL, World, build_world, remove_world
from tests.world import TEST_GID, TEST_UID, User, containers_of, make_user, run_dejima, spawn_dejima, wait_for_line


@dataclass(frozen=True)
class Images:
    filter: str
    session: str  # for the test user
    session_root: str  # for the uid running pytest


@pytest.fixture(scope="session")
def images(runtime: Runtime) -> Images:
    """Build (once, with progress on stderr) the images every docker test uses."""
    ui = UI(quiet=False)
    settings = Settings()
    base = resolve_base(runtime, settings, ui)
    tags = {}
    for name, identity in (("user", Identity(TEST_UID, TEST_GID, "dejima")),
                           ("root", Identity(os.getuid(), os.getgid(), "root"))):
        filter_recipe, session_recipe = recipes(base, settings, identity)
        tags["filter"] = ensure_image(runtime, filter_recipe, ui)
        tags[name] = ensure_image(runtime, session_recipe, ui)
    return Images(filter=tags["filter"], session=tags["user"], session_root=tags["root"])


@pytest.fixture(scope="session")
def world_dir() -> Iterator[Path]:
    # Not pytest's tmp_path: that lives under a 0700 directory the test user cannot enter.
    base = Path(tempfile.mkdtemp(prefix=f"dejima-{TEST_SCOPE}-"))
    base.chmod(0o755)
    yield base
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="session")
def user(world_dir: Path) -> User:
    """A non-root launcher identity when the suite runs as root (so uid checks mean something)."""
    if os.getuid() == 0:
        return make_user(world_dir, TEST_UID, TEST_GID)
    return make_user(world_dir, os.getuid(), os.getgid())


def user_workspace(world_dir: Path, user: User, name: str) -> Path:
    """A workspace directory under the world, owned by the test user (sessions run as its owner)."""
    path = world_dir / "ws" / name
    path.mkdir(parents=True, exist_ok=True)
    (path.parent).chmod(0o755)
    if os.getuid() == 0:
        os.chown(path, user.uid, user.gid)
    return path


@pytest.fixture
def workspace(world_dir: Path, user: User, request: pytest.FixtureRequest) -> Path:
    path = world_dir / "ws" / request.node.name.replace("[", "_").replace("]", "")
    path.mkdir(parents=True)  # a test's own workspace is new: a name used twice is a mistake
    return user_workspace(world_dir, user, path.name)


@pytest.fixture
def scope() -> str:
    return TEST_SCOPE


@pytest.fixture
def launcher_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scope: str) -> Path:
    """This process as a launcher with its own state, settings and data directories."""
    for name in ("XDG_STATE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME"):
        monkeypatch.setenv(name, str(tmp_path / name.lower()))
    monkeypatch.delenv("DEJIMA_SETTINGS", raising=False)
    monkeypatch.setenv("DEJIMA_SCOPE", scope)
    return tmp_path


@pytest.fixture(scope="module")
def world(runtime: Runtime, images: Images, world_dir: Path) -> Iterator[World]:
    """The egress test world (tests/networld.py), one per test module, removed with its network."""
    built = build_world(runtime, TEST_SCOPE, images.filter, images.session_root, world_dir)
    yield built
    remove_world(runtime, TEST_SCOPE, built)
    assert runtime.networks({WORLD_LABEL: TEST_SCOPE}) == []


@pytest.fixture(scope="session")
def claude_image(user: User, world_dir: Path) -> None:
    """The claude-code session image, built once before any test reads a session's output line by
    line (its long build log would fill a pipe nobody reads meanwhile)."""
    workspace = user_workspace(world_dir, user, "claude-image")
    built = run_dejima(user, TEST_SCOPE, "-q", "--harness", "claude-code", str(workspace), "--", "true",
                       timeout=1500, ANTHROPIC_API_KEY="")
    assert built.returncode == 0, built.stderr[-3000:]


def credential_settings(world_dir: Path, name: str, upstreams: dict[str, str], extra: str = "") -> str:
    """A settings file (readable by the test user) sending credential routes to the test's fakes."""
    routes = ", ".join(f'"{route}" = "{url}"' for route, url in upstreams.items())
    path = world_dir / f"{name}.toml"
    path.write_text(f"[credentials]\nupstreams = {{ {routes} }}\n{extra}")
    path.chmod(0o644)
    return str(path)


# Session-side Python an agent script ends with: what every process of the session holds in its
# environment (the canary checks look for real secrets there).
ENVIRONS = """
environs = []
for path in glob.glob("/proc/[0-9]*/environ"):
    try:
        environs.append(open(path, "rb").read().decode("latin-1"))
    except OSError:
        pass
"""


def run_agent(runtime: Runtime, user: User, scope: str, args: tuple[str, ...], agent: str, timeout: float = 120,
              **env: str) -> tuple[dict[str, Any], list[str], str]:
    """Run ``agent`` (Python printing one JSON object and AGENT-DONE) in a session started with
    ``args``; while it still runs, inspect every container of the scope. Returns what the agent
    printed, the inspections as JSON text, and the launcher's stderr."""
    with spawn_dejima(user, scope, *args, "--", "sh", "-c", 'python3 -c "$0" && exec sleep 120', agent,
                      **env) as proc:
        line = wait_for_line(proc.stdout, "AGENT-DONE", timeout=timeout).rsplit("AGENT-DONE", 1)[0]
        inspected = [json.dumps(runtime.inspect(c)) for c in containers_of(runtime, scope)]
        proc.terminate()
        proc.wait(timeout=60)
        assert proc.stderr is not None
        stderr = proc.stderr.read()
    return json.loads(line), inspected, stderr
