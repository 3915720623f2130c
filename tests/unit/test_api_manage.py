"""The management functions of the public API (docs/api.md "Management") without Docker: the settings and the
manifests read from files, the engine's functions against a fake engine, and each returning what the command line
prints from it."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

from dejima import api
from dejima.adapters import host
from dejima.adapters.runtime import ContainerInfo
from dejima.cli.launch import main
from dejima.core import labels
from dejima.core.images import ImageRecipe
from dejima.core.settings import parse_settings
from dejima.errors import EngineError, ExitStatus
from dejima.filter import VIOLATION
from dejima.orchestration.executor import STOP_SIGNAL

GONE = "gone-boot:1:1"  # a launcher token whose launcher is not alive (another boot)


class FakeEngine:
    """The part of ``Runtime`` the management functions use: containers and images in memory, and what was done."""

    def __init__(self) -> None:
        self.containers_: dict[str, ContainerInfo] = {}
        self.logs_: dict[str, str] = {}
        self.images_: list[dict[str, Any]] = []
        self.present: set[str] = set()  # image refs the engine has
        self.stopped: list[str] = []
        self.removed: list[str] = []
        self.built: list[str] = []
        self.removed_images: list[str] = []
        self.in_use: set[str] = set()  # images a container uses: removing them fails

    def add(self, session: str, role: str, launcher: str, scope: str | None = None, workspace: str = "/ws",
            logs: str = "") -> str:
        cid = f"{role}-{session}".ljust(64, "0")
        self.containers_[cid] = ContainerInfo(cid, f"dejima-{session}-{role}", "running", {
            labels.SCOPE: scope or host.scope(), labels.SESSION: session, labels.ROLE: role,
            labels.WORKSPACE: workspace, labels.LAUNCHER: launcher}, "")
        self.logs_[cid] = logs
        return cid

    def containers(self, label_filter: dict[str, str]) -> list[ContainerInfo]:
        return [c for c in self.containers_.values()
                if all(c.labels.get(k) == v or (v == "" and k in c.labels) for k, v in label_filter.items())]

    def inspect(self, container: str) -> dict[str, Any] | None:
        found = self.containers_.get(container)
        return {"Config": {"Labels": found.labels}} if found is not None else None

    def stop(self, container: str, timeout: int) -> None:
        self.stopped.append(container)

    def logs(self, container: str) -> str:
        return self.logs_.get(container, "")

    def wait_removed(self, container: str, timeout: float) -> bool:
        return container not in self.containers_  # no launcher here removes anything

    def remove(self, container: str) -> None:
        self.removed.append(container)
        self.containers_.pop(container, None)

    def images(self, label_filter: dict[str, str]) -> list[dict[str, Any]]:
        return [i for i in self.images_ if all(k in (i.get("Labels") or {}) for k in label_filter)]

    def image_id(self, ref: str) -> str | None:
        return f"sha256:{abs(hash(ref)):064x}"[:71] if ref in self.present else None

    def build(self, recipe: ImageRecipe, on_line: Any) -> str:
        on_line(f"building {recipe.tag}")
        self.built.append(recipe.tag)
        self.present.add(recipe.tag)
        return recipe.tag

    def create(self, spec: object) -> str:
        raise EngineError("this fake engine runs no container")  # the venv probe of a session image

    def remove_image(self, image: str) -> None:
        if image in self.in_use:
            raise EngineError(f"image {image} is in use by a container")
        self.removed_images.append(image)


@pytest.fixture
def engine(monkeypatch: pytest.MonkeyPatch) -> FakeEngine:
    fake = FakeEngine()
    monkeypatch.setattr("dejima.adapters.runtime.connect", lambda: fake)
    return fake


# A live launcher (not this test process): it catches the stop signal as a launcher's session does, says it is
# ready once it does, and exits 7 when it gets it; else it ends with its input.
CATCHING = (f"import signal, sys; signal.signal({int(STOP_SIGNAL)}, lambda *_: sys.exit(7)); "
            "print('ready', flush=True); sys.stdin.read()")


@contextmanager
def live_process(*command: str) -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        yield process
    finally:
        process.kill()
        process.wait()
        for pipe in (process.stdin, process.stdout):
            assert pipe is not None
            pipe.close()


@pytest.fixture
def launcher() -> Iterator[subprocess.Popen[bytes]]:
    with live_process(sys.executable, "-c", CATCHING) as process:
        assert process.stdout is not None and process.stdout.readline() == b"ready\n"
        yield process


@pytest.fixture
def no_engine(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")


# --- sessions --------------------------------------------------------------------------------------------------


def test_sessions_are_listed_with_their_status(engine: FakeEngine, capsys: pytest.CaptureFixture[str]) -> None:
    alive = host.launcher_token()
    engine.add("running1", labels.ROLE_FILTER, alive, workspace="/home/me/one")
    engine.add("running1", labels.ROLE_SESSION, alive, workspace="/home/me/one")
    engine.add("starting", labels.ROLE_FILTER, alive)
    engine.add("crashed", labels.ROLE_FILTER, GONE)
    engine.add("crashed", labels.ROLE_SESSION, GONE)
    engine.add("elsewhere", labels.ROLE_FILTER, alive, scope="another-scope")
    engine.add("helper", "decoy", alive)  # not a session's container
    found = api.sessions()
    assert [(s.session_id, s.status, s.workspace) for s in found] == [
        ("crashed", "stale", "/ws"), ("running1", "running", "/home/me/one"), ("starting", "starting", "/ws")]
    launcher = host.Launcher.parse(alive)
    assert launcher is not None and found[1].launcher_pid == str(launcher.pid)
    assert found[0].containers == ("filter-crash", "session-cras")
    assert isinstance(found[0], api.SessionInfo)
    assert main(["sessions", "--json"]) == ExitStatus.SUCCESS
    assert [json.loads(line) for line in capsys.readouterr().out.splitlines()] == [s.to_json() for s in found]


def test_stop_asks_the_launcher_then_removes_what_is_left(engine: FakeEngine,
                                                          launcher: subprocess.Popen[bytes]) -> None:
    token = host.launcher_token(launcher.pid)
    filter_id = engine.add("one", labels.ROLE_FILTER, token)
    session_id = engine.add("one", labels.ROLE_SESSION, token)
    other = engine.add("two", labels.ROLE_FILTER, token)
    assert sorted(api.stop("one")) == sorted([filter_id, session_id])
    assert launcher.wait(timeout=10) == 7  # asked; this one did not remove its containers:
    assert sorted(engine.removed) == sorted([filter_id, session_id]) and other in engine.containers_
    with pytest.raises(api.UsageError, match="no session 'one'"):
        api.stop("one")


def test_clean_removes_stale_sessions_and_records_their_refusals(engine: FakeEngine) -> None:
    refusal = {"kind": "dns", "domain": "evil.example", "reason": "not allowed"}
    stale_filter = engine.add("crashed", labels.ROLE_FILTER, GONE,
                              logs=f"dejima-filter: ready\n{VIOLATION}{json.dumps(refusal)}\n")
    engine.add("crashed", labels.ROLE_SESSION, GONE)
    running = engine.add("live", labels.ROLE_FILTER, host.launcher_token())
    reporter = api.QuietReporter()
    assert api.clean(reporter=reporter) == 1
    assert stale_filter in engine.stopped and running in engine.containers_
    assert reporter.messages == [("info", "removed leftover session crashed (its launcher is gone)")]
    assert api.violations("crashed") == [refusal]
    assert api.clean() == 0  # nothing left to clean


def test_stop_sends_no_signal_a_launcher_would_die_of(engine: FakeEngine) -> None:
    """A program running a session off its main thread has no handler of dejima's: its containers are removed,
    the program is left alone."""
    with live_process("cat") as process:
        engine.add("one", labels.ROLE_SESSION, host.launcher_token(process.pid))
        assert len(api.stop("one")) == 1 and engine.containers_ == {}
        assert process.poll() is None


def test_clean_everything_stops_running_sessions_too(engine: FakeEngine, launcher: subprocess.Popen[bytes]) -> None:
    engine.add("live", labels.ROLE_FILTER, host.launcher_token(launcher.pid))
    engine.add("live", labels.ROLE_SESSION, host.launcher_token(launcher.pid))
    engine.add("crashed", labels.ROLE_FILTER, GONE)
    reporter = api.QuietReporter()
    assert api.clean(everything=True, reporter=reporter) == 2
    assert reporter.messages == [("info", "removed session crashed (stale)"),
                                 ("info", "removed session live (running)")]
    assert engine.containers_ == {}


def test_the_engines_functions_raise_an_engine_error_without_one(no_engine: None) -> None:
    for call in (api.sessions, lambda: api.stop("x"), api.clean, api.images, api.build_images, api.prune_images,
                 api.bootstrap_base):
        with pytest.raises(api.EngineError, match="cannot reach the Docker engine"):
            call()


def test_doctor_without_an_engine_is_one_failed_check(no_engine: None) -> None:
    checks = api.doctor(settings=api.load_settings())
    assert [(c.name, c.ok) for c in checks] == [("engine", False)]
    assert isinstance(checks[0], api.DoctorCheck) and "cannot reach the Docker engine" in checks[0].detail


def test_doctor_reads_the_users_settings(no_engine: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    bad = tmp_path / "settings.toml"
    bad.write_text("[session]\nnetwrok = 1\n")
    monkeypatch.setenv("DEJIMA_SETTINGS", str(bad))
    with pytest.raises(api.SettingsError, match="'session.netwrok' is not a known key"):
        api.doctor()


# --- images ----------------------------------------------------------------------------------------------------


def test_images_are_listed_by_role(engine: FakeEngine) -> None:
    engine.images_ = [
        {"Id": "sha256:" + "a" * 64, "Labels": {labels.ROLE: labels.ROLE_FILTER}, "RepoTags": ["dejima/filter:1"],
         "Size": 334_000_000},
        {"Id": "sha256:" + "b" * 64, "Labels": {labels.ROLE: ""}, "RepoTags": None},
        {"Id": "sha256:" + "c" * 64, "Labels": {"other": "x"}, "RepoTags": ["theirs:1"], "Size": 1},
    ]
    assert api.images() == [api.ImageInfo("sha256:" + "a" * 64, labels.ROLE_FILTER, ("dejima/filter:1",), 334_000_000),
                             api.ImageInfo("sha256:" + "b" * 64, "", (), 0)]


def test_build_images_builds_what_is_missing_and_says_each_tag(engine: FakeEngine) -> None:
    settings = api.Settings()
    engine.present.add(settings.images.base)
    said: list[tuple[str, str]] = []
    reporter = api.QuietReporter()
    built = api.build_images(settings=settings, reporter=reporter, on_built=lambda role, tag: said.append((role, tag)))
    assert list(built) == ["filter", "session"] and said == list(built.items())
    assert engine.built == list(built.values())
    # the session image's venv probe runs no container here: said, never "done"
    assert [kind for kind, _ in reporter.messages] == ["step", "step", "step", "warning"], reporter.messages
    assert "could not record what" in reporter.messages[-1][1]
    assert api.build_images(settings=settings) == built and engine.built == list(built.values())  # present: kept
    api.build_images(settings=settings, force=True)
    assert engine.built == [*built.values(), *built.values()]


def test_prune_removes_outdated_images_and_keeps_current_and_used_ones(engine: FakeEngine) -> None:
    settings = api.Settings()
    engine.present.add(settings.images.base)
    current = api.build_images(settings=settings)

    def image(tag: str, role: str) -> dict[str, Any]:
        return {"Id": "sha256:" + "0" * 64, "Labels": {labels.ROLE: role}, "RepoTags": [tag]}

    engine.images_ = [image(current["filter"], labels.ROLE_FILTER), image(current["session"], labels.ROLE_SESSION),
                      image("dejima/filter:old", labels.ROLE_FILTER), image("dejima/session:used", labels.ROLE_SESSION),
                      image("dejima/base:trixie-minbase", "base")]
    engine.in_use.add("dejima/session:used")
    reporter = api.QuietReporter()
    assert api.prune_images(settings=settings, reporter=reporter) == (1, 1)
    assert engine.removed_images == ["dejima/filter:old"]
    assert reporter.messages == [
        ("info", "kept dejima/session:used: image dejima/session:used is in use by a container")]


# --- settings --------------------------------------------------------------------------------------------------


def test_settings_path_follows_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    assert api.settings_path() == tmp_path / "config" / "dejima" / "settings.toml"
    monkeypatch.setenv("DEJIMA_SETTINGS", str(tmp_path / "mine.toml"))
    assert api.settings_path() == tmp_path / "mine.toml"
    assert main(["settings", "path"]) == ExitStatus.SUCCESS
    assert capsys.readouterr().out == f"{tmp_path / 'mine.toml'}\n"


def test_settings_reference_is_what_the_command_line_prints(capsys: pytest.CaptureFixture[str]) -> None:
    reference = api.settings_reference()
    assert "extra_ca_dir" in reference and "base_fallback" in reference
    assert main(["settings", "reference"]) == ExitStatus.SUCCESS
    assert capsys.readouterr().out == reference


def test_the_shown_settings_are_load_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "settings.toml"
    path.write_text('[images]\nbase = "debian:bookworm-slim"\n')
    monkeypatch.setenv("DEJIMA_SETTINGS", str(path))
    assert main(["settings", "show"]) == ExitStatus.SUCCESS
    assert parse_settings(capsys.readouterr().out, "shown") == api.load_settings()  # TOML that reads back
    assert api.load_settings().images.base == "debian:bookworm-slim"


# --- manifests -------------------------------------------------------------------------------------------------


def user_manifests(tmp_path: Path) -> Path:
    """A user's manifests: a broken harness of their own and an override of a shipped workflow."""
    config = tmp_path / "config" / "dejima"
    (config / "harnesses").mkdir(parents=True)
    (config / "harnesses" / "mine.toml").write_text("schema = 1\n")
    (config / "workflows").mkdir()
    shipped = next(m for m in api.manifests() if m.ref == "workflows/python")
    (config / "workflows" / "python.toml").write_text(Path(shipped.source).read_text())
    return config


def test_manifests_lists_shipped_overridden_and_broken_ones(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    shipped = {m.ref: m for m in api.manifests()}
    assert {"harnesses/shell", "workflows/python", "backends/anthropic", "forges/github"} <= set(shipped)
    assert not any(m.broken or m.overrides for m in shipped.values())
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    config = user_manifests(tmp_path)
    found = api.manifests()
    assert [(m.kind, m.name) for m in found] == sorted((m.kind, m.name) for m in found)
    by_ref = {m.ref: m for m in found}
    python, mine = by_ref["workflows/python"], by_ref["harnesses/mine"]
    assert (python.source, python.overrides, python.broken) == (
        str(config / "workflows" / "python.toml"), shipped["workflows/python"].source, False)
    assert mine.broken and mine.description is None and isinstance(mine.error, api.InputError)
    assert mine.error.message == f"{config / 'harnesses' / 'mine.toml'}: 'description' is missing"
    assert main(["manifests", "list", "--json"]) == ExitStatus.SUCCESS
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["kind"], r["name"], r["source"], r["overrides"], r["broken"]) for r in rows] == [
        (m.kind, m.name, m.source, m.overrides, m.error.message if m.error else None) for m in found]


def test_manifest_is_one_as_sessions_use_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    shell = api.manifest("harnesses", "shell")
    assert isinstance(shell, api.Manifest) and shell.ref == "harnesses/shell"
    assert main(["manifests", "show", "harnesses/shell", "--json"]) == ExitStatus.SUCCESS
    assert json.loads(capsys.readouterr().out) == json.loads(json.dumps(asdict(shell), default=str))
    assert api.MANIFEST_KINDS == ("forges", "workflows", "harnesses", "backends")
    with pytest.raises(api.UsageError, match="no manifest kind 'harness'"):
        api.manifest("harness", "shell")
    with pytest.raises(api.InputError, match="no harness named 'nosuch'"):
        api.manifest("harnesses", "nosuch")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    user_manifests(tmp_path)
    with pytest.raises(api.InputError, match="'description' is missing"):
        api.manifest("harnesses", "mine")


def test_manifest_reference_is_what_the_command_line_prints(capsys: pytest.CaptureFixture[str]) -> None:
    reference = api.manifest_reference()
    assert "detect" in reference and "credentials" in reference
    assert main(["manifests", "reference"]) == ExitStatus.SUCCESS
    assert capsys.readouterr().out == reference
