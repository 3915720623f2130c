"""The command line as a new user meets it, run as a real process through a pipe: messages that
name the place and the fix, help that reads, suggestions for a typo, output that reads back."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from dejima.core.settings import Settings
from dejima.errors import ExitStatus

ENTRY = {"dejima": "dejima.cli.launch", "dejima-audit": "dejima.cli.audit", "dejima-allow": "dejima.cli.allow"}


def run(program: str, *args: str, cwd: Path | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    """One of dejima's console scripts, as its entry point runs it; no engine is needed for these."""
    code = f"import sys; from {ENTRY[program]} import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "COLUMNS": "100", **env}, cwd=cwd, stdin=subprocess.DEVNULL)


def test_a_toml_syntax_error_names_file_line_column_and_the_fix(tmp_path: Path) -> None:
    settings = tmp_path / "settings.toml"
    settings.write_text('[network]\nallow = ["pypi.org",\n\n')  # a list left open: "at end of document"
    result = run("dejima", "settings", "show", DEJIMA_SETTINGS=str(settings))
    assert result.returncode == ExitStatus.USAGE
    assert f"{settings}:2:21: not valid TOML: Invalid value at the end of the file" in result.stderr
    assert '2 | allow = ["pypi.org",' in result.stderr  # the line itself
    assert "hint: close what is still open at the end of the file" in result.stderr


def test_the_empty_settings_hint_names_the_base_the_code_uses(tmp_path: Path) -> None:
    settings = tmp_path / "settings.toml"
    settings.write_text("\n")
    result = run("dejima", "settings", "show", DEJIMA_SETTINGS=str(settings))
    assert result.returncode == ExitStatus.USAGE
    assert f'[images] base = "{Settings().images.base}"' in result.stderr
    assert "trixie" in Settings().images.base and "bookworm" not in result.stderr


HELP_COMMANDS = [("dejima", "--help"), ("dejima-audit", "--help"), ("dejima-allow", "--help"),
                 *(("dejima-audit", action, "--help") for action in ("list", "show", "ack", "restore", "rules")),
                 *(("dejima", command, "--help") for command in ("sessions", "stop", "clean", "doctor", "images",
                                                                  "settings", "violations", "ledger", "manifests"))]


@pytest.mark.parametrize("command", HELP_COMMANDS, ids=" ".join)
def test_help_names_every_value_for_what_it_is(command: tuple[str, ...]) -> None:
    result = run(*command)
    assert result.returncode == 0, result.stderr
    # argparse's default metavar is the destination in capitals: DEFAULT_WORKSPACE tells nobody anything
    assert not re.search(r"--[a-z-]+ [A-Z]+_[A-Z_]+", result.stdout), result.stdout
    assert "DEFAULT_" not in result.stdout
    if command[0] == "dejima-audit":
        assert "--workspace PATH" in result.stdout or "--workspace" not in result.stdout
