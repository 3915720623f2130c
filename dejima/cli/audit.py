"""`dejima-audit`: review what sessions left that could run code later on the host."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence

from dejima.cli._run import run_main
from dejima.errors import ExitStatus, UsageError
from dejima.ui.console import UI

DESCRIPTION = """\
At the end of every session dejima compares the workspace (and the session's home and caches)
with their snapshot from the start, and records each change that can run code later: git hooks
and command-valued git config keys, IDE tasks and settings, agent configs and MCP servers, .env
and direnv files, package-manager and build hooks, CI workflows, setuid bits, device nodes, links
out of the tree, name tricks... (`dejima-audit rules` lists them all). The changes found in one
file are one finding.

An acknowledgement covers that exact content: if the file changes again, it is judged afresh, as
the whole change since it was last unflagged (a reviewed auto-run task given a new command is
critical again). A finding whose file is removed, back to its start or to acknowledged content is
closed, with a note; `restore` closes what it puts back (no review: the same change made again is
a finding again). `dejima PATH` refuses to start on a workspace with unreviewed critical findings
(unless --accept-findings). Findings are kept in $XDG_STATE_HOME/dejima/audit.sqlite3.

  dejima-audit                          unreviewed findings (low and above)
  dejima-audit ack                      on a terminal: walk them one file at a time, worst first
  dejima-audit show ID [ID...]          evidence, and what changed in the file since the start
  dejima-audit ack ID [ID...] --note "why it is fine"
  dejima-audit ack --all --workspace ~/repos/project --note "reviewed"
  dejima-audit restore ID [ID...]       put the file back as it was at the start (or remove it)
  dejima-audit list --all --json        every finding, reviewed, closed or not, info included
  dejima-audit rules                    the rule catalogue

--json prints one JSON object per line (as `dejima violations --json` does).
"""


_IDS = ("each an id from the first column of `dejima-audit` (`dejima-audit list --all` lists every finding's); "
        "several may be given")


def _listing_options(parser: argparse.ArgumentParser, prefix: str = "") -> None:
    parser.add_argument("--all", action="store_true", dest=f"{prefix}all",
                        help="also reviewed, closed and info findings")
    parser.add_argument("--workspace", dest=f"{prefix}workspace", metavar="PATH",
                        help="only findings of the workspace at PATH (the project directory a session ran on)")
    parser.add_argument("--json", action="store_true", dest=f"{prefix}json", help="print JSON lines (for scripts)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dejima-audit", description=DESCRIPTION,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    _listing_options(parser, "default_")  # `dejima-audit --json` is `dejima-audit list --json`
    sub = parser.add_subparsers(dest="action", metavar="ACTION")
    _listing_options(sub.add_parser("list", help="findings not reviewed yet (the default)"))
    show = sub.add_parser("show", help="one or more findings with their evidence and diff")
    show.add_argument("ids", nargs="+", type=int, metavar="ID", help=f"the findings to show; {_IDS}")
    show.add_argument("--json", action="store_true", help="print JSON lines (with each file's diff)")
    ack = sub.add_parser("ack", help="record that you reviewed findings (bound to their content); without ids, "
                                     "on a terminal, walk the unreviewed ones file by file")
    ack.add_argument("ids", nargs="*", type=int, metavar="ID",
                     help=f"the findings to acknowledge (none: walk them on a terminal); {_IDS}")
    ack.add_argument("--all", action="store_true", help="every unreviewed finding (of --workspace if given)")
    ack.add_argument("--workspace", metavar="PATH", help="only the workspace at PATH (with --all, or for the walk)")
    ack.add_argument("--note", help="why the change is fine (recorded with the time); needed with ids or --all")
    restore = sub.add_parser("restore", help="put flagged files back as they were when the session started")
    restore.add_argument("ids", nargs="+", type=int, metavar="ID", help=f"the findings to undo; {_IDS}")
    restore.add_argument("--force", action="store_true", help="even if the file changed again since the audit")
    rules = sub.add_parser("rules", help="the rule catalogue: what is watched, and how severe a change is")
    rules.add_argument("--json", action="store_true", help="print JSON lines")
    return parser


def _json_lines(records: list[dict[str, object]]) -> None:
    for record in records:
        print(json.dumps(record, sort_keys=True))


def _workspace(value: str | None) -> str | None:
    return os.path.abspath(os.path.expanduser(value)) if value else None


def _body(argv: list[str], ui: UI) -> int:
    args = build_parser().parse_args(argv)
    if args.action is None:
        args.action, args.all, args.workspace, args.json = "list", args.default_all, args.default_workspace, \
            args.default_json
    if args.action == "rules":
        from dejima.ui.audit_views import rules_records, rules_reference

        if args.json:
            _json_lines(rules_records())  # type: ignore[arg-type]
        else:
            print(rules_reference(), end="")
        return ExitStatus.SUCCESS
    return {"list": _list, "show": _show, "ack": _ack, "restore": _restore}[args.action](args, ui)


def _list(args: argparse.Namespace, ui: UI) -> int:
    from dejima import api
    from dejima.ui.audit_views import finding_record, findings_table

    found = api.findings(_workspace(args.workspace), reviewed=args.all, minimum="info" if args.all else "low")
    if args.json:
        _json_lines([finding_record(s) for s in found])
        return ExitStatus.SUCCESS
    if not found:
        ui.info("no unreviewed findings" if not args.all else "no findings")
        return ExitStatus.SUCCESS

    for line in findings_table(found, width=ui.out.width):  # off a terminal: as wide as the lines are
        ui.out.print(line, crop=False)
    waiting = [s.id for s in found if not s.acked and s.closed is None]
    if waiting:  # --all lists reviewed ones too: nothing to say when every one is
        ids = " ".join(map(str, waiting[:3])) + (" ..." if len(waiting) > 3 else "")
        ui.info(f"{len(waiting)} not reviewed: walk them one file at a time with dejima-audit ack; details: "
                f"dejima-audit show {ids}; undo: dejima-audit restore {ids}")
    else:
        ui.info("every finding listed is reviewed or closed")
    return ExitStatus.SUCCESS


def _show(args: argparse.Namespace, ui: UI) -> int:
    from dejima import api
    from dejima.ui.audit_views import finding_record, print_finding

    found = api.findings_by_id(args.ids)
    if args.json:
        _json_lines([finding_record(s) for s in found])
        return ExitStatus.SUCCESS
    for stored in found:
        print_finding(ui.out, stored)
    return ExitStatus.SUCCESS


def _ack(args: argparse.Namespace, ui: UI) -> int:
    from dejima import api

    if args.all and args.ids:
        raise UsageError("ack takes finding ids or --all, not both", hint="dejima-audit lists them with their ids")
    if not args.all and not args.ids:
        return _walk(args, ui)
    if args.note is None or not args.note.strip():
        raise UsageError("--note is empty" if args.note is not None else "ack with ids or --all needs --note",
                         hint='say why the change is fine: --note "my own pre-commit hook"; or run '
                              "`dejima-audit ack` alone on a terminal to walk the findings")
    done = api.acknowledge(None if args.all else args.ids, args.note, workspace=args.workspace if args.all else None)
    ui.answer(f"acknowledged {len(done)} finding(s)" + ("" if done or args.all else " (already reviewed or closed)"))
    return ExitStatus.SUCCESS


def _ask(prompt: str) -> str | None:
    print(prompt, end="", flush=True)
    line = sys.stdin.readline()
    return line.rstrip("\n") if line else None


def _walk(args: argparse.Namespace, ui: UI) -> int:
    from dejima import api

    workspace = _workspace(args.workspace)
    found = api.findings(workspace)
    if not found:
        ui.info("no unreviewed findings")
        return ExitStatus.SUCCESS
    from dejima.cli.audit_review import instead

    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise UsageError(f"ack without ids walks the {len(found)} unreviewed finding(s) on a terminal, and this is "
                         "not one", hint=instead(found, workspace))
    # The walk holds one store open across its prompts, and restores a file as `restore` does, one at a time.
    from dejima.adapters.findings import FindingStore
    from dejima.adapters.restore import restore
    from dejima.cli.audit_review import Review

    store = FindingStore()
    try:
        review = Review(store, ui.out, _ask, restore)
        review.tally.note = (args.note or "").strip()  # offered for every file; Enter accepts it
        tally = review.run(found)
    finally:
        store.close()
    left = len(tally.left) + tally.skipped
    ui.answer(f"acknowledged {tally.acknowledged}, restored {tally.restored}, skipped {tally.skipped}"
              + (f"; {len(tally.left)} not shown yet: dejima-audit ack again to go on" if tally.left else "")
              + ("" if left else "; nothing left to review"))
    return ExitStatus.SUCCESS


def _restore(args: argparse.Namespace, ui: UI) -> int:
    from dejima import api
    from dejima.ui.audit_views import safe

    api.restore(args.ids, force=args.force, note="restored by dejima-audit restore",
                on_restored=lambda done: ui.answer(safe(done)))
    return ExitStatus.SUCCESS


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    return run_main(lambda ui: _body(args, ui), failure=ExitStatus.FAILURE)
