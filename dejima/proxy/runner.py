"""A session's credential proxy, from its manifests to a running server in the launcher.

    sources, skipped = read_session_sources(resolved, command)   # on the host: the secrets' sources
    plan = plan_session_routes(resolved, settings, directory, git_config, draws, sources)   # no I/O
    config = served_config(plan, sources)                # the sources handed in, the session CA made
    write_home_files(plan, config, home)                 # the decoy file, the session CA's trust
    with ProxyThread(config, socket_path):               # serving while the session runs
        ...

The proxy runs on its own asyncio loop in a thread of the launcher, so its secrets live in the
launcher's memory only, and die with it. Its socket sits in the session's run directory, which
is mounted into the filter alone; the filter relays the session's 127.0.0.1:BRIDGE_PORT to it.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Collection, Iterable, Sequence
from dataclasses import replace
from pathlib import Path
from types import TracebackType

from dejima.adapters.home_files import Owner, open_within, read_existing
from dejima.adapters.home_files import replace as replace_file
from dejima.adapters.host import read_pem_certificates
from dejima.core.credentials import RouteError, parse_upstream
from dejima.core.manifest import CredentialRoute
from dejima.core.paths import SESSION_TRUST_DIR
from dejima.core.placeholders import Draws
from dejima.core.plan import proxy_limits
from dejima.core.pushrules import PushPolicy
from dejima.core.resolve import Resolved
from dejima.core.route_plan import BUNDLE_FILE, CA_FILE, RoutesPlan, declared_routes, plan_routes
from dejima.core.settings import Settings
from dejima.core.upstream_proxy import UpstreamProxy
from dejima.proxy.server import ProxyConfig, ProxyServer
from dejima.proxy.setup import read_sources_of
from dejima.proxy.sources import CredentialError, CredentialSource

TRUST_DIR = SESSION_TRUST_DIR  # in the session's home: the session CA and the bundle its tools trust
# The host's bundle of system CAs, the first that exists (Debian/Ubuntu, Fedora/RHEL, Alpine/others).
SYSTEM_BUNDLES = ("/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt", "/etc/ssl/cert.pem")


def required_routes(resolved: Resolved, command: tuple[str, ...] | None) -> tuple[str, ...]:
    """Routes a session cannot do without: when the harness's own agent runs (no command given),
    the routes of its backend, because an agent that cannot reach its model does nothing."""
    if command is not None or resolved.harness.name == "shell":
        return ()
    return tuple(r.name for c in resolved.of_kind("backends") for r in c.manifest.credentials)


def push_policies(routes: Iterable[tuple[CredentialRoute, str]], git_config: str) -> dict[str, PushPolicy]:
    """Git routes (scheme Basic) may push only to this workspace's own remotes on their host."""
    from dejima.adapters.repo import remote_repositories

    policies = {}
    for route, _origin in routes:
        if route.scheme == "Basic":
            host = parse_upstream(route.upstream, route.name).host
            policies[route.name] = PushPolicy(remote_repositories(git_config, host))
    return policies


# The sources by route name, and the missing ones' errors
Read = tuple[dict[str, CredentialSource], tuple[CredentialError, ...]]


def read_session_sources(resolved: Resolved, command: tuple[str, ...] | None) -> Read:
    """The sources of the session's routes, read on the host now (helper commands run), by route name;
    a missing one is left out with its error, unless the harness's agent needs it (required_routes),
    which raises CredentialError."""
    return read_sources_of(declared_routes(resolved), required_routes(resolved, command))


def plan_session_routes(resolved: Resolved, settings: Settings, session_dir: Path, git_config: str, draws: Draws,
                        present: Collection[str] | None, upstream_proxy: UpstreamProxy | None = None) -> RoutesPlan:
    """The session's routes as a start plans them (core/route_plan.py: placeholders and decoys from
    ``draws``, each source named, never read), with the proxy's settings: its budget, its records in
    ``session_dir``, the extra CAs and ``upstream_proxy`` (the corporate proxy its https upstreams are
    reached through). ``present``: the routes whose source the host has, None (``--render``): all. No I/O."""
    routes = declared_routes(resolved)
    credentials = settings.credentials
    try:
        plan = plan_routes(routes, draws, credentials.upstreams, push_policies(routes, git_config), present,
                           credentials.decoys)
    except RouteError as exc:
        raise CredentialError(str(exc), hint="fix the upstream override in settings") from None
    return replace(plan, records=str(session_dir), limits=proxy_limits(settings),
                   extra_ca_file=credentials.extra_ca_file or None,
                   upstream_proxy=(upstream_proxy.host, upstream_proxy.port) if upstream_proxy is not None else None,
                   upstream_proxy_ca_file=settings.network.extra_ca or None)


def write_home_files(plan: RoutesPlan, config: ProxyConfig, home: Path, owner: Owner = None) -> list[str]:
    """What the proxy puts in the session's home: the decoy AWS credentials file, and the session CA
    with the bundle its tools trust (when hosts are intercepted). Returns a note for each thing a
    previous session left in the way and that was replaced (dejima.adapters.home_files)."""
    notes: list[str] = []
    if plan.decoys.aws_credentials_file:
        notes += _plant_decoy_file(home, plan.decoys.aws_credentials_file, owner)
    if config.interception is not None:
        extra = plan.upstream_proxy_ca_file
        extra_pem = b"".join(read_pem_certificates(extra, "network.extra_ca")).decode("ascii") if extra else ""
        notes += write_trust(home, TRUST_DIR.split("/"), config.interception.authority.ca_pem, owner, extra_pem)
    return notes


DECOY_MARK = "# dejima decoy: fake values, planted to catch an agent that goes looking for credentials\n"
_DECOY_PATH = (".aws", "credentials")


def _plant_decoy_file(home: Path, text: str, owner: Owner) -> list[str]:
    """Write the decoy where a real file would be, unless a file that is no decoy already lives there;
    a root launcher hands it to the session's user, who must be able to read it like a real one."""
    notes: list[str] = []
    *parents, name = _DECOY_PATH
    shown = "~/" + "/".join(_DECOY_PATH)
    directory = open_within(home, parents, owner, notes)
    try:
        try:
            existing = read_existing(directory, name, 1 << 20)
        except ValueError as exc:
            notes.append(f"{shown} could not be read ({exc}); replaced by the decoy")
            existing = None
        if existing is None or existing.startswith(DECOY_MARK.encode()):
            replace_file(directory, name, (DECOY_MARK + text).encode(), 0o600, owner, None, shown)
    finally:
        os.close(directory)
    return notes


def system_bundle() -> str:
    """The host's system CAs as PEM ("" when the host has no bundle where Linux keeps one)."""
    for candidate in SYSTEM_BUNDLES:
        if os.path.isfile(candidate):
            return Path(candidate).read_text(encoding="ascii", errors="replace")
    return ""


def write_trust(root: Path, parents: Sequence[str], ca_pem: str, owner: Owner, extra_pem: str = "") -> list[str]:
    """The session CA alone and the bundle (system CAs, ``extra_pem`` (``[network] extra_ca``: a corporate
    proxy's CA), then the session CA) in ``root``/``parents``, readable by the session's user; public
    certificates only, the CA's key stays in the proxy's memory. Nothing a session left on the way is
    followed (dejima.adapters.home_files); returns its notes."""
    notes: list[str] = []
    directory = open_within(root, parents, owner, notes, mode=0o755)
    try:
        bundle = "\n".join(part.rstrip("\n") for part in (system_bundle(), extra_pem) if part.strip())
        for name, text in ((CA_FILE, ca_pem), (BUNDLE_FILE, f"{bundle}\n{ca_pem}" if bundle else ca_pem)):
            replace_file(directory, name, text.encode("ascii"), 0o644, owner, notes,
                    "~/" + "/".join((*parents, name)))
    finally:
        os.close(directory)
    return notes


class ProxyThread:
    """The proxy serving on ``socket_path`` from a thread of its own, for a ``with`` block."""

    def __init__(self, config: ProxyConfig, socket_path: Path, tls_socket_path: Path | None = None) -> None:
        self.server = ProxyServer(config)
        self.socket_path, self.tls_socket_path = socket_path, tls_socket_path
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="credential-proxy", daemon=True)

    def __enter__(self) -> ProxyThread:
        self.thread.start()
        try:
            asyncio.run_coroutine_threadsafe(self.server.start(
                unix_path=self.socket_path, tls_unix_path=self.tls_socket_path), self.loop).result(60)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        # The filter connects as root without CAP_DAC_OVERRIDE: the mode lets it in; no one else
        # reaches the path (its parent directory on the host is the launcher's own 0700 one).
        for path in (self.socket_path, self.tls_socket_path):
            if path is not None and path.exists():
                os.chmod(path, 0o666)
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        if self.thread.is_alive():
            try:
                asyncio.run_coroutine_threadsafe(self.server.close(grace=1.0), self.loop).result(10)
            finally:
                self.loop.call_soon_threadsafe(self.loop.stop)
                self.thread.join(10)
        self.loop.close()
