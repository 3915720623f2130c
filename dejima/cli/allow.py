"""`dejima-allow`: grant a running session a name, live, and take it back."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dejima.cli._run import run_main
from dejima.errors import ExitStatus, UsageError
from dejima.ui.console import UI

if TYPE_CHECKING:
    from dejima.api import RunningSession

DESCRIPTION = """\
Grant a running dejima session a name (or one IPv4 address), live: the agent's next connection
gets through, no restart. The grant holds until the session ends, --for runs out, or --revoke.

  dejima-allow                         the names this session was refused, numbered, newest first
  dejima-allow crates.io               grant crates.io (every port) to the session in this directory
  dejima-allow 1 2                     grant refused names number 1 and 2 of that list
  dejima-allow '*.crates.io:443' --for 30m --reason "cargo build"
  dejima-allow crates.io --revoke      take it back: new connections fail, open ones are cut
  dejima-allow --list                  grants (when, why, until) and refusals (how many times)

Entries use the grammar and the rules of `dejima PATH --allow`: a name on the deny list cannot be
granted; an address that reaches this host, the engine's gateway or cloud metadata needs an override
naming it, as at the start: dejima-allow 172.17.0.1:8080 --allow-special 172.17.0.1:8080.
The session is the one whose workspace holds the current directory, or --session ID; when
several match, dejima-allow lists them and asks (on a terminal) or refuses to guess.
--persist also writes the grant into your policy for this project, so the next session has it
(your file under $XDG_CONFIG_HOME/dejima/projects/, comments and order kept).

Exit status:
  0    done
  1    the session's filter refused (the reason is printed; nothing changed)
  2    bad arguments, or no running session matches
  4    the session ended before the change reached it (nothing changed in it)
  125  the session's filter could not be reached (it did not answer in time), or a bug in dejima
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dejima-allow", description=DESCRIPTION,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("entries", nargs="*", metavar="DOMAIN[:PORT]|N",
                        help="a name, *.wildcard or IPv4 address, with an optional :port; or the number of a "
                        "refused name from the listing")
    parser.add_argument("--session", metavar="ID", help="the session to change (default: the one in this directory)")
    parser.add_argument("--for", dest="duration", metavar="DURATION", help="expire after 90s, 30m, 2h, 1d ...")
    parser.add_argument("--reason", default="", help="why, recorded with the grant")
    parser.add_argument("--allow-special", action="append", default=[], metavar="ENTRY",
                        help="grant ENTRY (one of the entries, written the same way) although it reaches a special "
                        "place: this host, the engine's gateway, cloud metadata (as --allow-special at the start)")
    parser.add_argument("--revoke", action="store_true", help="take the given grants back and cut their connections")
    parser.add_argument("--list", action="store_true", help="show grants and refused names")
    parser.add_argument("--persist", action="store_true", help="also add the grant to your policy for this project")
    parser.add_argument("--json", action="store_true", help="print JSON lines (one object per line)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return run_main(lambda ui: _main(list(sys.argv[1:] if argv is None else argv), ui))


def _main(argv: list[str], ui: UI) -> int:
    from dejima import api

    args = build_parser().parse_args(argv)
    if args.revoke and (args.list or args.duration or args.persist or args.allow_special or not args.entries):
        raise UsageError("--revoke takes entries and nothing of --list, --for, --persist or --allow-special",
                         hint="dejima-allow crates.io --revoke")
    if args.duration:
        api.check_duration(args.duration, "--for")
    numbered = [e for e in args.entries if e.isdigit()]
    entries = [api.check_grant_entry(e) for e in args.entries if not e.isdigit()]  # canonical
    session = _pick_session(args.session, ui)
    if args.list or not args.entries:
        return _show(api.live(session), ui, args.json, grants_too=args.list)
    if numbered:
        denials = api.live(session)["denials"]
        entries += [api.check_grant_entry(_denial(denials, int(n)), f"refused name {n}") for n in numbered]
    if args.revoke:
        revoked = api.revoke(session, entries, reason=args.reason or "revoked with dejima-allow")
        return _done(ui, args.json, "revoked", revoked, session.session_id)
    granted = api.grant(session, entries, duration=args.duration, reason=args.reason,
                        allow_special=args.allow_special, spelling="flags")
    if args.persist:
        path = api.persist_grants(session, granted)
        ui.answer(f"added to {path}: the next session on {session.workspace} has it from the start")
        for entry in args.allow_special:  # a project's policy holds allow entries; its override is the user's
            ui.warn(f"the next start refuses {entry} without its override: pass --allow-special {entry}, or add "
                    f"it to allow_special under [network] in {api.settings_path()}")
    return _done(ui, args.json, "granted", granted, session.session_id,
                 f" for {args.duration}" if args.duration else " until the session ends")


def _pick_session(wanted: str | None, ui: UI) -> RunningSession:
    from dejima import api

    if wanted is not None:
        return api.running_session(wanted)
    here = api.running_sessions(Path.cwd())
    if len(here) == 1:
        return here[0]
    if not here:
        raise UsageError(f"no running session has {Path.cwd()} in its workspace",
                         hint="run dejima-allow inside the session's workspace, or name it with --session ID "
                         "(`dejima sessions` lists them)")
    from dejima.ui.text import escaped

    choices = "\n".join(f"  {i}. {s.session_id}  {escaped(s.workspace)}" for i, s in enumerate(here, 1))
    if not (sys.stdin.isatty() and sys.stderr.isatty()):
        raise UsageError("several sessions run here; which one?", context=choices,
                         hint="name it with --session ID")
    ui.info(f"several sessions run here:\n{choices}")
    answer = input("which one (number)? ").strip()
    if not answer.isdigit() or not 1 <= int(answer) <= len(here):
        raise UsageError(f"{answer!r} is not one of the numbers above", hint="or name it with --session ID")
    return here[int(answer) - 1]


def _denial(denials: list[dict[str, Any]], number: int) -> str:
    if not 1 <= number <= len(denials):
        raise UsageError(f"there is no refused name number {number} (the list has {len(denials)})",
                         hint="`dejima-allow` with no argument lists them")
    denial = denials[number - 1]
    if not denial["grantable"] and denial.get("granted_by") is None:  # a granted one is granted again (a new --for)
        raise UsageError(f"refused name {number} ({denial['name']}) cannot be granted: {denial['reason']}",
                         hint="names on the deny list stay refused")
    return str(denial["name"])


def _done(ui: UI, as_json: bool, verb: str, entries: list[str], session_id: str, how: str = "") -> int:
    if as_json:
        from dejima.cli.jsonout import print_json_lines

        print_json_lines({"session": session_id, verb: entry} for entry in entries)
    else:
        ui.answer(f"{verb} {', '.join(entries)} to session {session_id}{how}" if verb == "granted"
                  else f"{verb} {', '.join(entries)} in session {session_id}")
    return ExitStatus.SUCCESS


def _show(listing: dict[str, Any], ui: UI, as_json: bool, grants_too: bool) -> int:
    import time

    from dejima.ui.text import plain

    if as_json:
        from dejima.cli.jsonout import print_json_lines

        print_json_lines([*({"grant": g} for g in listing["grants"] if grants_too),
                          *({"denial": d, "number": i} for i, d in enumerate(listing["denials"], 1))])
        return ExitStatus.SUCCESS
    from rich.table import Table

    def when(stamp: float | None) -> str:
        return "session end" if stamp is None else time.strftime("%H:%M:%S", time.localtime(stamp))

    if grants_too:
        if listing["grants"]:
            table = Table("granted", "since", "until", "reason", title="live grants")
            for g in listing["grants"]:
                table.add_row(plain(g["entry"]), when(g["since"]), when(g["expires"]), plain(g["reason"]))
            ui.table(table)
        else:
            ui.info("no live grants")
    if not listing["denials"]:
        ui.info("no refused names")
        return ExitStatus.SUCCESS
    table = Table("#", "refused name", "times", "last", "why", title="refused names (dejima-allow N grants one)")
    for i, d in enumerate(listing["denials"], 1):
        table.add_row(str(i), plain(d["name"]), str(d["count"]), when(d["last"]), plain(_why(d)))
    ui.table(table)
    return ExitStatus.SUCCESS


def _why(denial: dict[str, Any]) -> str:
    """A refused name's reason, or what lets it through now: a live grant, until when."""
    import time

    grant = denial.get("granted_by")
    if grant is not None:
        expires = grant.get("expires")
        later = time.localtime(expires) if expires is not None else None
        same_day = later is not None and later[:3] == time.localtime()[:3]
        until = "the session ends" if later is None else time.strftime("%H:%M" if same_day else "%Y-%m-%d %H:%M",
                                                                          later)
        return f"granted until {until}" + (f" ({grant['entry']})" if grant.get("entry") != denial["name"] else "")
    return denial["reason"] if denial["grantable"] else f"{denial['reason']} (cannot be granted)"
