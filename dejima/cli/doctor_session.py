"""`dejima doctor --session SESSION`: the escape checks against a live session, as a table or JSON lines.

Exit status: 0 when every check holds (a skipped check says why it does not apply), 1 when one failed
or could not be proven (its control failed), 2 for bad input or no such running session, 125 when
dejima itself failed (the engine, the probe)."""

from __future__ import annotations

import argparse
import ipaddress
from typing import TYPE_CHECKING

from dejima import api
from dejima.cli.jsonout import print_json_lines
from dejima.errors import DiagnosticError, ExitStatus, InputError, UsageError
from dejima.ui.console import UI
from dejima.ui.text import plain

if TYPE_CHECKING:
    from rich.table import Table

SESSION_EPILOG = """
With --session SESSION: the escape checks, from inside that running session: a refused address, a
refused port of an allowed name, DNS to another resolver (UDP 53, TCP 53, TCP 853), a refused name,
the engine gateway and the metadata address (by the filter's ruleset, the live policy and the
resolver's answers: no packet is sent there), IPv6, the control socket, a placeholder in a name.
The probes aim at documentation addresses the filter refuses in the session's namespace, so
nothing leaves the machine (docs/egress.md). Exit status: 0 every check holds (or is skipped),
1 one failed or could not be proven, 2 bad arguments or no such running session, 125 dejima failed.
"""
STYLES = {"holds": "green", "skipped": "yellow", "FAILED": "bold red", "unproven": "red"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = (parser.epilog or "") + SESSION_EPILOG
    parser.add_argument("--session", metavar="SESSION",
                        help="run the escape checks from inside this running session (its id as `dejima sessions` "
                             "shows it, or a unique prefix)")
    parser.add_argument("--refused-address", metavar="ADDRESS[:PORT]",
                        help="with --session: where the refused-address probe connects (default 192.0.2.1:443, a "
                             "documentation address the filter refuses before anything leaves)")
    parser.add_argument("--foreign-resolver", metavar="ADDRESS",
                        help="with --session: the other resolver the DNS probes try (default 198.51.100.1)")
    parser.add_argument("--resolve", metavar="NAME", action="append",
                        help="with --session (repeatable): a name asked of dejima's resolver, whose answer must not "
                             "point at the gateway or the metadata address (default metadata.google.internal, "
                             "host.docker.internal)")


def _ipv4(text: str, flag: str) -> str:
    try:
        return str(ipaddress.IPv4Address(text))
    except ValueError:
        raise UsageError(f"{flag} {text!r} is not an IPv4 address", hint=f"{flag} 192.0.2.1") from None


def _refused(text: str | None) -> tuple[str | None, int | None]:
    if text is None:
        return None, None
    address, _, port = text.partition(":")
    if port and not (port.isascii() and port.isdigit() and 0 < int(port) < 65536):
        raise UsageError(f"--refused-address {text!r}: the port is not a number from 1 to 65535",
                         hint="--refused-address 192.0.2.1:443")
    return _ipv4(address, "--refused-address"), int(port) if port else None


def summary(session_id: str, checks: list[api.SessionCheck]) -> Table:
    """The table of checks: what the session's probe said is data, shown escaped (never markup)."""
    from rich.table import Table

    table = Table("check", "result", "detail", title=plain(f"session {session_id}"))
    for c in checks:
        table.add_row(plain(c.name), plain(c.status, STYLES.get(c.status, "")), plain(c.detail, limit=600))
    return table


def run(args: argparse.Namespace, ui: UI) -> int:
    address, port = _refused(args.refused_address)
    resolver = _ipv4(args.foreign_resolver, "--foreign-resolver") if args.foreign_resolver else None
    names = tuple(args.resolve) if args.resolve else None
    try:
        session_id, checks = api.doctor_session(args.session, refused_address=address, refused_port=port,
                                                foreign_resolver=resolver, answer_names=names)
    except InputError:
        raise
    except DiagnosticError as exc:  # the checks could not run: dejima failed, the boundary was not judged
        exc.exit_code = exc.exit_code or ExitStatus.DEJIMA_FAILED
        raise
    if args.json:
        print_json_lines({"session": session_id, "check": c.name, "status": c.status, "ok": c.ok, "detail": c.detail}
                         for c in checks)
    else:
        ui.table(summary(session_id, checks))
    return ExitStatus.SUCCESS if checks and all(c.ok for c in checks) else ExitStatus.FAILURE
