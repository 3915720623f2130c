"""Fixtures of the `dejima-audit` tests: its output captured, a workspace with a git repository and an
empty VS Code task list."""

from __future__ import annotations

import io
import subprocess
from pathlib import Path

import pytest

from dejima.ui.console import UI, plain_console


@pytest.fixture
def out(monkeypatch: pytest.MonkeyPatch) -> io.StringIO:
    buffer = io.StringIO()
    monkeypatch.setattr("dejima.cli._run.UI", lambda: UI(plain_console(buffer, width=240)))
    return buffer


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    (root / ".vscode").mkdir()
    (root / ".vscode" / "tasks.json").write_text('{"version": "2.0.0", "tasks": []}\n')
    (root / ".vscode" / "tasks.json").chmod(0o640)
    return root
