"""The README's claims, each checked against the code: commands and flags it shows exist, the manifests it
lists are the ones shipped, the defaults and exit statuses it quotes are the code's, its example settings
parse, and every document it links is there. A README edited without the code (or the reverse) fails here."""

from __future__ import annotations

import re
import shlex
import signal
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

from dejima.core.limits import format_bytes, parse_size
from dejima.core.settings import parse_settings
from dejima.errors import ExitStatus

ROOT = Path(__file__).parents[2]
README = (ROOT / "README.md").read_text()
COMMANDS = {"dejima": "dejima.cli.launch", "dejima-allow": "dejima.cli.allow", "dejima-audit": "dejima.cli.audit"}


def code_blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README, re.S)


def command_lines() -> list[list[str]]:
    """Every dejima command the README shows, as words (comments and leading VAR=... assignments dropped)."""
    lines = []
    for block in code_blocks("bash"):
        for line in block.splitlines():
            words = shlex.split(line, comments=True)
            while words and re.fullmatch(r"[A-Z_]+=.*", words[0]):
                words.pop(0)
            if words and words[0] in COMMANDS:
                lines.append(words)
    return lines


@cache
def help_text(program: str, *sub: str) -> str:
    done = subprocess.run([sys.executable, "-c", f"import sys; from {COMMANDS[program]} import main; "
                           "sys.exit(main(sys.argv[1:]))", *sub, "--help"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"{program} {' '.join(sub)} --help failed: {done.stderr}"
    return done.stdout


def subcommand(words: list[str]) -> tuple[str, ...]:
    """The management subcommand a line uses, or () for a session start (`dejima PATH ...`)."""
    from dejima.cli.manage import COMMANDS as MANAGE

    if words[0] == "dejima" and len(words) > 1 and words[1] in MANAGE:
        return (words[1],)
    if words[0] == "dejima-audit" and len(words) > 1 and not words[1].startswith("-"):
        return (words[1],)
    return ()


@pytest.mark.parametrize("words", command_lines(), ids=lambda w: " ".join(w)[:60])
def test_every_flag_the_readme_shows_is_in_that_commands_help(words: list[str]) -> None:
    sub = subcommand(words)
    text = help_text(words[0], *sub)
    for flag in (w.split("=")[0] for w in words if w.startswith("--")):
        shown = re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", text)
        assert shown, f"{flag} is not in `{words[0]} {' '.join(sub)} --help`"


def test_the_readme_shows_every_management_command() -> None:
    from dejima.cli.manage import COMMANDS as MANAGE

    shown = {words[1] for words in command_lines() if words[0] == "dejima" and len(words) > 1}
    assert set(MANAGE) - shown == set(), "a command the README does not show"


def test_the_actions_the_readme_lists_are_the_commands_choices() -> None:
    for command, listed in re.findall(r"^dejima (images|settings) \[([a-z|]+)\]", README, re.M):
        choices = re.search(r"\{([a-z,]+)\}", help_text("dejima", command))
        assert choices and choices[1].split(",") == listed.split("|"), command


@pytest.mark.parametrize("kind", ["forges", "workflows", "harnesses", "backends"])
def test_the_manifests_the_readme_names_are_the_shipped_ones(kind: str) -> None:
    sentence = re.search(r"\*\*Manifests\*\* pick what a session needs:(.*?)\. Workflows are", README, re.S)
    assert sentence, "the README's manifest sentence moved: update this test"
    part = re.search(rf"{kind} \(([^)]*)\)", sentence[1].replace("\n", " "))
    assert part, kind
    # "a generic OpenAI-compatible gateway" is how the prose names openai-compatible
    prose = part[1].replace("a generic OpenAI-compatible gateway", "openai-compatible")
    named = {word.strip() for word in prose.replace(" and ", ",").split(",")}
    shipped = {path.stem for path in (ROOT / kind).glob("*.toml")}
    assert named == shipped


def test_the_exit_statuses_it_quotes_are_the_codes() -> None:
    text = " ".join(README.split())
    assert "125 when dejima fails" in text and ExitStatus.DEJIMA_FAILED == 125
    assert "127 when the command does not exist" in text and ExitStatus.COMMAND_NOT_FOUND == 127
    assert "2 for bad input" in text and ExitStatus.USAGE == 2
    assert "122 when the start is refused because earlier sessions left unreviewed critical audit findings" in text \
        and ExitStatus.UNREVIEWED_FINDINGS == 122
    assert "143 after `dejima stop`" in text and ExitStatus.signalled(signal.SIGTERM) == 143


def test_the_limits_it_quotes_are_the_defaults() -> None:
    from dejima.core.settings import LimitSettings

    limits = LimitSettings()
    found = re.search(r"- \*\*limits\*\*(.*?)\n\n", README, re.S)
    assert found, "the README's limits paragraph moved: update this test"
    paragraph = " ".join(found[1].split())
    session_memory = limits.session_memory.replace("%", " %")
    filter_memory = format_bytes(parse_size(limits.filter_memory))
    assert f"the session {limits.session_pids}, the filter {limits.filter_pids}" in paragraph
    assert f"the session {session_memory} of the engine's, the filter {filter_memory}" in paragraph
    assert f"the session's `/tmp` ({format_bytes(parse_size(limits.session_tmp_size))})" in paragraph


def test_its_example_settings_are_valid() -> None:
    blocks = code_blocks("toml")
    assert blocks, "the README lost its settings example"
    for block in blocks:
        parse_settings(block, "README.md")


def test_the_base_url_it_quotes_is_what_the_anthropic_route_gets() -> None:
    from dejima.core.paths import BRIDGE_PORT

    assert f"ANTHROPIC_BASE_URL=http://127.0.0.1:{BRIDGE_PORT}/r/anthropic-api-key" in README
    backend = (ROOT / "backends" / "anthropic.toml").read_text()
    assert "anthropic-api-key" in backend


@pytest.mark.parametrize("link", sorted(set(re.findall(r"\]\(([^)#]+)\)", README))))
def test_every_document_it_links_exists(link: str) -> None:
    assert (ROOT / link).exists(), link
