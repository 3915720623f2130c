"""`dejima-audit`: review what sessions left in workspaces (not implemented yet)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from dejima.cli import exit_codes
from dejima.ui.console import UI


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="dejima-audit",
        description="List and acknowledge persistence findings (git hooks, IDE tasks, agent configs...)\n"
        "that sessions left in their workspaces.\n\n"
        "NOT YET IMPLEMENTED: the exit-time persistence audit lands in its own issue. Until then\n"
        "dejima does not review what a session changed; review `git status` yourself.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("action", nargs="?", choices=["list", "show", "ack", "restore"])
    parser.parse_args(argv)
    UI().warn("dejima-audit is not implemented yet (see --help)")
    return exit_codes.NOT_YET
