"""A real agent in the image: the claude-code harness installs the npm package, and it runs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dejima.adapters.runtime import Runtime
from tests.world import User, run_dejima


@pytest.fixture
def no_forwarding(world_dir: Path) -> str:
    """Deny every name the harness would allow: no query leaves the filter, so these tests send
    nothing beyond the machine even if the program looks a name up."""
    path = world_dir / "harness-no-forwarding.toml"
    path.write_text('[network]\ndeny = ["api.anthropic.com"]\n')
    path.chmod(0o644)
    return str(path)


@pytest.mark.timeout(1800)  # the first run builds the composed image: apt, npm
def test_claude_code_runs_inside_the_session(runtime: Runtime, images: object, user: User, scope: str,
                                             workspace: Path, no_forwarding: str) -> None:
    # The first run builds the composed session image (nodejs, npm, @anthropic-ai/claude-code).
    result = run_dejima(user, scope, "--harness", "claude-code", str(workspace), "--", "claude", "--version",
                        timeout=1500, DEJIMA_SETTINGS=no_forwarding)
    assert result.returncode == 0, result.stderr[-3000:]
    assert re.search(r"^\d+\.\d+\.\d+ \(Claude Code\)$", result.stdout, re.MULTILINE), result.stdout
    assert "harness claude-code" in result.stderr


@pytest.mark.timeout(1800)
def test_claude_code_telemetry_and_updates_are_off(runtime: Runtime, images: object, user: User, scope: str,
                                                  workspace: Path, no_forwarding: str) -> None:
    secret = "sk-ant-test-host-secret-must-not-leak"
    result = run_dejima(user, scope, "-q", "--harness", "claude-code", str(workspace), "--", "env", timeout=1500,
                        ANTHROPIC_API_KEY=secret, DEJIMA_SETTINGS=no_forwarding)
    env = dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line)
    assert env["DISABLE_TELEMETRY"] == "1" and env["DISABLE_AUTOUPDATER"] == "1"
    assert env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] == "1"
    assert secret not in result.stdout  # the host's real key never enters the session
