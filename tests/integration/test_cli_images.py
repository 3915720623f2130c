"""`dejima doctor`, `dejima images list` and `dejima sessions` as a new user runs them, through pipes.
Right after a first session the doctor checks the images that session used (its workspace owner's, its
manifests' layers) and runs its self-test; the listing marks them. Settings of their own (a base tag no
one else builds on) make images no other test or user has, so what is checked is what this session built.
The session list, piped, is on stdout and whole."""

from __future__ import annotations

import io
import json
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from dejima.adapters.image_builds import find_base
from dejima.adapters.runtime import Runtime
from dejima.core.settings import Settings
from tests.integration.conftest import Images, user_workspace
from tests.world import User

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the first session runs as root on a user's project")


def dejima(*args: str, settings: Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", "from dejima.cli.launch import main; raise SystemExit(main())",
                           *args], capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL,
                          env={**os.environ, "DEJIMA_SETTINGS": str(settings)}, cwd=cwd)


@pytest.fixture
def first_session(runtime: Runtime, images: Images, user: User, world_dir: Path) -> Iterator[tuple[Path, Path]]:
    """A project a first session ran on (as root, on the user's workspace, as quickstart does) with settings
    whose base is this test's own tag of the base image; the images made for it removed afterwards."""
    base = find_base(runtime, Settings())
    assert base is not None  # the images fixture made it
    tag = f"dejima-test-base:{secrets.token_hex(4)}"
    subprocess.run(["docker", "tag", base.id, tag], check=True, capture_output=True)
    settings = world_dir / f"settings-{tag.rpartition(':')[2]}.toml"
    settings.write_text(f'[images]\nbase = "{tag}"\nbase_fallback = "none"\n\n'
                        '[network]\nupstream_dns = ["192.0.2.53"]\n')  # no query is made: `true` asks nothing
    workspace = user_workspace(world_dir, user, f"first-{tag.rpartition(':')[2]}")
    (workspace / "README.md").write_text("a project\n")
    try:
        started = dejima("-q", str(workspace), "--", "true", settings=settings)
        assert started.returncode == 0, started.stderr
        yield workspace, settings
    finally:
        from dejima.adapters.host import load_settings
        from dejima.orchestration.project_images import project_images
        from dejima.ui.console import UI, plain_console

        try:
            chosen = load_settings(settings, required=True)
            quiet = UI(plain_console(io.StringIO()))
            for directory in (workspace, None):
                made = project_images(runtime, chosen, directory, quiet)
                for image in made.tags if made is not None else ():
                    if runtime.image_id(image):
                        runtime.remove_image(image)
        finally:
            runtime.remove_image(tag)


def test_doctor_after_a_first_session_checks_its_images_and_runs_the_self_test(
        first_session: tuple[Path, Path]) -> None:
    workspace, settings = first_session
    doctor = dejima("doctor", "--json", settings=settings, cwd=workspace)  # in the project, as after quickstart
    checks = {c["check"]: c for c in map(json.loads, doctor.stdout.splitlines())}
    assert checks["images"]["ok"], checks["images"]
    assert str(workspace) in checks["images"]["detail"]
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    assert checks["session has no egress"]["ok"] and "TCP blocked" in checks["session has no egress"]["detail"]
    listed = dejima("images", "list", settings=settings, cwd=workspace)
    assert listed.returncode == 0, listed.stderr
    used = [line for line in listed.stdout.splitlines() if str(workspace) in line]
    session_rows = [line for line in used if "│ session" in line]
    assert len(session_rows) == 1, listed.stdout  # the session image the first session ran, marked
    assert any(line.startswith(f"{workspace} (harness shell) uses: session dejima/session:") for line in used)
    assert any(line.startswith("the current settings use: base dejima-test-base:")
               for line in listed.stdout.splitlines()), listed.stdout


def test_doctor_says_which_images_are_missing_and_its_exit_statuses(runtime: Runtime, images: Images,
                                                                    world_dir: Path, user: User) -> None:
    settings = world_dir / "settings-no-base.toml"
    settings.write_text('[images]\nbase = "dejima-test-base:never-made"\nbase_fallback = "none"\n')
    workspace = user_workspace(world_dir, user, "doctor-no-base")
    doctor = dejima("doctor", str(workspace), "--json", settings=settings)
    assert doctor.returncode == 1, doctor.stderr  # a failed check
    checks = {c["check"]: c for c in map(json.loads, doctor.stdout.splitlines())}
    assert not checks["images"]["ok"] and "dejima doctor --build" in checks["images"]["detail"]
    assert "nftables in a namespace" not in checks  # the checks after a failed one do not run
    helped = dejima("doctor", "--help", settings=settings)
    for status in ("0 ", "1 ", "2 ", "125 "):
        assert f"\n  {status}" in helped.stdout, helped.stdout


def test_the_session_list_reaches_a_pipe_whole(runtime: Runtime, images: Images, world_dir: Path) -> None:
    from tests.conftest import TEST_SCOPE

    workspace = world_dir / ("a-project-whose-path-is-longer-than-a-terminal-" + "w" * 60)
    labels = {"dejima.scope": TEST_SCOPE, "dejima.session": "pipe1234", "dejima.role": "filter",
              "dejima.workspace": str(workspace), "dejima.launcher": "gone:1:1"}
    created = subprocess.run(["docker", "create", *(f"--label={k}={v}" for k, v in labels.items()), images.filter,
                              "true"], check=True, capture_output=True, text=True).stdout.strip()
    try:
        listed = dejima("sessions", settings=world_dir / "absent.toml")
        assert listed.returncode == 0, listed.stderr
        (row,) = [line for line in listed.stdout.splitlines() if "pipe1234" in line]
        assert str(workspace) in row and "stale" in row and listed.stderr == ""
    finally:
        runtime.remove(created)
