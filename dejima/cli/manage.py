"""`dejima COMMAND`: the management commands (sessions, images, settings, manifests, ...)."""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

from dejima import api
from dejima.cli import doctor_session
from dejima.cli.jsonout import print_json_lines
from dejima.errors import ExitStatus, UsageError
from dejima.ui.console import UI
from dejima.ui.text import escaped, plain

JSON_HELP = "print JSON lines (one object per line) for scripts"


def _sessions_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dejima sessions", description="List dejima sessions of this scope.")
    parser.add_argument("--json", action="store_true", help=JSON_HELP)
    return parser


def _sessions(argv: list[str], ui: UI) -> int:
    args = _sessions_parser().parse_args(argv)
    sessions = api.sessions()
    if args.json:
        print_json_lines(s.to_json() for s in sessions)
        return ExitStatus.SUCCESS
    if not sessions:
        ui.info("no sessions")
        return ExitStatus.SUCCESS
    from rich.table import Table

    table = Table("session", "status", "workspace", "launcher pid", "containers")
    for s in sessions:
        table.add_row(plain(s.session_id), plain(s.status), plain(s.workspace), plain(s.launcher_pid),
                      plain(", ".join(s.containers)))
    ui.table(table)
    return ExitStatus.SUCCESS


def _stop_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dejima stop", description="Stop a session and remove its containers.")
    parser.add_argument("session", help="session id, as `dejima sessions` shows it")
    return parser


def _stop(argv: list[str], ui: UI) -> int:
    args = _stop_parser().parse_args(argv)
    api.stop(args.session)
    ui.answer(f"stopped session {args.session}")
    return ExitStatus.SUCCESS


def _clean_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dejima clean",
        description="Remove sessions whose launcher is gone (after a crash or SIGKILL). "
        "Per-project home directories are kept.",
    )
    parser.add_argument("--all", action="store_true", help="also stop sessions that are still running")
    return parser


def _clean(argv: list[str], ui: UI) -> int:
    args = _clean_parser().parse_args(argv)
    removed = api.clean(everything=args.all, reporter=_Results(ui.console, ui.quiet, ui.out))
    if not removed:
        ui.info("nothing to clean")
    return ExitStatus.SUCCESS


DOCTOR_EXIT = """\
Exit status:
  0    every check passed: this machine holds the boundary
  1    a check failed (the table says which, and what to do); the checks after it did not run
  2    bad arguments or a broken settings file
  125  a bug in dejima
"""


class _Results(UI):
    """The terminal UI for a command whose reported lines are its results (`dejima clean`: each session
    it removed): they go to stdout; warnings and errors stay on stderr."""

    def info(self, message: str) -> None:
        self.answer(message)


def _doctor_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dejima doctor", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Check that this machine can hold the boundary: engine, the images a start on PATH would "
        "use (its owner's, with its manifests' layers), nftables in a container, and a live self-test that a "
        "session cannot reach a decoy server that an unfiltered container can reach. Traffic goes only to "
        "containers the doctor starts.", epilog=DOCTOR_EXIT,
    )
    parser.add_argument("path", nargs="?", default=".", metavar="PATH",
                        help="the project whose session's images are checked (default: the current directory)")
    parser.add_argument("--harness", default="shell", help="the harness a start there would run (default: shell)")
    parser.add_argument("--build", action="store_true", help="build (or bootstrap) missing images first")
    parser.add_argument("--json", action="store_true", help=JSON_HELP + " (one per check)")
    doctor_session.add_arguments(parser)
    return parser


def _doctor(argv: list[str], ui: UI) -> int:
    args = _doctor_parser().parse_args(argv)
    if args.session is not None:
        return doctor_session.run(args, ui)
    checks = api.doctor(build=args.build, reporter=ui, workspace=args.path, harness=args.harness)
    if args.json:
        print_json_lines({"check": c.name, "ok": c.ok, "detail": c.detail} for c in checks)
    else:
        from rich.table import Table

        table = Table("check", "result", "detail")
        for c in checks:
            table.add_row(plain(c.name), plain("ok", "green") if c.ok else plain("FAIL", "red"), plain(c.detail))
        ui.table(table)
    return ExitStatus.SUCCESS if checks and all(c.ok for c in checks) else ExitStatus.FAILURE


def _images_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dejima images",
        description="list [PATH]: images dejima made, those the current settings and a start on PATH (default: "
        "the current directory) use marked; build: build missing filter/session images; "
        "bootstrap: make the Debian base with debootstrap now (needs root); prune: remove filter and "
        "session images that the current code and settings no longer use (they pile up across upgrades).",
    )
    parser.add_argument("action", nargs="?", default="list", choices=["list", "build", "bootstrap", "prune"])
    parser.add_argument("path", nargs="?", metavar="PATH",
                        help="with list: the project whose session's images are marked (default: the current "
                        "directory)")
    parser.add_argument("--force", action="store_true", help="with build: rebuild even if present")
    return parser


def _images(argv: list[str], ui: UI) -> int:
    args = _images_parser().parse_args(argv)
    if args.path is not None and args.action != "list":
        raise UsageError(f"images {args.action} takes no PATH", hint="dejima images list PATH marks a project's")
    if args.action == "bootstrap":
        base = api.bootstrap_base(reporter=ui)
        ui.answer(f"made {base.ref} ({base.id[:19]})")
    elif args.action == "prune":
        removed, kept = api.prune_images(reporter=ui)
        ui.answer(f"removed {removed} outdated image(s)" + (f"; {kept} still in use by containers" if kept else ""))
    elif args.action == "build":
        api.build_images(force=args.force, reporter=ui, on_built=lambda role, tag: ui.answer(f"{role}: {tag}"))
    else:
        _list_images(args.path or ".", ui)
    return ExitStatus.SUCCESS


def _list_images(path: str, ui: UI) -> None:
    """dejima's images, each marked with what uses it, then what the settings and the project use."""
    listed = api.images()
    uses = api.images_in_use(path, reporter=ui)  # reads the settings: a broken file fails the listing too
    used_by = {use.tag: use.used_by for use in uses}
    from rich.table import Table

    table = Table("image", "role", "id", "size", "used by")
    for image in listed:
        for tag in image.tags or ("<none>",):
            table.add_row(plain(tag), plain(image.role), plain(image.id[7:19]), plain(f"{image.size / 1e6:.0f} MB"),
                          plain(used_by.get(tag, "")))
    ui.table(table)
    if not uses:
        ui.info("the settings' base image is not on the engine yet: `dejima images build` makes it, then the images")
    for chooser in dict.fromkeys(use.used_by for use in uses):
        mine = [use for use in uses if use.used_by == chooser]
        ui.answer(f"{chooser} use{'s' if chooser.startswith('/') else ''}: " + ", ".join(
            f"{use.role} {use.tag}" + ("" if use.present else " (not built yet: a start or `dejima doctor --build` "
                                        "builds it)") for use in mine))


def _settings_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dejima settings", description="Show where settings live and what they are.")
    parser.add_argument("action", nargs="?", default="show", choices=["path", "show", "reference"])
    return parser


def _settings(argv: list[str], ui: UI) -> int:
    args = _settings_parser().parse_args(argv)
    from dataclasses import asdict

    if args.action == "path":
        print(api.settings_path())
    elif args.action == "reference":
        print(api.settings_reference(), end="")
    else:
        path = api.settings_path()
        settings = api.load_settings()
        ui.info(f"settings file: {path}{'' if path.exists() else ' (absent: defaults)'}")
        from dejima.adapters.tomledit import toml_text

        print(f"# the effective settings (every key, defaults included); `dejima settings reference` explains each\n"
              f"{toml_text(asdict(settings))}", end="")
    return ExitStatus.SUCCESS


def _violations_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dejima violations",
        description="What a session was refused: names not allowed, answers pointing at denied addresses. "
        "Without SESSION: the sessions that have a record.",
    )
    parser.add_argument("session", nargs="?")
    parser.add_argument("--json", action="store_true", help=JSON_HELP)
    return parser


def _violations(argv: list[str], ui: UI) -> int:
    args = _violations_parser().parse_args(argv)
    if args.session is None:
        names = api.recorded_sessions()
        if args.json:
            print_json_lines({"session": name} for name in names)
        else:
            for name in names:
                print(escaped(name))
        return ExitStatus.SUCCESS
    records = api.violations(args.session)
    return _show_records(records, ui, args.json, f"no violations recorded for session {args.session}",
                         ("time", "kind", "destination", "reason"),
                         lambda r: (_clock(r.get("time")), r.get("kind", "?"), _destination(r),
                                    f"{r.get('reason') or r.get('detail') or ''}{_aggregate(r)}"))


def _ledger_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dejima ledger",
        description="The requests a session's credential proxy carried: time, route, method, path (query "
        "values left out), status, bytes, duration. Never a secret.",
    )
    parser.add_argument("session", help="session id, as the exit summary or `dejima violations` names it")
    parser.add_argument("--json", action="store_true", help=JSON_HELP)
    return parser


def _ledger(argv: list[str], ui: UI) -> int:
    args = _ledger_parser().parse_args(argv)
    return _show_records(api.ledger(args.session), ui, args.json,
                         f"no request went through session {args.session}'s credential proxy",
                         ("time", "route", "method", "path", "status", "in", "out", "ms"),
                         lambda e: (_clock(e.get("time")), e.get("route", "?"), e.get("method", "?"),
                                    f"{e.get('path', '')}{_aggregate(e)}", e.get("status", "?"),
                                    e.get("bytes_in", ""), e.get("bytes_out", ""), e.get("duration_ms", "")))


def _show_records(records: list[dict[str, Any]], ui: UI, as_json: bool, empty: str, columns: tuple[str, ...],
                  cells: Callable[[dict[str, Any]], tuple[object, ...]]) -> int:
    """A session's records as JSON lines, or a table whose every cell is session data (escaped)."""
    if as_json:
        print_json_lines(records)
        return ExitStatus.SUCCESS
    if not records:
        ui.info(empty)
        return ExitStatus.SUCCESS
    from rich.table import Table

    table = Table(*columns)
    for record in records:
        table.add_row(*(plain(cell) for cell in cells(record)))
    ui.table(table)
    return ExitStatus.SUCCESS


def _aggregate(record: dict[str, Any]) -> str:
    """What a record written for many (a flood, aggregated) stands for; "" for a record of one."""
    if "count" not in record:
        return ""
    if record.get("capped"):
        return f"  [{record['count']} like this, counted after the session's records reached their size bound]"
    return f"  [{record['count']} like this until {_clock(record.get('until'))}]"


def _clock(value: object) -> str:
    try:
        return time.strftime("%H:%M:%S", time.localtime(float(value)))  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError, OSError):
        return "?"


def _destination(record: dict[str, object]) -> str:
    """The domain and/or address (and port) a record names; every part is the session's choice."""
    domain, address, port = record.get("domain"), record.get("address"), record.get("port")
    where = f"{address}:{port}" if address and port else str(address or "")
    if domain and where:
        return f"{domain} -> {where}"
    if domain or where:
        return str(domain or where)
    if record.get("entry"):  # a live grant, revoke or expiry
        return str(record["entry"])
    return f"route {record['route']}" if record.get("route") else "?"  # the credential proxy's


def _manifests_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dejima manifests",
        description="list: every forge, workflow, harness and backend manifest, with the file it comes from "
        "(your own in $XDG_CONFIG_HOME/dejima/<kind>/ override shipped ones by name), broken ones marked; "
        "show KIND/NAME: what one contributes (domains, environment, credential routes, image layers); "
        "check: why each broken manifest is refused (exit 2 if any is); reference: the format's keys.",
    )
    parser.add_argument("action", nargs="?", default="list", choices=["list", "show", "check", "reference"])
    parser.add_argument("ref", nargs="?", metavar="KIND/NAME", help="e.g. harnesses/claude-code")
    parser.add_argument("--json", action="store_true", help=JSON_HELP)
    return parser


def _manifests(argv: list[str], ui: UI) -> int:
    args = _manifests_parser().parse_args(argv)
    if args.action == "reference":
        print(api.manifest_reference(), end="")
        return ExitStatus.SUCCESS
    if args.action == "show":
        return _show_manifest(args.ref, args.json)
    found = api.manifests()
    if args.action == "check":
        return _check_manifests(found, ui, args.json)
    rows = [{"kind": m.kind, "name": m.name, "description": m.description, "source": m.source,
             "overrides": m.overrides, "broken": m.error.message if m.error is not None else None} for m in found]
    if args.json:
        print_json_lines(rows)
        return ExitStatus.SUCCESS
    from rich.table import Table

    table = Table("manifest", "description", "from")
    for row in rows:
        origin = str(row["source"]) + (f" (overrides {row['overrides']})" if row["overrides"] else "")
        problem = str(row["broken"]).removeprefix(f"{row['source']}: ")
        about = plain(f"BROKEN: {problem}", "red") if row["broken"] else plain(row["description"])
        table.add_row(plain(f"{row['kind']}/{row['name']}"), about, plain(origin))
    ui.table(table)
    broken = [m for m in found if m.broken]
    if broken:
        ui.warn(f"{len(broken)} broken manifest(s): sessions that need one stop with its error, others go "
                "on without it; `dejima manifests check` says what to fix")
    return ExitStatus.SUCCESS


def _show_manifest(ref: str | None, as_json: bool) -> int:
    from dataclasses import asdict

    if not ref or "/" not in ref:
        raise UsageError("show needs KIND/NAME", hint="e.g. dejima manifests show workflows/rust")
    kind, name = ref.split("/", 1)
    if kind not in api.MANIFEST_KINDS:
        raise UsageError(f"show {escaped(ref)}: no kind {escaped(kind)!r}",
                         hint=f"kinds: {', '.join(api.MANIFEST_KINDS)}")
    data = asdict(api.manifest(kind, name))
    if as_json:
        print_json_lines([data])
    else:
        from dejima.adapters.tomledit import toml_text

        print(toml_text({key: value for key, value in data.items() if value not in ((), {}, None, "")}), end="")
    return ExitStatus.SUCCESS


def _check_manifests(found: list[api.ManifestInfo], ui: UI, as_json: bool) -> int:
    """Every broken manifest with its error and fix; exit 2 (bad input) when there is one."""
    broken = [(m, m.error) for m in found if m.error is not None]
    if as_json:
        print_json_lines({"manifest": m.ref, "source": m.source, "error": error.message, "hint": error.hint}
                         for m, error in broken)
    else:
        from dejima.ui.console import render_error

        for _, error in broken:  # the command's answer: on stdout, as a linter prints what it found
            ui.out.print(render_error(error))
        if not broken:
            ui.answer(f"{len(found)} manifests, none broken")
    return ExitStatus.USAGE if broken else ExitStatus.SUCCESS


COMMANDS = {
    "sessions": _sessions, "stop": _stop, "clean": _clean, "doctor": _doctor,
    "images": _images, "settings": _settings, "violations": _violations, "ledger": _ledger,
    "manifests": _manifests,
}
# Each command's parser, built without running it: its --help and the shell completion read the same one.
PARSERS: dict[str, Callable[[], argparse.ArgumentParser]] = {
    "sessions": _sessions_parser, "stop": _stop_parser, "clean": _clean_parser, "doctor": _doctor_parser,
    "images": _images_parser, "settings": _settings_parser, "violations": _violations_parser,
    "ledger": _ledger_parser, "manifests": _manifests_parser,
}
