"""`dejima-audit`: review what sessions left in their workspaces that could run code on the host."""

from __future__ import annotations

import argparse
import json
import re
import time
from collections.abc import Sequence

from dejima.cli import exit_codes
from dejima.cli._run import run_main
from dejima.errors import UsageError
from dejima.ui.console import UI

DESCRIPTION = """\
At the end of every session dejima compares the workspace with its snapshot from the start and
records each change that can run code later on the host: git hooks and command-valued git config
keys, the git directory replaced, IDE tasks and agent configs (.vscode/tasks.json,
.claude/settings.json, .mcp.json, ...), setuid bits, device nodes, links out of the tree.
Findings are kept in $XDG_STATE_HOME/dejima/audit.sqlite3. An acknowledgement covers that exact
content: if the file changes again, the finding comes back. `dejima PATH` refuses to start on a
workspace with unreviewed critical findings (unless --accept-findings).

  dejima-audit                     list unreviewed findings
  dejima-audit list --all --json   every finding, reviewed or not, as JSON
  dejima-audit show ID             one finding with its evidence
  dejima-audit ack ID [ID...] --note "why it is fine"
  dejima-audit ack --all --note "..."

Not yet: restoring a flagged file to its start state, and most of the research catalogue's rules
(this first set covers git, IDE/agent configs and filesystem tricks).
"""

# Control characters and bidi/zero-width code points are shown escaped, never interpreted.
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff]")


def safe(text: str) -> str:
    return _UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dejima-audit", description=DESCRIPTION,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", nargs="?", default="list", choices=["list", "show", "ack"])
    parser.add_argument("ids", nargs="*", type=int, metavar="ID")
    parser.add_argument("--all", action="store_true", help="list: include reviewed ones; ack: every unreviewed")
    parser.add_argument("--workspace", help="only findings of this workspace (absolute path)")
    parser.add_argument("--note", default="", help="ack: why the change is fine (recorded)")
    parser.add_argument("--json", action="store_true", help="print JSON")
    return parser


def _body(argv: list[str], ui: UI) -> int:
    args = _parser().parse_args(argv)
    from dejima.findings import FindingStore

    store = FindingStore()
    try:
        if args.action == "ack":
            if not args.ids and not args.all:
                raise UsageError("ack needs finding ids or --all", hint="dejima-audit lists them with their ids")
            count = store.ack(None if args.all else args.ids, args.note)
            ui.info(f"acknowledged {count} finding(s)")
            return exit_codes.SUCCESS
        found = store.findings(args.workspace, include_acked=args.all or args.action == "show")
        if args.action == "show":
            wanted = [s for s in found if s.id in args.ids]
            if not wanted:
                raise UsageError(f"no finding {' '.join(map(str, args.ids)) or '(no id given)'}",
                                 hint="dejima-audit list --all shows every id")
            for s in wanted:
                f = s.finding
                for label, value in (("finding", s.id), ("rule", f.rule), ("severity", f.severity),
                                     ("workspace", s.workspace), ("path", f.path), ("key", f.key),
                                     ("evidence", f.evidence), ("session", s.session),
                                     ("when", time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(s.created))),
                                     ("reviewed", "yes" if s.acked else "no"), ("fingerprint", f.fingerprint)):
                    print(f"{label:>11}: {safe(str(value))}")
            return exit_codes.SUCCESS
        if args.json:
            print(json.dumps([{"id": s.id, "workspace": s.workspace, "session": s.session, "reviewed": s.acked,
                               **{k: getattr(s.finding, k) for k in ("rule", "severity", "path", "key", "evidence",
                                                                      "fingerprint")}} for s in found], indent=2))
            return exit_codes.SUCCESS
        if not found:
            ui.info("no unreviewed findings" if not args.all else "no findings")
            return exit_codes.SUCCESS
        from rich.table import Table

        table = Table("id", "severity", "workspace", "path", "what")
        for s in found:
            table.add_row(str(s.id), s.finding.severity, safe(s.workspace), safe(s.finding.path),
                          safe(s.finding.evidence) + ("" if not s.acked else " (reviewed)"))
        ui.console.print(table)
        return exit_codes.SUCCESS
    finally:
        store.close()


def main(argv: Sequence[str] | None = None) -> int:
    import sys

    args = list(sys.argv[1:] if argv is None else argv)
    return run_main(lambda ui: _body(args, ui), failure=exit_codes.FAILURE)
