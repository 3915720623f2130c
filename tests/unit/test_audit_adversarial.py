"""Text made to stall the exit audit: every content rule reads it in time linear in its length.

A backtracking matcher spends the square of a line's length on a line of `curl`s without `| sh`,
and more on a long key against a glob with several `*`: main before this took minutes on the
file below, and an agent could have written one that held the review for hours. The hostile
workspace is audited through the real code (capture, then audit_mount, as after a session) and
compared with a benign workspace of the same size, measured in the same run.
"""

from __future__ import annotations

import random
import re
import subprocess
import time
from pathlib import Path

import pytest

from dejima.core.audit.signals import SIGNALS, content_signals
from dejima.orchestration.exit_audit import Mount, audit_mount, capture

MiB = 1 << 20
# Each piece repeats the start of a signal without its end, so a backtracking matcher tries every
# remaining end of the line at every repetition; together, on one line, 11 MiB.
STALLS = ["curl " * (MiB // 5), "wget x " * (MiB // 7), "nc " * (MiB // 3), "socat " * (MiB // 6),
          "${{ secrets.X }} " * (MiB // 17), "https:// " * (MiB // 9), ("A" * 199 + "!") * (MiB // 200),
          ("\\x41" * 39 + "!") * (MiB // 157), "never " * (MiB // 6), "do not tell " * (MiB // 12), "env " * (MiB // 4)]


def workspace(root: Path, hostile: bool) -> tuple[float, list[tuple[str, str, str]]]:
    """Seconds the end audit took, and its findings, for a workspace given a hook, a Cargo.toml and a
    VS Code setting: made to stall a backtracking matcher, or plain text of the same sizes."""
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    (root / "README").write_text("x\n")
    state = capture(Mount("workspace", root))
    text = "".join(STALLS) if hostile else "plain words " * (len("".join(STALLS)) // 12)
    hook = root / ".git" / "hooks" / "pre-commit"
    hook.write_text("#!/bin/sh\n" + text)
    hook.chmod(0o755)
    key = "dependencies." * (MiB // 13) if hostile else "d" * MiB  # against `*dependencies.*.registry*`
    (root / "Cargo.toml").write_text(f'[package]\nname = "x"\n\n["{key}x"]\nregistry = "z"\n')
    value = "a" * (2 * MiB) if hostile else "./" + "a" * (2 * MiB)  # a run of path characters without a dot
    (root / ".vscode").mkdir()
    (root / ".vscode" / "settings.json").write_text('{"python.defaultInterpreterPath": "' + value + '"}')
    started = time.perf_counter()
    found, _ = audit_mount(state)
    return time.perf_counter() - started, [(f.rule, f.severity, f.path) for f in found]


def test_a_workspace_made_to_stall_the_rules_is_audited_in_linear_time(tmp_path: Path) -> None:
    benign, _ = workspace(tmp_path / "benign", hostile=False)
    hostile, found = workspace(tmp_path / "hostile", hostile=True)
    assert hostile <= 1.0 or hostile <= 6 * benign, f"hostile {hostile:.2f} s, benign {benign:.2f} s"
    assert ("G01", "critical", ".git/hooks/pre-commit") in found  # read whole, and still found
    print(f"audit of 14 MiB made to backtrack: {hostile:.2f} s (the same size of plain text: {benign:.2f} s)")


OLD_SIGNALS = {name: re.compile(pattern, re.MULTILINE) for name, pattern in SIGNALS}  # Python's engine
PIECES = ["curl ", "wget ", "| sh", "|bash", "| python", "$(curl x)", " iex ", "python -c", "node -e", "eval",
          "A" * 60, "=", "base64 -d", "atob(", "\\x41" * 15, "/dev/tcp/", "nc ", " -e ", "socat ", "exec:",
          "~/.ssh", ".netrc", "printenv", "env |", "process.env)", "${{ secrets.X }}", "https://", "http://1.2.3.4",
          "ngrok", "nohup", " &", "\n", "do not ", "tell ", "the user", "ignore previous instructions", " ", "x"]


@pytest.mark.parametrize("seed", range(5))
def test_the_linear_engine_finds_what_pythons_found(seed: int) -> None:
    """RE2 reads the same patterns as before: on texts made of their pieces, the same signals."""
    rng = random.Random(seed)
    for _ in range(400):
        text = "".join(rng.choice(PIECES) for _ in range(rng.randint(1, 40)))
        expected = [name for name, pattern in OLD_SIGNALS.items() if pattern.search(text)]
        assert content_signals(text) == expected, text


def test_each_signal_reads_a_stalling_text_in_linear_time() -> None:
    plain = "plain words " * (MiB // 12)
    started = time.perf_counter()
    content_signals(plain * 11)
    benign = time.perf_counter() - started
    started = time.perf_counter()
    # One signal is really there: a `${{ secrets.X }}`, then a URL further on the same line.
    assert content_signals("".join(STALLS)) == ["an environment dump"]
    hostile = time.perf_counter() - started
    assert hostile <= 0.5 or hostile <= 6 * benign, f"hostile {hostile:.2f} s, benign {benign:.2f} s"
