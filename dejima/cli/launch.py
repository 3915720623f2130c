"""`dejima`: start a session on a workspace, or manage sessions, images and settings."""

from __future__ import annotations

import argparse
import gc
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, TextIO

from dejima import __version__
from dejima.cli._run import run_main
from dejima.errors import ExitStatus, UsageError
from dejima.ui.console import UI

if TYPE_CHECKING:
    from dejima.orchestration.prestart import Prestarted

# dejima.cli.manage's COMMANDS, by name (a unit test holds them equal): the module is imported only
# for them, since a session's start imports as little as it can before its filter is started.
MANAGEMENT_COMMANDS = frozenset({"sessions", "stop", "clean", "doctor", "images", "settings", "violations", "ledger",
                                 "manifests"})
COMPLETION = "completion"  # dejima.cli.completion, which reads every parser (manage's among them)

DESCRIPTION = """\
Run a coding agent (or any command) on a real repository inside a guarded container pair.

  dejima PATH                  interactive shell in a session on PATH (a real TTY)
  dejima PATH -- CMD ARGS...   run CMD in a session, stream its output, exit with its status
                               (a stdin that is not a terminal is CMD's, as `docker run -i`)

What a session gets: the workspace PATH read-write at the same absolute path, a home directory
kept per project, a private /tmp, your uid:gid (run as root: the workspace owner's, or 0 with
--as-root) with every capability dropped, limits on processes, memory and CPU, no Docker socket,
and NO network egress except what you allow: a filter container applies an nftables default-deny
ruleset in the session's network namespace and verifies it before the session starts; its
resolver is the session's only DNS and answers only allowed names. Loopback works; IPv6 is off.

  dejima PATH --allow pypi.org --allow '*.pythonhosted.org:443' -- pip download six

Management commands (they come first, so a directory named like one needs ./NAME):
  dejima sessions [--json]     list sessions (running, or stale after a launcher crash)
  dejima stop SESSION          stop a session and remove its containers
  dejima clean [--all]         remove stale sessions (--all: every session of this scope)
  dejima doctor [--build]      check the engine, nftables, images, and that egress is blocked
  dejima doctor --session SESSION
                               run the escape checks from inside a running session (exit 0: all hold)
  dejima images [list|build|bootstrap|prune]
                               list, build, debootstrap, or prune the images dejima uses
  dejima settings [path|show|reference]
                               where the settings file is, the effective values, every key
  dejima ledger SESSION        the requests a session's credential proxy carried (never a secret)
  dejima violations [SESSION]  what a session was refused (names, answers), recorded durably
  dejima manifests [list|show KIND/NAME|check|reference]
                               forges, workflows, harnesses, backends, where each comes from, and
                               why a broken one is refused (it stops only sessions that use it)
  dejima completion SHELL      a completion script for bash, zsh or fish (subcommands, flags, names)

Exit status: CMD's status (128+N when it ends on signal N; 143 after `dejima stop`); 125 when
dejima itself fails (DEJIMA_DEBUG=1 adds the traceback of an unexpected error); 127 when CMD does
not exist in the session image; 122 when unreviewed critical audit findings refuse the start
(nothing started; --accept-findings); 2 for bad input (arguments, settings, manifests, entries).
Every --json prints JSON lines: one object per line.
Settings: $XDG_CONFIG_HOME/dejima/settings.toml (or $DEJIMA_SETTINGS), validated strictly.
"""

EPILOG = """\
Two more commands come with dejima (each has its own --help):
  dejima-allow [ENTRY|N]       while a session runs, from its workspace: the names it was refused,
                               and a grant for one at once (--for 30m; --persist: next time too),
                               or --revoke
  dejima-audit [ACTION]        review what sessions left that could run code later on the host
                               (git hooks, IDE tasks, agent configs...): ack, show, restore, rules
"""




RENDER_FORMATS = ("text", "kubernetes", "pod")


def launch_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dejima", description=DESCRIPTION, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
        usage="dejima [OPTIONS] PATH [-- CMD [ARGS...]]\n       dejima COMMAND [...]",
    )
    parser.add_argument("path", metavar="PATH", help="the workspace: a project directory")
    parser.add_argument("--harness", default="shell", help="agent program to run (`dejima manifests list` shows "
                        "them; default: shell)")
    parser.add_argument("--backend", help="model provider (default: the harness's own)")
    parser.add_argument("--workflow", action="append", default=[], help="toolchain to add to the detected ones "
                        "(repeatable)")
    parser.add_argument("--forge", action="append", default=[], help="forge to add to the detected one (repeatable)")
    parser.add_argument("--allow", action="append", default=[], metavar="DOMAIN[:PORT]",
                        help="let the session reach this name, *.subdomain pattern or IPv4 address/network "
                        "(TCP; repeatable); adds to [network] allow in the settings. An address or network that "
                        "reaches cloud metadata, this host or the engine gateway, or is wider than /8, also "
                        "needs --allow-special")
    parser.add_argument("--allow-special", action="append", default=[], metavar="ENTRY",
                        help="let an --allow (or [network] allow) entry through that reaches a special place: "
                        "a network shorter than /8, link-local or cloud metadata, this host's addresses, the "
                        "engine gateway; ENTRY must be that entry exactly (repeatable; shown on the boundary card)")
    parser.add_argument("--publish", action="append", default=[], metavar="[ADDRESS:][HOST_PORT:]PORT",
                        help="make the session's TCP PORT reachable from the host on 127.0.0.1:HOST_PORT (default: "
                        "the same port; repeatable; adds to [session] publish). Only 127.0.0.1 unless ADDRESS is "
                        "given, e.g. 0.0.0.0:3000:3000 (shown as a warning on the boundary card); egress is unchanged")
    parser.add_argument("--as-root", action="store_true",
                        help="when dejima runs as root, run the session as uid 0 (still without capabilities) "
                        "instead of as the workspace's owner")
    parser.add_argument("--dns-upstream", action="append", default=[], metavar="IP",
                        help="IPv4 resolver the filter forwards allowed queries to (repeatable; default: "
                        "[network] upstream_dns, else the host's)")
    parser.add_argument("--accept-findings", action="store_true",
                        help="start even though earlier sessions left unreviewed critical audit findings")
    parser.add_argument("--render", nargs="?", const="text", choices=RENDER_FORMATS, metavar="FORMAT",
                        help="print the plan and exit; needs no Docker, reads no secret. FORMAT: text (the "
                        "default: policy, mounts, nft ruleset, the start's steps), kubernetes (the session as an "
                        "agent-sandbox Sandbox with its ConfigMap and NetworkPolicy, YAML for kubectl apply), pod "
                        "(the same as a plain Pod); docs/kubernetes.md")
    parser.add_argument("-q", "--quiet", action="store_true", help="only errors and warnings on stderr")
    parser.add_argument("--version", action="version", version=f"dejima {__version__}")
    return parser


def _split_command(argv: list[str]) -> tuple[list[str], tuple[str, ...] | None]:
    if "--" not in argv:
        return argv, None
    index = argv.index("--")
    command = tuple(argv[index + 1:])
    if not command:
        raise UsageError("nothing after '--'", hint="write the command to run: dejima PATH -- CMD ARGS...")
    return argv[:index], command


GC_PAUSE_SECONDS = 10.0


def _launch(argv: list[str], ui: UI) -> int:
    # A start allocates much (plans, the audit's snapshot) and leaves almost no cycles: the
    # collector would spend ~50 ms walking live objects during it. It is off for the start (back
    # on after GC_PAUSE_SECONDS, for a long session).
    from dejima.adapters.fork_workers import pause_gc

    resume = pause_gc()
    timer = threading.Timer(GC_PAUSE_SECONDS, resume)
    timer.daemon = True
    timer.start()
    try:
        return _start(argv, ui)
    finally:
        timer.cancel()
        resume()


def _start(argv: list[str], ui: UI) -> int:
    options, command = _split_command(argv)
    args = launch_parser().parse_args(options)
    ui.quiet = args.quiet
    if args.render:
        return _session(args, command, ui, None)
    if command is None and not _is_terminal(sys.stdin):  # before anything starts: nothing to leave behind
        raise UsageError("no terminal: give a command after --",
                         hint="an interactive session needs a terminal on stdin; dejima PATH -- CMD ARGS... runs "
                         "CMD without one, with this stdin as its own")
    # First thing, the filter this workspace's last session had (orchestration/prestart.py): the
    # engine starts it while the rest of the launcher is imported and the plan is made.
    from dejima.orchestration import prestart

    # A publishing start never adopts one (no remembered filter binds a port): it would only be removed.
    prestarted = prestart.begin(args.path) if not args.publish else None
    try:
        return _session(args, command, ui, prestarted)
    finally:
        if prestarted is not None:
            from dejima.adapters.session_dirs import clear_run_dir, discard_unstarted  # the prestart's imports

            prestarted.discard()  # unless the session adopted it
            clear_run_dir(prestarted.session_id)  # a session that never started leaves no socket either
            discard_unstarted(prestarted.session_id)  # nor a state directory


def _session(args: argparse.Namespace, command: tuple[str, ...] | None, ui: UI,
             prestarted: Prestarted | None) -> int:
    from dejima import api

    request = api.Request(args.path, command, harness=args.harness, backend=args.backend, workflows=args.workflow,
                          forges=args.forge, allow=args.allow, allow_special=args.allow_special, publish=args.publish,
                          dns_upstreams=args.dns_upstream, as_root=args.as_root, accept_findings=args.accept_findings,
                          spelling="flags")
    if args.render in ("kubernetes", "pod"):
        print(api.render_kubernetes(request, "Pod" if args.render == "pod" else "Sandbox", ui), end="")
        return ExitStatus.SUCCESS
    if args.render:
        print(api.render(request, ui).text)
        return ExitStatus.SUCCESS
    with api.Session(request, reporter=ui, prestarted=prestarted) as session:
        status = session.run(stdin=_forwarded_stdin(command))
    gc.freeze()  # the process ends now: its exit need not walk every object it made (~30 ms)
    return status


def _mistyped_command(word: str) -> None:
    """`dejima sesions`: a word that is no directory here but close to a command is a typo of it."""
    if word.startswith("-") or "/" in word or Path(word).exists():
        return
    from dejima.core.schema import did_you_mean

    commands = sorted(MANAGEMENT_COMMANDS | {COMPLETION})
    guess = did_you_mean(word, commands)
    if guess:
        raise UsageError(f"{word!r} is neither a command nor a directory here",
                         hint=f"{guess}commands: {', '.join(commands)}; a workspace is a "
                         "directory (a directory named like a command is ./NAME)")


def _is_terminal(stream: TextIO | None) -> bool:
    return stream is not None and stream.isatty()


def _forwarded_stdin(command: tuple[str, ...] | None) -> BinaryIO | None:
    """This process's stdin for a command to read, as `docker run -i` gives it, unless it is a terminal (a
    terminal's keys stay with this shell, as `docker run` without -i; the command reads end of file). Unbuffered:
    the copy (on its own thread) takes what is there when it is there, and holds no lock at exit."""
    if command is None or _is_terminal(sys.stdin):
        return None
    raw: BinaryIO | None = getattr(getattr(sys.stdin, "buffer", None), "raw", None)  # None: no stdin, end of file
    return raw


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] in MANAGEMENT_COMMANDS:
        from dejima.cli.manage import COMMANDS

        name = args.pop(0)
        return run_main(lambda ui: COMMANDS[name](args, ui), failure=ExitStatus.FAILURE)
    if args and args[0] == COMPLETION:
        from dejima.cli.completion import completion

        return run_main(lambda ui: completion(args[1:], launch_parser()), failure=ExitStatus.FAILURE)

    def launch(ui: UI) -> int:
        if args:
            _mistyped_command(args[0])
        return _launch(args, ui)

    return run_main(launch)
