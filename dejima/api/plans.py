"""A session's request, and its plan rendered without applying it: what `dejima PATH --render` prints, as text
or as Kubernetes objects."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from dejima.api.reporting import _quiet
from dejima.errors import DiagnosticError, UsageError

if TYPE_CHECKING:
    from dejima.core.plan import SessionPlan
    from dejima.core.resolve import Resolved
    from dejima.core.settings import Settings
    from dejima.orchestration.actions import Planned
    from dejima.orchestration.session_reporter import SessionReporter as Reporter
    from dejima.orchestration.start_plan import StartPlan
    from dejima.orchestration.start_request import Options


@dataclass(frozen=True, slots=True)
class Request:
    """What a session on a workspace asks for: the command line's choices, as data.

    ``command``: what runs in the session (None: an interactive shell on this terminal, as `dejima PATH`).
    ``harness``, ``backend``, ``workflows``, ``forges``: the manifests chosen on top of the detected ones
    (``--harness``...). ``allow``: egress entries added to the settings' (``--allow``); ``allow_special``: the
    overrides that let an entry reach a special place (``--allow-special``); ``dns_upstreams``: the resolvers the
    filter forwards to (``--dns-upstream``); ``publish``: the session's ports reachable from the host
    (``--publish``, ``3000`` or ``"8080:3000"``, on 127.0.0.1 unless an address is said). ``settings``: a
    ``Settings`` (``load_settings(path)``); None reads the user's settings file (``$DEJIMA_SETTINGS``, else
    ``$XDG_CONFIG_HOME/dejima/settings.toml``).
    Bad values are refused with an ``InputError`` naming the keyword (``allow``, ``as_root=True``); ``spelling``
    says how errors name the request's options: ``"keywords"`` (the default, for a program) or ``"flags"``
    (``--allow``, ``--as-root``: the command line, which is one of this API's users, asks for them).
    """

    workspace: str | os.PathLike[str]
    command: Sequence[str] | None = None
    harness: str = "shell"
    backend: str | None = None
    workflows: Sequence[str] = ()
    forges: Sequence[str] = ()
    allow: Sequence[str] = ()
    allow_special: Sequence[str] = ()
    dns_upstreams: Sequence[str] = ()
    publish: Sequence[str] = ()
    as_root: bool = False
    accept_findings: bool = False
    settings: Settings | None = None
    spelling: Literal["keywords", "flags"] = "keywords"

    def __post_init__(self) -> None:
        if self.spelling not in ("keywords", "flags"):
            raise UsageError(f"Request.spelling is {self.spelling!r}", hint="write 'keywords' or 'flags'")
        for name in ("workflows", "forges", "allow", "allow_special", "dns_upstreams", "publish"):
            value = getattr(self, name)
            if isinstance(value, str):  # a lone string would be read as its characters
                raise UsageError(f"Request.{name} is a string, not a list of them ({value!r})",
                                 hint=f"write {name}=[{value!r}]")
            object.__setattr__(self, name, tuple(value))
        if isinstance(self.command, str):
            raise UsageError(f"Request.command is a string, not a list of arguments ({self.command!r})",
                             hint=f"write command=[{self.command!r}], or command=['sh', '-c', {self.command!r}]")
        if self.command is not None:
            if not self.command:
                raise UsageError("Request.command is empty", hint="give the command to run, or None for a shell")
            object.__setattr__(self, "command", tuple(self.command))


# The command line's flags as the Request's keywords: (flag, keyword, how a value is written: list, str or
# none for a switch). dejima's layers name the flags; an error raised through the API is reworded.
_KEYWORDS = (("--allow-special", "allow_special", "list"), ("--allow", "allow", "list"),
             ("--dns-upstream", "dns_upstreams", "list"), ("--workflow", "workflows", "list"),
             ("--forge", "forges", "list"), ("--harness", "harness", "str"), ("--backend", "backend", "str"),
             ("--as-root", "as_root=True", "none"), ("--accept-findings", "accept_findings=True", "none"))
_NOT_A_VALUE = "(?:or|and|is|are|needs|takes|to|for|the|with|in|at|of|was)\\b"  # "--allow is not ...": prose
_FLAG = re.compile("(?<![\\w-])(" + "|".join(re.escape(flag) for flag, _, _ in _KEYWORDS)
                   + f")(?![\\w-])(?: (?!{_NOT_A_VALUE})([^\\s,;()\\]]+))?")


def _in_keywords(text: str) -> str:
    """``text`` with each command-line flag (and its value) written as the Request keyword it is."""
    kinds = {flag: (keyword, how) for flag, keyword, how in _KEYWORDS}

    def keyword(match: re.Match[str]) -> str:
        name, how = kinds[match.group(1)]
        value = match.group(2)
        if value is None or how == "none":
            return name + (f" {value}" if value is not None else "")
        trailing = value[len(value.rstrip(".:")):]
        value = value.rstrip(".:")
        return (f"{name}=[{value!r}]" if how == "list" else f"{name}={value!r}") + trailing

    return _FLAG.sub(keyword, text)


@contextmanager
def _worded(request: Request) -> Iterator[None]:
    """Errors raised for ``request`` name its options as it asked (``Request.spelling``)."""
    try:
        yield
    except DiagnosticError as exc:
        if request.spelling == "keywords":
            exc.message = _in_keywords(exc.message)
            exc.args = (exc.message,)
            exc.hint = _in_keywords(exc.hint) if exc.hint else exc.hint
            exc.context = _in_keywords(exc.context) if exc.context else exc.context
        raise


@dataclass(frozen=True, slots=True)
class Rendered:
    """A session's plan, made by the start's own steps without applying them (``render``)."""

    plan: SessionPlan
    actions: tuple[Planned, ...]  # the start's actions, each with what it needs and its undo (orchestration/actions.py)
    text: str  # what `dejima PATH --render` prints: the plan and the start's actions
    start: StartPlan  # the whole start as data (its ``session`` is ``plan``): what a real start applies


def load_settings(path: str | os.PathLike[str] | None = None) -> Settings:
    """The settings in the file at ``path``, strictly validated (``SettingsError`` names the key and the fix);
    None: the user's settings file, or the defaults when it is absent."""
    from dejima.adapters import host

    return host.load_settings(Path(path), required=True) if path is not None else host.load_settings()


@dataclass(frozen=True, slots=True)
class _Inputs:
    workspace: Path
    command: tuple[str, ...] | None
    resolved: Resolved
    settings: Settings
    options: Options


def _inputs(request: Request, reporter: Reporter) -> _Inputs:
    """The request checked in the command line's order: flags, settings, workspace, manifests."""
    from dejima.adapters import host
    from dejima.core.kinds import ALLOW_ENTRY, PUBLISH, RESOLVER
    from dejima.core.schema import check_flag
    from dejima.orchestration import start_request

    flags = request.spelling == "flags"
    upstream = tuple(check_flag(RESOLVER, text, "--dns-upstream" if flags else "dns_upstreams")
                     for text in request.dns_upstreams)
    allow = tuple(check_flag(ALLOW_ENTRY, text, "--allow" if flags else "allow") for text in request.allow)
    allow_special = tuple(check_flag(ALLOW_ENTRY, text, "--allow-special" if flags else "allow_special")
                          for text in request.allow_special)
    publish = tuple(str(check_flag(PUBLISH, text, "--publish" if flags else "publish")) for text in request.publish)
    settings = request.settings if request.settings is not None else host.load_settings()
    workspace = start_request.validate_workspace(os.fspath(request.workspace))
    selection = start_request.Selection(request.harness, request.backend, tuple(request.workflows),
                                        tuple(request.forges))
    resolved = start_request.resolve_manifests(workspace, selection, reporter)
    options = start_request.Options(allow, allow_special, upstream, request.as_root, request.accept_findings,
                                    publish)
    command = tuple(request.command) if request.command is not None else None
    return _Inputs(workspace, command, resolved, settings, options)


def render(request: Request, reporter: Reporter | None = None) -> Rendered:
    """The plan a start on ``request`` would run, and its text as `dejima PATH --render` prints it. Needs no
    engine and reads no secret (credential sources are named, not read); the session id is ``render``."""
    from dejima.orchestration import start
    from dejima.orchestration.actions import format_actions
    from dejima.ui.views import format_plan

    reporter = _quiet(reporter)
    with _worded(request):
        given = _inputs(request, reporter)
        planned = start.render_start(given.workspace, given.command, given.resolved, given.settings, given.options,
                                     reporter)
    return Rendered(planned.session, planned.actions,
                    format_plan(planned.session) + "\n\n" + format_actions(planned.actions), planned)


def render_kubernetes(request: Request, kind: Literal["Sandbox", "Pod"] = "Sandbox",
                      reporter: Reporter | None = None) -> str:
    """The session as objects for `kubectl apply` (YAML), as `dejima PATH --render kubernetes` (a ``Sandbox`` of
    agent-sandbox) or ``--render pod`` (a plain ``Pod``) prints it: docs/kubernetes.md. Needs no engine and
    reads no secret; the settings' ``[kubernetes]`` section names the images and the cluster's DNS."""
    from dejima.orchestration.kubernetes_render import render_kubernetes as rendered

    reporter = _quiet(reporter)
    with _worded(request):
        given = _inputs(request, reporter)
        return rendered(given.workspace, given.command, given.resolved, given.settings, given.options, reporter,
                        kind)
