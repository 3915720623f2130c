"""`dejima-allow`: grant a domain to a running session (not implemented yet)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from dejima.cli import exit_codes
from dejima.ui.console import UI


def build_parser() -> argparse.ArgumentParser:
    return argparse.ArgumentParser(
        prog="dejima-allow",
        description="Grant DOMAIN[:PORT] to a running dejima session, live, without a restart.\n\n"
        "NOT YET IMPLEMENTED: live grants land with the egress-policy work. Until then every\n"
        "session has no egress at all, and this command only says so.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    parser.add_argument("domain", nargs="?", metavar="DOMAIN[:PORT]")
    parser.parse_args(argv)
    UI().warn("dejima-allow is not implemented yet: sessions have no egress to grant from (see --help)")
    return exit_codes.NOT_YET
