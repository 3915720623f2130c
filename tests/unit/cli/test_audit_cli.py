"""`dejima-audit` on findings left by a real audit: list, show with a diff, ack bound to content,
restore to the exact start bytes and mode."""

from __future__ import annotations

import io
import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dejima.adapters.findings import FindingStore
from dejima.cli.audit import main
from dejima.errors import ExitStatus
from dejima.orchestration import exit_audit
from dejima.ui.console import UI, plain_console


def records(text: str) -> list[dict[str, Any]]:  # JSON objects
    """--json prints JSON lines, as `dejima violations --json` does."""
    return [json.loads(line) for line in text.splitlines()]


def session(workspace: Path, session_id: str, change: Callable[[Path], object]) -> dict[int, str]:
    """Runs the audit around ``change``; returns the unreviewed findings' ids and paths."""
    exit_audit.start(session_id, [exit_audit.Mount("workspace", workspace)])
    change(workspace)
    ui = UI(plain_console(io.StringIO()))
    exit_audit.finish(session_id, ui)
    store = FindingStore()
    try:
        return {s.id: s.finding.path for s in store.findings(str(workspace))}
    finally:
        store.close()


def plant(root: Path) -> None:
    (root / ".vscode" / "tasks.json").write_text(json.dumps({"version": "2.0.0", "tasks": [
        {"label": "x\u202e", "command": "sh -c id", "runOptions": {"runOn": "folderOpen"}}]}))
    hook = root / ".git" / "hooks" / "post-checkout"
    hook.write_text("#!/bin/sh\nid\n")
    hook.chmod(0o755)


def test_list_show_ack_and_the_finding_comes_back_when_the_content_changes(
        workspace: Path, out: io.StringIO, capsys: pytest.CaptureFixture[str]) -> None:
    ids = session(workspace, "s1", plant)
    assert main(["list"]) == ExitStatus.SUCCESS
    listing = capsys.readouterr().out
    assert "I01" in listing and "G01" in listing and "critical" in listing
    assert "\u202e" not in listing
    assert main(["show", *map(str, ids)]) == ExitStatus.SUCCESS
    shown = capsys.readouterr().out
    assert "\u202e" not in shown and "\\u202e" in shown  # the label, as context: escaped, never interpreted
    assert "+#!/bin/sh" in shown and '+{"version"' in shown
    assert "--- at the start" in shown
    assert main(["ack", *map(str, ids), "--note", "my own hook"]) == ExitStatus.SUCCESS
    assert capsys.readouterr().out == f"acknowledged {len(ids)} finding(s)\n"
    assert main(["list", "--json"]) == ExitStatus.SUCCESS
    assert records(capsys.readouterr().out) == []
    session(workspace, "s2", lambda r: (r / ".git" / "hooks" / "post-checkout").write_text("#!/bin/sh\necho\n"))
    assert main(["list", "--json"]) == ExitStatus.SUCCESS
    reopened = records(capsys.readouterr().out)
    assert [(f["rule"], f["path"]) for f in reopened] == [("G01", ".git/hooks/post-checkout")]


def test_restore_puts_back_the_exact_bytes_and_mode_and_removes_what_the_session_made(
        workspace: Path, out: io.StringIO, capsys: pytest.CaptureFixture[str]) -> None:
    original = (workspace / ".vscode" / "tasks.json").read_bytes()
    ids = session(workspace, "s1", plant)
    assert main(["restore", *map(str, ids)]) == ExitStatus.SUCCESS
    assert "put back .vscode/tasks.json as it was at the start" in capsys.readouterr().out  # the answer: stdout
    tasks = workspace / ".vscode" / "tasks.json"
    assert tasks.read_bytes() == original and (tasks.stat().st_mode & 0o7777) == 0o640
    assert not (workspace / ".git" / "hooks" / "post-checkout").exists()
    assert main(["list", "--json"]) == ExitStatus.SUCCESS  # restored findings are closed (not reviewed)
    assert records(capsys.readouterr().out) == []
    assert main(["list", "--all", "--json"]) == ExitStatus.SUCCESS
    closed = records(capsys.readouterr().out)
    assert all(f["closed_note"].startswith("closed: restored by dejima-audit restore") and not f["reviewed"]
               for f in closed)


def test_restore_refuses_a_file_changed_since_the_audit_and_never_follows_links(
        workspace: Path, out: io.StringIO, tmp_path: Path) -> None:
    ids = session(workspace, "s1", plant)
    (workspace / ".vscode" / "tasks.json").write_text("edited later by the user\n")
    tasks = next(i for i, path in ids.items() if path == ".vscode/tasks.json")
    assert main(["restore", str(tasks)]) == ExitStatus.FAILURE
    assert "changed since the audit" in out.getvalue()
    outside = tmp_path / "outside"
    outside.mkdir()
    (workspace / ".vscode" / "tasks.json").unlink()
    os.rmdir(workspace / ".vscode")
    (workspace / ".vscode").symlink_to(outside)
    for finding_id in ids:
        main(["restore", "--force", str(finding_id)])
    assert list(outside.iterdir()) == []
    assert "is not a plain directory" in out.getvalue()


def test_restore_removes_a_tree_the_session_made_and_sends_an_existing_one_to_a_reinstall(
        workspace: Path, out: io.StringIO, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("not the session's\n")

    def install(root: Path) -> None:
        (root / "package.json").write_text("{}")
        (root / "node_modules" / "left-pad").mkdir(parents=True)
        (root / "node_modules" / ".package-lock.json").write_text("{}")  # npm's record of its install
        (root / "node_modules" / "left-pad" / "index.js").write_text("module.exports = 1;\n")
        (root / "node_modules" / "escape").symlink_to(outside)  # removed as a link, never followed

    [tree] = session(workspace, "s1", install)
    assert main(["restore", str(tree)]) == ExitStatus.SUCCESS
    said = capsys.readouterr().out
    assert "removed node_modules, which the session created" in said and f"`npm ci` in {workspace}" in said
    assert not (workspace / "node_modules").exists() and (outside / "keep").exists()
    install(workspace)
    [again] = session(workspace, "s2", lambda root: (root / "node_modules" / "left-pad" / "index.js").write_text(
        "module.exports = 2;\n"))
    assert main(["restore", str(again)]) == ExitStatus.FAILURE
    assert "is about a whole tree" in out.getvalue() and (workspace / "node_modules").exists()
    assert f"then `npm ci` in {workspace}" in out.getvalue()  # the clean reinstall, from the lockfile


def test_restore_of_a_python_environment_names_uv_s_clean_reinstall(workspace: Path, out: io.StringIO,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    (workspace / "uv.lock").write_text('version = 1\n[[package]]\nname = "x"\nversion = "1"\n')  # at the start

    def install(root: Path) -> None:
        (root / ".venv/lib/python3.11/site-packages").mkdir(parents=True)
        (root / ".venv/pyvenv.cfg").write_text("home = /usr/bin\n")
        (root / ".venv/lib/python3.11/site-packages/x.py").write_text("import os\n")  # no RECORD lists it

    [tree] = [i for i in session(workspace, "s1", install)]
    assert main(["restore", str(tree)]) == ExitStatus.SUCCESS
    said = capsys.readouterr().out
    assert "removed .venv, which the session created" in said and f"`uv sync --reinstall` in {workspace}" in said


def test_restore_on_cargos_and_yarns_trees_names_their_clean_commands(workspace: Path, out: io.StringIO) -> None:
    (workspace / "Cargo.toml").write_text('[package]\nname = "p"\nversion = "0.1.0"\n')
    (workspace / "package.json").write_text("{}")
    (workspace / "node_modules/a").mkdir(parents=True)
    (workspace / "node_modules/.yarn-integrity").write_text("{}")
    (workspace / "target/debug/.fingerprint/p-0123").mkdir(parents=True)
    (workspace / "target/.rustc_info.json").write_text("{}")
    (workspace / "vendor/c").mkdir(parents=True)
    (workspace / "vendor/c/.cargo-checksum.json").write_text('{"files": {}, "package": null}')

    def build(root: Path) -> None:
        (root / "target/debug/p").write_text("built\n")
        (root / "vendor/c/lib.rs").write_text("// vendored\n")
        (root / "node_modules/a/index.js").write_text("// installed\n")

    ids = session(workspace, "s1", build)
    for path, command in (("target", "cargo clean"), ("vendor", "cargo vendor"),
                          ("node_modules", "yarn install --frozen-lockfile")):
        tree = next(i for i, p in ids.items() if p == path)
        assert main(["restore", str(tree)]) == ExitStatus.FAILURE
        assert f"then `{command}` in {workspace}" in out.getvalue(), out.getvalue()


def test_usage_errors_name_the_fix(workspace: Path, out: io.StringIO) -> None:
    ids = session(workspace, "s1", plant)
    assert main(["ack"]) == ExitStatus.USAGE  # no terminal here: it says what to type instead
    listed = " ".join(map(str, sorted(ids)))
    assert f"dejima-audit show {listed}" in out.getvalue()
    assert f"dejima-audit ack {listed} --note" in out.getvalue()
    assert main(["ack", *map(str, ids)]) == ExitStatus.USAGE
    assert "ack with ids or --all needs --note" in out.getvalue()
    assert main(["ack", "--all", "1", "--note", "x"]) == ExitStatus.USAGE
    assert main(["show", "999"]) == ExitStatus.USAGE
    assert "no finding 999" in out.getvalue()
    assert main(["ack", "1", "--note", " "]) == ExitStatus.USAGE


def test_rules_lists_the_catalogue(capsys: pytest.CaptureFixture[str], out: io.StringIO) -> None:
    assert main(["rules"]) == ExitStatus.SUCCESS
    text = capsys.readouterr().out
    assert "| I01 | VS Code tasks (by key)" in text and "| G04 | git config: core.fsmonitor" in text


def test_a_start_state_that_cannot_be_read_blocks_its_workspace(workspace: Path, out: io.StringIO,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    from dejima.adapters.session_dirs import sessions_dir

    exit_audit.start("s9", [exit_audit.Mount("workspace", workspace)])
    (sessions_dir() / "s9" / "audit" / "0.snapshot").write_bytes(b"garbage")
    exit_audit.recover(UI(plain_console(io.StringIO())))
    assert main(["list", "--json", "--workspace", str(workspace)]) == ExitStatus.SUCCESS
    (unaudited,) = records(capsys.readouterr().out)
    assert (unaudited["rule"], unaudited["severity"]) == ("X00", "critical")
    assert "could not be audited" in unaudited["evidence"]
    assert not (sessions_dir() / "s9").joinpath("audit").exists()


def test_names_cannot_inject_markup_or_lines(tmp_path: Path, out: io.StringIO, capsys: pytest.CaptureFixture[str],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "400")  # one table row per line
    root = tmp_path / "w"
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    def plant(r: Path) -> None:
        (r / ".git" / "hooks" / "[bold]x\n reviewed: yes").write_text("#!/bin/sh\n")
        subprocess.run(["git", "config", "--file", str(r / ".git" / "config"), "core.pager", "[/x] [link=http://e]"],
                       check=True)

    ids = session(root, "s1", plant)
    assert main(["list"]) == ExitStatus.SUCCESS
    listing = capsys.readouterr().out
    assert "[bold]x\\u000a reviewed: yes" in listing and "[/x] [link=http://e]" in listing
    assert main(["show", *map(str, ids)]) == ExitStatus.SUCCESS
    assert "\n reviewed: yes" not in capsys.readouterr().out


def test_listing_only_reviewed_findings_asks_for_no_review(workspace: Path, out: io.StringIO,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    ids = " ".join(map(str, sorted(session(workspace, "s9", plant))))
    assert main(["list"]) == ExitStatus.SUCCESS
    assert f"dejima-audit show {ids}; undo: dejima-audit restore {ids}" in out.getvalue()  # the ids to type
    assert main(["ack", *ids.split(), "--note", "mine"]) == ExitStatus.SUCCESS
    out.truncate(0)
    out.seek(0)
    assert main(["list", "--all"]) == ExitStatus.SUCCESS
    assert str(workspace) in capsys.readouterr().out  # the reviewed findings are listed
    assert "every finding listed is reviewed" in out.getvalue()
    assert "review them" not in out.getvalue() and "dejima-audit ack" not in out.getvalue()


def npm_install(root: Path) -> None:
    (root / "package.json").write_text("{}")
    (root / "node_modules" / "left-pad").mkdir(parents=True)
    (root / "node_modules" / ".package-lock.json").write_text("{}")  # npm's record of its install
    (root / "node_modules" / "left-pad" / "index.js").write_text("module.exports = 1;\n")


def test_show_of_a_tree_gives_the_remedy_that_applies_and_names_the_clean_reinstall(
        workspace: Path, out: io.StringIO, capsys: pytest.CaptureFixture[str]) -> None:
    [created] = session(workspace, "s1", npm_install)
    assert main(["show", str(created)]) == ExitStatus.SUCCESS
    shown = capsys.readouterr().out
    assert (f"remedy: the session created this tree: dejima-audit restore {created} removes it whole; then `npm ci` "
            f"in {workspace} installs it again from the lockfile") in shown
    assert "there at the start" not in shown and "there before" not in shown  # only the case that applies
    assert "(created in the session: a directory)" in shown and "a nothing" not in shown
    assert "(a directory has no content of its own" in shown and "binary content" not in shown

    tampered = max(session(workspace, "s2", lambda root: (root / "node_modules" / "left-pad" / "index.js").write_text(
        "module.exports = 2;\n")))
    assert tampered != created
    assert main(["show", str(tampered)]) == ExitStatus.SUCCESS
    shown = capsys.readouterr().out
    assert (f"remedy: it was there at the start and its content was not kept, so nothing can be put back: delete it "
            f"and reinstall on the host: rm -r {workspace}/node_modules, then `npm ci` in {workspace}") in shown
    assert "removes it whole" not in shown and "created" not in shown
    assert "(a directory at the start, a directory at the end)" in shown and "binary content" not in shown


def test_the_table_header_is_aligned_with_one_digit_ids(workspace: Path, out: io.StringIO,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    ids = session(workspace, "s1", plant)
    assert max(ids) < 10
    assert main(["list"]) == ExitStatus.SUCCESS
    lines = capsys.readouterr().out.splitlines()
    header = next(line for line in lines if line.lstrip().startswith("id "))
    rows = [line for line in lines if line.split()[0].isdigit() and line.split()[1] in ("critical", "high")]
    assert len(rows) == len(ids)
    for row in rows:
        finding_id, severity, rule = row.split()[:3]
        assert row.index(severity) == header.index("severity"), (header, row)
        assert row.index(rule, row.index(severity) + len(severity)) == header.index("rule"), (header, row)
        assert row.index(finding_id) + len(finding_id) == header.index("id") + 2  # ids right-aligned under "id"


@pytest.mark.parametrize("action", ["show", "ack", "restore"])
def test_the_help_says_what_an_id_is(action: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main([action, "--help"])
    described = " ".join(capsys.readouterr().out.split()).replace("- ", "-")  # argparse wraps it, at hyphens too
    assert "positional arguments: ID the findings to" in described  # the argument has a description
    assert "each an id from the first column of `dejima-audit`" in described and "several may be given" in described
