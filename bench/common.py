"""What every benchmark shares: result rows, alternated timing, the load, and a private dejima
environment (its own scope, state and settings) so that a bench run never touches a user's sessions.

A row compares dejima with an anchor measured in the same run on the same box. ``better`` says
which way the ratio should go: "lower" (times, memory) or "higher" (rates); the goal is checked
against the ratio, or against dejima's own number when a goal is absolute (``absolute=True``).
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
DEJIMA = [PYTHON, "-m", "dejima"]


@dataclass
class Row:
    measurement: str
    unit: str
    dejima: float | None
    anchor: float | None
    anchor_name: str
    goal: float | None  # the bound on the ratio (or on dejima's number when absolute)
    better: str = "lower"  # "lower" or "higher"
    absolute: bool = False
    note: str = ""
    samples: dict[str, list[float]] = field(default_factory=dict)
    load: list[float] = field(default_factory=list)  # 1-minute load average before and after

    @property
    def ratio(self) -> float | None:
        if self.dejima is None or not self.anchor:
            return None
        return self.dejima / self.anchor

    @property
    def passed(self) -> bool | None:
        value = self.dejima if self.absolute else self.ratio
        if value is None or self.goal is None:
            return None
        return value <= self.goal if self.better == "lower" else value >= self.goal

    def ratio_text(self) -> str:
        """The ratio with enough digits that what is shown agrees with the verdict (0.2457 against a
        goal of 0.25 shows as 0.246 ×, not as a failing 0.25 ×)."""
        if self.ratio is None:
            return "-"
        for digits in (2, 3, 4, 6):
            text = f"{self.ratio:.{digits}f}"
            shown = float(text)
            if self.goal is None or self.absolute or self.passed == (
                    shown <= self.goal if self.better == "lower" else shown >= self.goal):
                return f"{text} ×"
        return f"{self.ratio!r} ×"

    def goal_text(self) -> str:
        if self.goal is None:
            return "-"
        sign = "≤" if self.better == "lower" else "≥"
        return f"{sign} {self.goal:g} {self.unit}" if self.absolute else f"{sign} {self.goal:g} ×"

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "ratio": self.ratio, "passed": self.passed, "goal_text": self.goal_text()}


def pending(measurement: str, why: str) -> Row:
    """A goal whose benchmark lands with its feature (the proxy, live grants)."""
    return Row(measurement, "", None, None, "-", None, note=why)


def load() -> float:
    return os.getloadavg()[0]


def median(values: list[float]) -> float:
    return statistics.median(values)


def timed(command: list[str], env: dict[str, str] | None = None, check: bool = True) -> float:
    """Wall seconds of ``command``; raises when it fails, so a failure is never timed as a result."""
    start = time.perf_counter()
    result = subprocess.run(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    elapsed = time.perf_counter() - start
    if check and result.returncode != 0:
        # The whole stderr is kept: an instrumented run prints its timings after the traceback.
        with tempfile.NamedTemporaryFile("w", prefix="dejima-bench-failed-", suffix=".log", delete=False) as log:
            log.write(result.stderr)
        raise RuntimeError(f"{' '.join(command)} failed ({result.returncode}): {result.stderr.strip()[-800:]}\n"
                           f"(its whole stderr: {log.name})")
    return elapsed


def alternate(sides: dict[str, Callable[[], float]], runs: int, warmup: int = 1) -> dict[str, list[float]]:
    """Each side once per round, the order flipped every round, so that a machine changing speed
    slows both sides alike; the warm-up rounds are dropped."""
    samples: dict[str, list[float]] = {name: [] for name in sides}
    names = list(sides)
    for round_ in range(warmup + runs):
        for name in names if round_ % 2 == 0 else reversed(names):
            value = sides[name]()
            if round_ >= warmup:
                samples[name].append(value)
    return samples


def docker(*args: str, check: bool = True, capture: bool = True, timeout: float = 300) -> str:
    result = subprocess.run(["docker", *args], capture_output=capture, text=True, timeout=timeout)
    if check and result.returncode != 0:
        raise RuntimeError(f"docker {' '.join(args)} failed: {(result.stderr or '').strip()[-800:]}")
    return (result.stdout or "").strip()


@dataclass
class Env:
    """A private dejima installation for the run: scope, XDG directories, settings, workspaces."""

    root: Path
    scope: str
    settings: Path  # written by a benchmark that needs settings (the DNS one); absent: the defaults
    owner: tuple[int, int]  # who owns the workspaces (not root, when the bench runs as root)

    @property
    def vars(self) -> dict[str, str]:
        return dict(os.environ, DEJIMA_SCOPE=self.scope, XDG_STATE_HOME=str(self.root / "state"),
                    XDG_DATA_HOME=str(self.root / "data"),
                    XDG_CONFIG_HOME=str(self.root / "config"))

    def workspace(self, name: str) -> Path:
        path = self.root / "ws" / name
        path.mkdir(parents=True, exist_ok=True)
        (path / "README.md").write_text("bench workspace\n")
        for item in (path, path / "README.md"):
            os.chown(item, *self.owner)
        return path

    @contextmanager
    def applied(self) -> Iterator[None]:
        """The environment in this process too, for the in-process parts (image lookup)."""
        saved = dict(os.environ)
        os.environ.update(self.vars)
        try:
            yield
        finally:
            os.environ.clear()
            os.environ.update(saved)


def workspace_owner() -> tuple[int, int]:
    if os.getuid() != 0:
        return os.getuid(), os.getgid()
    for entry in pwd.getpwall():  # the first ordinary user: a root launcher runs the session as the owner
        if 1000 <= entry.pw_uid < 60000:
            return entry.pw_uid, entry.pw_gid
    return 65534, 65534


@contextmanager
def audit_workdir(prefix: str) -> Iterator[tuple[Path, Any]]:
    """A directory of the bench's own, whose state/ holds the audit's state and findings for the
    block (XDG_STATE_HOME), and the finding store there; both gone afterwards."""
    from dejima.adapters.findings import FindingStore

    work = Path(tempfile.mkdtemp(prefix=prefix))
    saved = os.environ.get("XDG_STATE_HOME")
    os.environ["XDG_STATE_HOME"] = str(work / "state")
    store = FindingStore()
    try:
        yield work, store
    finally:
        store.close()
        if saved is None:
            os.environ.pop("XDG_STATE_HOME", None)
        else:
            os.environ["XDG_STATE_HOME"] = saved
        shutil.rmtree(work, ignore_errors=True)


@contextmanager
def bench_env(settings_text: str = "") -> Iterator[Env]:
    root = Path(tempfile.mkdtemp(prefix="dejima-bench-"))
    root.chmod(0o755)
    (root / "ws").mkdir()
    (root / "ws").chmod(0o755)
    settings = root / "config" / "dejima" / "settings.toml"  # where dejima looks under XDG_CONFIG_HOME
    settings.parent.mkdir(parents=True)
    if settings_text:
        settings.write_text(settings_text)
    env = Env(root, f"bench-{os.getpid()}", settings, workspace_owner())
    try:
        yield env
    finally:
        remove_scope(env.scope)
        shutil.rmtree(root, ignore_errors=True)


def remove_scope(scope: str) -> None:
    """Containers and networks the run made, found by its scope label (never by name)."""
    ids = docker("ps", "-aq", "--filter", f"label=dejima.scope={scope}", check=False).split()
    if ids:
        docker("rm", "-f", *ids, check=False)
    nets = docker("network", "ls", "-q", "--filter", f"label=dejima.scope={scope}", check=False).split()
    for net in nets:
        docker("network", "rm", net, check=False)


def dejima_images(env: Env, workspace: Path, allow: tuple[str, ...] = ()) -> tuple[str, str]:
    """The filter and session images a session on ``workspace`` runs, found (and built when missing)
    the way the launcher does it."""
    from dejima.adapters import host
    from dejima.adapters.image_builds import ensure_images
    from dejima.adapters.runtime import connect
    from dejima.orchestration import start_request
    from dejima.ui.console import UI

    with env.applied():
        ui = UI(quiet=True)
        resolved = start_request.resolve_manifests(workspace, start_request.Selection(), ui)
        return ensure_images(connect(), host.load_settings(), host.session_identity(workspace, False), ui,
                             resolved.image_layers())


def write_json(path: Path, rows: list[Row], extra: dict[str, Any]) -> None:
    path.write_text(json.dumps({**extra, "rows": [r.to_json() for r in rows]}, indent=1))
