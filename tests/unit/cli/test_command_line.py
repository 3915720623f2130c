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


def test_a_mistyped_command_is_named_and_a_directory_of_that_name_is_still_a_workspace(tmp_path: Path) -> None:
    typo = run("dejima", "sesions", cwd=tmp_path)
    assert typo.returncode == ExitStatus.USAGE
    assert "'sesions' is neither a command nor a directory here" in typo.stderr
    assert "did you mean 'sessions'?" in typo.stderr and "does not exist" not in typo.stderr
    (tmp_path / "sesions").mkdir()
    as_root = ["--as-root"] if os.getuid() == 0 else []
    workspace = run("dejima", "sesions", "--render", *as_root, cwd=tmp_path)  # a real directory: a workspace, as ever
    assert workspace.returncode == 0, workspace.stderr
    assert "did you mean" not in workspace.stderr


@pytest.mark.parametrize(("args", "guess"), [
    (["--harness", "claud"], "did you mean 'claude-code'?"),
    (["--workflow", "pyhton"], "did you mean 'python'?"),
    (["--forge", "githb"], "did you mean 'github'?"),
    (["--backend", "antropic"], "did you mean 'anthropic'?"),
])
def test_a_mistyped_manifest_name_is_suggested(tmp_path: Path, args: list[str], guess: str) -> None:
    result = run("dejima", str(tmp_path), *args, "--render")
    assert result.returncode == ExitStatus.USAGE
    assert guess in result.stderr


def test_manifests_show_suggests_the_name_too() -> None:
    result = run("dejima", "manifests", "show", "harnesses/claud")
    assert result.returncode == ExitStatus.USAGE
    assert "did you mean 'claude-code'?" in result.stderr


def test_manifests_show_prints_toml_with_the_manifests_values() -> None:
    import tomllib
    from dataclasses import asdict

    from dejima import api

    result = run("dejima", "manifests", "show", "harnesses/claude-code")
    assert result.returncode == 0, result.stderr
    assert "('" not in result.stdout and "{'" not in result.stdout  # no Python tuples or dicts
    shown = tomllib.loads(result.stdout)
    manifest = asdict(api.manifest("harnesses", "claude-code"))
    assert shown["allow"] == list(manifest["allow"]) and shown["env"] == manifest["env"]
    assert shown["deny_reasons"] == manifest["deny_reasons"] and shown["command"] == list(manifest["command"])


def test_settings_show_prints_toml_that_dejima_reads_back(tmp_path: Path) -> None:
    from dejima.core.settings import parse_settings

    original = tmp_path / "settings.toml"
    original.write_text('[network]\nallow = ["pypi.org", "*.pythonhosted.org:443"]\ndeny = ["evil.example"]\n'
                        'deny_reasons = { "evil.example" = "known \\u202e exfiltration host" }\n'
                        '[credentials]\nupstreams = { "anthropic-api-key" = "https://gw.corp.example/a" }\n'
                        '[session]\nstop_timeout = 2.5\n')
    shown = run("dejima", "settings", "show", DEJIMA_SETTINGS=str(original))
    assert shown.returncode == 0, shown.stderr
    assert not shown.stdout.lstrip().startswith("{")  # TOML, not JSON
    assert "\u202e" not in shown.stdout  # a bidi mark is written as its escape
    again = tmp_path / "again.toml"
    again.write_text(shown.stdout)
    reread = run("dejima", "settings", "show", DEJIMA_SETTINGS=str(again))
    assert reread.returncode == 0, reread.stderr
    assert reread.stdout == shown.stdout
    assert parse_settings(shown.stdout, "shown") == parse_settings(original.read_text(), "original")


def test_help_names_dejima_allow_and_dejima_audit_and_completion() -> None:
    text = run("dejima", "--help").stdout
    assert re.search(r"^  dejima-allow .*refused", text, re.M)
    assert re.search(r"^  dejima-audit .*review", text, re.M)
    assert "dejima completion SHELL" in text


def completion_script(shell: str) -> str:
    result = run("dejima", "completion", shell)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_bash_loads_the_completion_script_and_completes(tmp_path: Path) -> None:
    script = tmp_path / "dejima.bash"
    script.write_text(completion_script("bash"))
    (tmp_path / "workspace").mkdir()
    probe = r'''
set -u
source "$1"
complete -p dejima dejima-audit dejima-allow
function="$(complete -p dejima | sed -n 's/.*-F \([^ ]*\) .*/\1/p')"
try() {
    COMP_WORDS=("$@"); COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 )); COMPREPLY=()
    "$function"; echo "$*|${COMPREPLY[*]}"
}
cd "$2"
try dejima ses
try dejima work
try dejima workspace --harn
try dejima workspace --harness cl
try dejima images ""
try dejima manifests show workflows/ru
try dejima completion ""
try dejima-audit a
try dejima-audit ack --wo
try dejima-allow --re
'''
    done = subprocess.run(["bash", "--norc", "--noprofile", "-c", probe, "probe", str(script), str(tmp_path)],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    registered, answers = lines[:3], dict(line.split("|", 1) for line in lines[3:])
    assert all(line.startswith("complete -F ") for line in registered)
    assert answers["dejima ses"] == "sessions"
    assert answers["dejima work"] == "workspace"  # a directory: the workspace
    assert answers["dejima workspace --harn"] == "--harness"
    assert answers["dejima workspace --harness cl"] == "claude-code"
    assert answers["dejima images "] == "list build bootstrap prune"
    assert answers["dejima manifests show workflows/ru"] == "workflows/ruby workflows/rust"
    assert answers["dejima completion "] == "bash zsh fish"
    assert answers["dejima-audit a"] == "ack"
    assert answers["dejima-audit ack --wo"] == "--workspace"
    assert answers["dejima-allow --re"] == "--reason --revoke"


def test_zsh_and_fish_scripts_name_the_same_commands() -> None:
    zsh, fish = completion_script("zsh"), completion_script("fish")
    assert "bashcompinit" in zsh and "complete -F _dejima_complete dejima dejima-audit dejima-allow" in zsh
    assert "complete -c dejima " in fish and "-l harness -x -a" in fish and "claude-code" in fish
    assert "complete -c dejima-audit " in fish and "complete -c dejima-allow " in fish


def test_shipped_manifests_come_from_the_installed_package_as_the_docs_say(tmp_path: Path) -> None:
    import json

    from tests.world import REPO, install_for_other_user

    docs = " ".join((REPO / "docs" / "manifests.md").read_text().split())
    assert "Shipped manifests are read from the installed package (its data `dejima.assets.<kind>`" in docs
    assert "live in this repository's" not in docs
    installed = install_for_other_user(tmp_path / "site")  # a plain (non-editable) install's layout
    listing = subprocess.run(
        [sys.executable, "-c", "import sys; from dejima.cli.launch import main; sys.exit(main(sys.argv[1:]))",
         "manifests", "list", "--json"], capture_output=True, text=True, timeout=60, cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(installed)})
    assert listing.returncode == 0, listing.stderr
    sources = {json.loads(line)["source"] for line in listing.stdout.splitlines()}
    assert sources and all(source.startswith(f"{installed}/dejima/assets/") for source in sources), sources
