"""`dejima-audit`: review what sessions left that could run code later on the host."""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from dejima.cli import exit_codes
from dejima.cli._run import run_main
from dejima.errors import UsageError
from dejima.ui.console import UI

if TYPE_CHECKING:
    from rich.console import Console

    from dejima.findings import FindingStore, Stored

DESCRIPTION = """\
At the end of every session dejima compares the workspace (and the session's home and caches)
with their snapshot from the start, and records each change that can run code later: git hooks
and command-valued git config keys, IDE tasks and settings, agent configs and MCP servers, .env
and direnv files, package-manager and build hooks, CI workflows, setuid bits, device nodes, links
out of the tree, name tricks... (`dejima-audit rules` lists them all).

An acknowledgement covers that exact content: if the file changes again, the finding comes back.
`dejima PATH` refuses to start on a workspace with unreviewed critical findings (unless
--accept-findings). Findings are kept in $XDG_STATE_HOME/dejima/audit.sqlite3.

  dejima-audit                          unreviewed findings (low and above)
  dejima-audit show ID [ID...]          evidence, and what changed in the file since the start
  dejima-audit ack ID [ID...] --note "why it is fine"
  dejima-audit ack --all --workspace ~/repos/project --note "reviewed"
  dejima-audit restore ID [ID...]       put the file back as it was at the start (or remove it)
  dejima-audit list --all --json        every finding, reviewed or not, info included
  dejima-audit rules                    the rule catalogue
"""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dejima-audit", description=DESCRIPTION,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="action", metavar="ACTION")
    listing = sub.add_parser("list", help="findings not reviewed yet (the default)")
    listing.add_argument("--all", action="store_true", help="also reviewed and info findings")
    listing.add_argument("--workspace", help="only findings of this workspace")
    listing.add_argument("--json", action="store_true", help="print JSON (for scripts)")
    show = sub.add_parser("show", help="one or more findings with their evidence and diff")
    show.add_argument("ids", nargs="+", type=int, metavar="ID")
    ack = sub.add_parser("ack", help="record that you reviewed findings (bound to their content)")
    ack.add_argument("ids", nargs="*", type=int, metavar="ID")
    ack.add_argument("--all", action="store_true", help="every unreviewed finding (of --workspace if given)")
    ack.add_argument("--workspace", help="with --all: only this workspace")
    ack.add_argument("--note", required=True, help="why the change is fine (recorded with the time)")
    restore = sub.add_parser("restore", help="put flagged files back as they were when the session started")
    restore.add_argument("ids", nargs="+", type=int, metavar="ID")
    restore.add_argument("--force", action="store_true", help="even if the file changed again since the audit")
    sub.add_parser("rules", help="the rule catalogue: what is watched, and how severe a change is")
    return parser


def _output() -> Console:
    """Results go to stdout (to a pager, a file); messages stay on stderr."""
    from rich.console import Console

    return Console(highlight=False, soft_wrap=True)


def _workspace(value: str | None) -> str | None:
    return os.path.abspath(os.path.expanduser(value)) if value else None


def _body(argv: list[str], ui: UI) -> int:
    args = _parser().parse_args(argv or ["list"])
    if args.action == "rules":
        from dejima.ui.audit_views import rules_reference

        print(rules_reference(), end="")
        return exit_codes.SUCCESS
    from dejima.findings import FindingStore

    store = FindingStore()
    try:
        return {"list": _list, "show": _show, "ack": _ack, "restore": _restore}[args.action](args, store, ui)
    finally:
        store.close()


def _list(args: argparse.Namespace, store: FindingStore, ui: UI) -> int:
    from dejima.core.audit import rank

    found = store.findings(_workspace(args.workspace), include_acked=args.all)
    if not args.all:
        found = [s for s in found if rank(s.finding.severity) >= rank("low")]
    if args.json:
        print(json.dumps([{
            "id": s.id, "workspace": s.workspace, "session": s.session, "mount": s.mount, "root": s.root,
            "reviewed": s.acked, "note": s.ack_note, "catalogue": s.catalogue,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(s.created)),
            **{k: getattr(s.finding, k) for k in ("rule", "severity", "path", "key", "evidence", "remedy",
                                                  "fingerprint")},
            "notes": list(s.finding.notes)} for s in found], indent=2))
        return exit_codes.SUCCESS
    if not found:
        ui.info("no unreviewed findings" if not args.all else "no findings")
        return exit_codes.SUCCESS
    from dejima.ui.audit_views import findings_table  # rich tables: only when there is one to show

    _output().print(findings_table(found))
    ui.info("details: dejima-audit show ID; reviewed: dejima-audit ack ID --note ...; undo: dejima-audit restore ID")
    return exit_codes.SUCCESS


def _known(store: FindingStore, ids: list[int]) -> list[Stored]:
    wanted = store.get(ids)
    missing = sorted(set(ids) - {s.id for s in wanted})
    if missing:
        raise UsageError(f"no finding {', '.join(map(str, missing))}", hint="dejima-audit list --all shows every id")
    return wanted


def _show(args: argparse.Namespace, store: FindingStore, ui: UI) -> int:
    from dejima.ui.audit_views import print_finding

    output = _output()
    for stored in _known(store, args.ids):
        print_finding(output, stored)
    return exit_codes.SUCCESS


def _ack(args: argparse.Namespace, store: FindingStore, ui: UI) -> int:
    if args.all == bool(args.ids):
        raise UsageError("ack needs finding ids, or --all (not both)", hint="dejima-audit lists them with their ids")
    if not args.note.strip():
        raise UsageError("--note is empty", hint='say why the change is fine: --note "my own pre-commit hook"')
    if args.ids:
        _known(store, args.ids)
    done = store.ack(None if args.all else args.ids, args.note, _workspace(args.workspace) if args.all else None)
    ui.info(f"acknowledged {len(done)} finding(s)" + ("" if done or args.all else " (they were already reviewed)"))
    return exit_codes.SUCCESS


def _restore(args: argparse.Namespace, store: FindingStore, ui: UI) -> int:
    from dejima.restore import restore
    from dejima.ui.audit_views import safe

    done_paths: set[tuple[str, str]] = set()
    for stored in _known(store, args.ids):
        where = (stored.root, stored.finding.path)
        if where in done_paths:
            continue  # another finding on the same file: restoring it once covers both
        done = restore(stored, force=args.force)
        done_paths.add(where)
        same_path = [s.id for s in store.findings(stored.workspace) if (s.root, s.finding.path) == where]
        store.ack(same_path or [stored.id], f"restored by dejima-audit restore: {done}")
        ui.info(safe(done))
    return exit_codes.SUCCESS


def main(argv: Sequence[str] | None = None) -> int:
    import sys

    args = list(sys.argv[1:] if argv is None else argv)
    return run_main(lambda ui: _body(args, ui), failure=exit_codes.FAILURE)
