"""Small commands: `dejima --help`, `dejima sessions`, `dejima-audit` against `python -c pass`,
alternated, each a fresh process as a user runs it (bytecode compiled, as an installed package is).
The goal is absolute (≤ 300 ms each); the ratio shows what the interpreter alone costs."""

from __future__ import annotations

import subprocess
from pathlib import Path

from bench.common import PYTHON, REPO, Env, Row, alternate, load, median, timed

GOAL_MS = 300.0


def script(name: str) -> str:
    path = Path(PYTHON).parent / name
    if not path.exists():
        raise RuntimeError(f"no {name} next to {PYTHON}: install dejima in this environment (scripts/setup-venv)")
    return str(path)


def run(env: Env, runs: int) -> list[Row]:
    # An installed dejima has its bytecode compiled; an editable checkout may not (PYTHONDONTWRITEBYTECODE).
    subprocess.run([PYTHON, "-m", "compileall", "-q", str(REPO / "dejima")], check=True, stdout=subprocess.DEVNULL)
    commands = {  # the installed entry points, as a user starts them
        "dejima --help": [script("dejima"), "--help"],
        "dejima sessions": [script("dejima"), "sessions"],
        "dejima-audit": [script("dejima-audit")],
    }
    rows = []
    for name, command in commands.items():
        before = load()
        samples = alternate({
            "dejima": lambda command=command: timed(command, env.vars) * 1000,  # type: ignore[misc]
            "anchor": lambda: timed([PYTHON, "-c", "pass"]) * 1000,
        }, runs)
        rows.append(Row(f"small command: {name}", "ms", median(samples["dejima"]), median(samples["anchor"]),
                        "python -c pass", GOAL_MS, absolute=True, samples=samples, load=[before, load()]))
    return rows
