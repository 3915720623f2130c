"""What a session start asks for, before anything starts: the workspace checked, the manifests
resolved from the command line's choices, the host's network facts, and the ``SessionRequest``
(the same for a real start and for ``--render``). The start itself is dejima/orchestration/start.py.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from dejima.adapters import host, projects
from dejima.adapters.manifest_files import load_catalog
from dejima.adapters.repo import read_repo_policy, workspace_facts
from dejima.adapters.session_dirs import gate_dir, run_dir
from dejima.core.manifest import ManifestError
from dejima.core.plan import NetworkFacts, SessionRequest
from dejima.core.resolve import REPO_POLICY_FILE, Resolved, resolve
from dejima.core.settings import Settings
from dejima.core.upstream_proxy import UpstreamProxy, chosen_proxy
from dejima.errors import SessionError, SettingsError, UsageError
from dejima.orchestration.session_reporter import SessionReporter

if TYPE_CHECKING:  # the engine's adapter is imported by the functions that use it
    from dejima.adapters.runtime import Runtime


def validate_workspace(path: str) -> Path:
    candidate = Path(path).expanduser()
    if not candidate.exists():
        raise UsageError(f"workspace {path!r} does not exist", hint="give the path of a project directory")
    if not candidate.is_dir():
        raise UsageError(f"workspace {path!r} is not a directory", hint="give the path of a project directory")
    resolved = candidate.resolve()
    home = Path.home().resolve()
    if resolved == Path("/") or resolved == home or resolved in home.parents:
        raise UsageError(
            f"refusing to use {resolved} as a workspace: it holds your whole home directory "
            f"(~/.ssh, credentials, other projects)",
            hint="give the path of one project, e.g. ~/repos/project",
        )
    for own in (host.config_dir(), host.state_dir(), host.data_dir(), host.settings_path()):
        own = own.resolve()
        if own.is_relative_to(resolved) or resolved.is_relative_to(own):
            # A session writes its workspace: there it could widen the next session's settings,
            # acknowledge findings, or change what the launcher starts (state, prestart, image tags).
            raise UsageError(
                f"refusing to use {resolved} as a workspace: it overlaps dejima's own files ({own})",
                hint="give the path of one project that holds none of dejima's settings, state or data",
            )
    return resolved


@dataclass(frozen=True, slots=True)
class Selection:
    """The manifest choices the user made on the command line."""

    harness: str = "shell"
    backend: str | None = None
    workflows: tuple[str, ...] = ()
    forges: tuple[str, ...] = ()


def resolve_manifests(workspace: Path, selection: Selection, ui: SessionReporter) -> Resolved:
    catalog = load_catalog()
    repo_policy = read_repo_policy(workspace)
    for key in repo_policy.ignored:
        ui.warn(f"{workspace / REPO_POLICY_FILE}: '{key}' ignored: the repository may only narrow the policy "
                "(deny entries), never widen it")
    try:
        resolved = resolve(catalog.manifests, workspace_facts(workspace), selection.harness, selection.backend,
                           selection.workflows, selection.forges, repo_policy, catalog.broken)
        for broken in resolved.skipped:
            ui.warn(f"{broken.source} is broken and not used here; `dejima manifests check` says why")
        return resolved
    except ManifestError as exc:
        if exc.reference == "unknown-manifest":  # a command-line name that names nothing
            raise UsageError(exc.message, hint=exc.hint) from exc
        raise


def network_facts(settings: Settings, runtime: Runtime | None, upstream_override: tuple[str, ...]) -> NetworkFacts:
    """Upstream resolvers and the addresses answers may never point at; without an engine
    (render mode) the gateway is left out."""
    upstreams = list(upstream_override or settings.network.upstream_dns) or host.host_resolvers()
    if not upstreams:
        raise SessionError(
            "no upstream DNS resolver for the filter: the host's /etc/resolv.conf lists none that a "
            "container can reach",
            hint="set [network] upstream_dns = [\"IP\"] in the settings, or pass --dns-upstream IP",
            reference="no-upstream-dns",
        )
    local = host.local_addresses()
    gateway = runtime.gateway(settings.session.network) if runtime is not None else None
    denied = [*local, *([gateway] if gateway else [])]
    return NetworkFacts(
        upstreams=tuple(ipaddress.IPv4Address(a) for a in upstreams),
        denied_addresses=tuple(ipaddress.ip_network(a) for a in sorted(set(denied))),
        host_addresses=tuple(ipaddress.ip_network(a) for a in local),
        gateway=ipaddress.ip_network(gateway) if gateway else None,
        upstream_proxy=upstream_proxy(settings),
    )


def upstream_proxy(settings: Settings, environment: Mapping[str, str] | None = None) -> UpstreamProxy | None:
    """The corporate proxy sessions leave through (core/upstream_proxy.py), its name resolved here: the
    filter connects to that address. ``environment``: the host's variables (default: the launcher's own).
    None: connections go direct."""
    variables = host.proxy_variables() if environment is None else environment
    try:
        proxy = chosen_proxy(settings.network.upstream_proxy, variables, str(host.settings_path()))
    except ValueError as exc:
        raise SettingsError(str(exc), hint="write it as http://HOST:PORT (the setting beats the host's variables), "
                            "or set [network] upstream_proxy = \"direct\" to ignore the host's variables",
                            reference="upstream-proxy") from None
    if proxy is None:
        return None
    address = host.ipv4_address(proxy.host)
    if address is None:
        raise SessionError(f"the upstream proxy {proxy.url} (from {proxy.origin}) has no IPv4 address here",
                           hint="check the name, or write the proxy's address in [network] upstream_proxy "
                                "(\"direct\" there ignores the host's variables)",
                           reference="upstream-proxy")
    if address.is_loopback or address.is_unspecified:
        raise SessionError(f"the upstream proxy {proxy.url} (from {proxy.origin}) is this host's loopback, which "
                           "a session's filter cannot reach (it has a network of its own)",
                           hint="set [network] upstream_proxy to an address the containers reach (the engine "
                                "gateway's, say, with the proxy listening there), or to \"direct\" if sessions "
                                "need no proxy", reference="upstream-proxy")
    return replace(proxy, address=address)


@dataclass(frozen=True, slots=True)
class Options:
    """What the command line adds to a session, validated by the CLI."""

    allow: tuple[str, ...] = ()
    allow_special: tuple[str, ...] = ()
    upstream_dns: tuple[str, ...] = ()
    as_root: bool = False
    accept_findings: bool = False
    publish: tuple[str, ...] = ()  # --publish values


def protected_paths(workspace: Path, settings: Settings) -> tuple[PurePosixPath, ...]:
    """Workspace paths the session gets read-only: .git/hooks, when it is a real directory."""
    hooks = workspace / ".git" / "hooks"
    if settings.session.protect_git_hooks and hooks.is_dir() and not hooks.is_symlink() \
            and not (workspace / ".git").is_symlink():
        return (PurePosixPath(hooks),)
    return ()


def session_request(workspace: Path, command: tuple[str, ...] | None, resolved: Resolved, settings: Settings,
                    options: Options, session_id: str, launcher: str) -> SessionRequest:
    """What a session on ``workspace`` asks for: the same for a real start and for ``--render``,
    so that render shows what runs (paths are computed here, made by the caller)."""
    home = host.home_dir_for(workspace)
    project_allow, project_source = projects.read_allow(workspace)
    return SessionRequest(
        session_id=session_id,
        scope=host.scope(),
        workspace=PurePosixPath(workspace),
        home_dir=PurePosixPath(home),
        command=command,
        launcher=launcher,
        harness=resolved.harness.name,
        allow=options.allow,
        allow_special=options.allow_special,
        publish=options.publish,
        resolv_conf=PurePosixPath(host.state_dir() / "resolv.conf"),
        cache_root=PurePosixPath(host.data_dir() / "caches" / home.name),
        read_only=protected_paths(workspace, settings),
        run_dir=PurePosixPath(run_dir(session_id)),
        gate_dir=PurePosixPath(gate_dir(session_id)),
        control_owner=os.getuid(),
        project_allow=project_allow,
        project_source=project_source,
    )
