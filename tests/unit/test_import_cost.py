"""Small commands import only what they use (issue 14): `dejima --help` answers without the engine
client, jinja2, rich tables or the audit catalogue; `dejima sessions` without the docker SDK,
jinja2, the audit or rich tables when there is no table to show; `dejima-audit` with nothing to
review without Docker, jinja2 or rich tables. Each command runs in a fresh interpreter, as a user
runs it, and reports which modules it had loaded when it exited. Timings live in bench/
(small-command latency)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SDK = ("docker", "requests", "urllib3")
DOCKER = (*SDK, "dejima.adapters.runtime", "dejima.adapters.engine")
TEMPLATES = ("jinja2",)
TABLES = ("rich.table",)
AUDIT = ("dejima.core.audit.catalogue", "dejima.orchestration.exit_audit", "dejima.adapters.tree_walk", "yaml")

# Runs ENTRY's main(argv) and, at exit, writes the loaded module names where the test reads them.
PROBE = """
import atexit, json, sys
def dump():
    with open(sys.argv[1], "w") as out:
        json.dump(sorted(sys.modules), out)
atexit.register(dump)
module = __import__(sys.argv[2], fromlist=["main"])
raise SystemExit(module.main(sys.argv[3:]))
"""

ENTRIES = {"dejima": "dejima.cli.launch", "dejima-audit": "dejima.cli.audit"}


def loaded(tmp_path: Path, command: list[str]) -> tuple[int, set[str]]:
    report = tmp_path / "modules.json"
    env = dict(os.environ, XDG_STATE_HOME=str(tmp_path / "state"), XDG_CONFIG_HOME=str(tmp_path / "config"),
               XDG_DATA_HOME=str(tmp_path / "data"), DEJIMA_SCOPE="import-cost",
               DOCKER_HOST=f"unix://{tmp_path}/no-engine.sock")  # never reaches a real engine
    env.pop("DEJIMA_SETTINGS", None)
    result = subprocess.run([sys.executable, "-c", PROBE, str(report), ENTRIES[command[0]], *command[1:]],
                            env=env, capture_output=True, text=True, timeout=60)
    return result.returncode, set(json.loads(report.read_text()))


def heavy(modules: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(n for n in names if n in modules or any(m.startswith(n + ".") for m in modules))


@pytest.mark.parametrize("command", [["dejima", "--help"], ["dejima-audit", "--help"], ["dejima", "sessions", "--help"],
                                     ["dejima", "settings", "path"]])
def test_help_imports_nothing_heavy(tmp_path: Path, command: list[str]) -> None:
    status, modules = loaded(tmp_path, command)
    assert status == 0
    assert heavy(modules, DOCKER + TEMPLATES + TABLES + AUDIT) == []


def test_sessions_imports_only_the_engine_client(tmp_path: Path) -> None:
    status, modules = loaded(tmp_path, ["dejima", "sessions"])
    assert status != 0  # no engine at DOCKER_HOST: it got as far as connecting
    assert "dejima.adapters.engine" in modules
    assert heavy(modules, SDK + TEMPLATES + TABLES + AUDIT) == []


def test_audit_with_nothing_to_review_imports_no_engine_templates_or_tables(tmp_path: Path) -> None:
    status, modules = loaded(tmp_path, ["dejima-audit"])
    assert status == 0
    assert "dejima.adapters.findings" in modules  # it did read the (empty) store
    assert heavy(modules, DOCKER + TEMPLATES + TABLES) == []


def test_the_probe_sees_heavy_imports(tmp_path: Path) -> None:
    """Control: a command that does show a table and the catalogue is caught by the same check."""
    status, modules = loaded(tmp_path, ["dejima-audit", "rules"])
    assert status == 0
    assert "dejima.core.audit.catalogue" in heavy(modules, TABLES + AUDIT)
