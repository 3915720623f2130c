"""The session plan: every container dejima will create, as values, before anything starts.

``build_session_plan`` is pure. The plan is what the launcher executes and what ``--render``
prints (with its hash).
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import re
import shlex
from dataclasses import asdict, dataclass, field, replace
from pathlib import PurePosixPath

from dejima.core import labels
from dejima.core.egress import EgressPolicy, IPNetwork, PolicyError, parse_entry, policy_document
from dejima.core.limits import ContainerLimits, ProxyLimits, is_share, parse_size, resolve_memory
from dejima.core.paths import (
    BRIDGE_PORT,
    FILTER_CONFIG_ENV,
    FILTER_CONFIG_FIFO,
    FILTER_CONFIG_FIFO_ENV,
    FILTER_RUN_DIR,
    GATE_DIR,
    GATE_FIFO,
    GATE_WORD,
    SESSION_HOME,
)
from dejima.core.publish import Published, published_ports
from dejima.core.resolve import Resolved
from dejima.core.route_plan import RoutesPlan
from dejima.core.ruleset import (
    DENY_ALL_EXPECTATION,
    NFLOG_GROUP,
    RELAY_MARK,
    RELAYED_EXPECTATION,
    RESOLVER_MARK,
    RelayEgress,
    RulesetExpectation,
    render_ruleset,
)
from dejima.core.settings import LimitSettings, Settings
from dejima.core.special_entries import Unlocked, check_special, special_places
from dejima.core.upstream_proxy import UpstreamProxy
from dejima.errors import ExitStatus, UsageError

RESOLV_CONF = "nameserver 127.0.0.1\noptions ndots:0\n"  # the filter's resolver, in the shared namespace
PRIVILEGED_PORT_FLOOR = 1024  # every filter listener stays below it (the resolver is on 53)
CONTROL_SOCKET = "control.sock"
PROXY_SOCKET = "proxy.sock"
TLS_SOCKET, TLS_PORT = "tls.sock", 443  # the TLS fallback: intercepted names resolve to 127.0.0.1, relayed here
RELAY_PORT = 701  # with an upstream proxy, the filter's relay (filter/relay.py): allowed TCP is redirected here
# The start gate: the session's container starts while the filter applies its ruleset, but its
# command waits on a FIFO (in a host directory mounted read-only) until the launcher, having seen
# the filter's verified ready line, writes the word. End of file (the launcher went away) or any
# other word: the command never runs. dash reads no startup file for `sh -c`.
GATE_NOT_RELEASED = ExitStatus.DEJIMA_FAILED  # the gate's status when the launcher did not release it
GATE_SCRIPT = (  # its messages look like the launcher's own (ui/console.py render_error)
    f'read -r word < "$1" && [ "$word" = {GATE_WORD} ] || {{ echo "dejima: error [session-not-released]: the launcher '
    f'went away before the filter was verified; nothing ran" >&2; exit {GATE_NOT_RELEASED}; }}; shift; '
    'command -v -- "$1" >/dev/null 2>&1 || { echo "dejima: error [command-not-found]: the command $1 was not found in '
    'the session image" >&2; echo "  hint: check its name; the session image has bash, coreutils, git, curl and '
    f'python3" >&2; exit {ExitStatus.COMMAND_NOT_FOUND}; }}; exec "$@"'
)
GATE_ENTRYPOINT = ("/bin/sh", "-c", GATE_SCRIPT, "dejima-gate", f"{GATE_DIR}/{GATE_FIFO}")


@dataclass(frozen=True, slots=True)
class Identity:
    """Who the session runs as: the launcher's uid:gid, or the workspace owner's when the
    launcher is root (uid 0 only when asked for)."""

    uid: int
    gid: int
    name: str


def session_ids(launcher: tuple[int, int], owner: tuple[int, int], as_root: bool, workspace: str) -> tuple[int, int]:
    """The session's uid:gid. A launcher that is not root runs the session as itself. A root
    launcher runs it as the workspace's owner, so files the agent writes belong to that user and
    the session sees no more than that user would; uid 0 only when asked for, and a root-owned
    workspace without the option is refused rather than silently run as root."""
    if launcher[0] != 0:
        if as_root:
            raise UsageError("--as-root needs dejima itself to run as root",
                             hint="leave --as-root out: the session runs as you")
        return launcher
    if as_root:
        return (0, 0)
    if owner[0] == 0:
        raise UsageError(
            f"{workspace} belongs to root and dejima runs as root: the session would run as uid 0",
            hint="run dejima as the user the agent should run as (or give that user the workspace with chown); "
            "to run the session as root anyway (still without capabilities), pass --as-root",
            reference="session-as-root",
        )
    return owner


@dataclass(frozen=True, slots=True)
class Bind:
    source: str
    target: str
    read_only: bool = False


@dataclass(frozen=True, slots=True)
class ContainerSpec:
    name: str
    image: str
    command: tuple[str, ...] | None
    user: str
    labels: dict[str, str]
    environment: dict[str, str] = field(default_factory=dict)
    binds: tuple[Bind, ...] = ()
    tmpfs: dict[str, str] = field(default_factory=dict)
    cap_add: tuple[str, ...] = ()
    network_mode: str = "none"
    pid_mode: str | None = None
    working_dir: str | None = None
    read_only_rootfs: bool = False
    tty: bool = False
    stdin: bool = False  # open, fed by whoever attaches first, closed at its end of input (`docker run -i`)
    hostname: str | None = None
    entrypoint: tuple[str, ...] | None = None  # None: the image's
    dns: tuple[str, ...] = ()
    sysctls: dict[str, str] = field(default_factory=dict)
    limits: ContainerLimits | None = None  # None: the engine's defaults (test helpers only)
    ports: tuple[Published, ...] = ()  # host ports bound to this container's (the filter's: the session's namespace)


@dataclass(frozen=True, slots=True)
class SessionRequest:
    """What the user asked for, already validated by the CLI."""

    session_id: str
    scope: str
    workspace: PurePosixPath
    home_dir: PurePosixPath  # host directory persisted as the session's $HOME
    command: tuple[str, ...] | None  # None: interactive shell
    launcher: str
    harness: str = "shell"
    allow: tuple[str, ...] = ()  # --allow entries from the command line
    allow_special: tuple[str, ...] = ()  # --allow-special overrides from the command line
    # A host file saying "nameserver 127.0.0.1", mounted read-only as the session's resolv.conf:
    # the engine's own file may name its embedded resolver (127.0.0.11), which the ruleset blocks.
    resolv_conf: PurePosixPath | None = None
    cache_root: PurePosixPath | None = None  # host directory for manifest caches outside $HOME
    read_only: tuple[PurePosixPath, ...] = ()  # workspace paths mounted read-only over themselves
    run_dir: PurePosixPath | None = None  # host directory for the filter's sockets (control, proxy)
    gate_dir: PurePosixPath | None = None  # host directory holding the start gate's FIFO (None: no gate)
    control_owner: int = 0  # the launcher's uid: only it may use the control socket
    project_allow: tuple[str, ...] = ()  # the user's policy for this workspace (dejima-allow --persist)
    project_source: str = ""  # the file it comes from
    publish: tuple[str, ...] = ()  # --publish values (core/publish.py), added to [session] publish


@dataclass(frozen=True, slots=True)
class NetworkFacts:
    """What the launcher found out about the host's network (an adapter reads these)."""

    upstreams: tuple[ipaddress.IPv4Address, ...] = ()
    denied_addresses: tuple[IPNetwork, ...] = ()  # the host's own addresses, the engine's gateway
    host_addresses: tuple[IPNetwork, ...] = ()
    gateway: IPNetwork | None = None  # None without an engine (render mode)
    upstream_proxy: UpstreamProxy | None = None  # with its address: allowed TCP leaves through it


def proxy_limits(settings: Settings) -> ProxyLimits:
    return ProxyLimits(parse_size(settings.credentials.proxy_memory), settings.credentials.proxy_connections)


@dataclass(frozen=True, slots=True)
class SessionPlan:
    session_id: str
    workspace: str
    interactive: bool
    policy: EgressPolicy
    upstreams: tuple[str, ...]
    ruleset: str
    expectation: RulesetExpectation
    filter: ContainerSpec
    session: ContainerSpec
    resolved: Resolved | None = None
    unlocked: tuple[Unlocked, ...] = ()  # special allow entries let through by an override
    # The credential routes the proxy will serve (core/route_plan.py): the card, --render, the filter's
    # relays and the session's variables all read them; None: no route.
    routes: RoutesPlan | None = None
    gate: str | None = None  # host path of the start gate's FIFO; None: the session starts after ready
    filter_config: str = ""  # the filter's configuration (policy, never secrets)
    config_fifo: str | None = None  # host path of the FIFO it goes through; None: in the filter's environment
    # The session's variables that carry its credential routes (placeholders, base URLs through the
    # proxy, the harness's connection): a render for a place without the proxy leaves them out.
    credential_env: tuple[str, ...] = ()
    upstream_proxy: UpstreamProxy | None = None  # the corporate proxy allowed TCP leaves through

    @property
    def plan_hash(self) -> str:
        return plan_hash(self)


def _common_labels(request: SessionRequest) -> dict[str, str]:
    return {
        labels.SCOPE: request.scope,
        labels.SESSION: request.session_id,
        labels.WORKSPACE: str(request.workspace),
        labels.LAUNCHER: request.launcher,
    }


def relay_egress(proxy: UpstreamProxy | None) -> RelayEgress | None:
    if proxy is None or proxy.address is None:
        return None
    return RelayEgress(RELAY_PORT, proxy.address, proxy.port)


def filter_config(session_id: str, ruleset: str, expectation: RulesetExpectation, policy: EgressPolicy,
                  upstreams: tuple[str, ...], request: SessionRequest | None = None,
                  relay: RelayEgress | None = None, routes: RoutesPlan | None = None) -> str:
    """The JSON document the filter process reads from its environment (policy, never secrets); with
    ``routes``, the relays into the credential proxy and the values its resolver refuses in a name."""
    sockets: dict[str, object] = {}
    if relay is not None:
        sockets["relay"] = {"port": relay.port, "proxy": str(relay.proxy), "proxy_port": relay.proxy_port,
                            "mark": RELAY_MARK}
    if routes is not None and routes.canaries:
        sockets["canaries"] = sorted({canary_signature(c) for c in routes.canaries})
    if request is not None and request.run_dir is not None:
        sockets["control"] = {"socket": f"{FILTER_RUN_DIR}/{CONTROL_SOCKET}", "owner": request.control_owner}
        if routes is not None:
            sockets["bridge"] = {"socket": f"{FILTER_RUN_DIR}/{PROXY_SOCKET}", "port": BRIDGE_PORT}
            if routes.intercepted:
                sockets["intercept"] = {"socket": f"{FILTER_RUN_DIR}/{TLS_SOCKET}", "port": TLS_PORT,
                                        "names": sorted(routes.intercepted)}
    return json.dumps(
        {
            **sockets,
            "session": session_id, "ruleset": ruleset, "expect": expectation.to_json(),
            "policy": policy_document(policy),
            "upstreams": list(upstreams), "resolver_mark": RESOLVER_MARK, "nflog_group": NFLOG_GROUP,
        },
        sort_keys=True,
    )


def build_policy(settings: Settings, cli_allow: tuple[str, ...], facts: NetworkFacts, source: str,
                 resolved: Resolved | None = None, project: tuple[tuple[str, str], ...] = ()) -> EgressPolicy:
    """The session's egress policy: the manifests', the settings' and --allow entries; the
    manifests', the settings' and the repository's deny entries; the host's facts."""
    network = settings.network
    sources = [*(resolved.allow() if resolved else []), *((text, f"{source} network.allow") for text in network.allow),
               *project, *((t, "--allow") for t in cli_allow)]
    allowed = []
    for text, where in sources:
        entry = parse_entry(text, where)
        if entry.network is not None and entry.network.version == 6:
            raise PolicyError(
                f"{where}: {text!r} is an IPv6 entry, but sessions have IPv6 disabled",
                hint="allow the IPv4 address, or a name that resolves to IPv4",
            )
        allowed.append(replace(entry, origin=where))
    deny_sources = [*(resolved.deny() if resolved else []),
                    *((text, network.deny_reasons.get(text, ""), f"{source} network.deny") for text in network.deny)]
    denied = tuple(
        (replace(parse_entry(text, origin), origin=origin), reason or f"{text} is on the deny list")
        for text, reason, origin in deny_sources
    )
    answer_networks = tuple(ipaddress.ip_network(n) for n in network.answer_networks)
    return EgressPolicy(tuple(allowed), denied, facts.denied_addresses, answer_networks)


def project_entries(request: SessionRequest) -> tuple[tuple[str, str], ...]:
    return tuple((text, f"{request.project_source} network.allow") for text in request.project_allow)


def unlock_special(policy: EgressPolicy, settings: Settings, cli_overrides: tuple[str, ...], facts: NetworkFacts,
                   source: str) -> tuple[Unlocked, ...]:
    """Refuse allowed literals that reach special places unless an override names them exactly."""
    overrides = [replace(parse_entry(text, where), origin=where) for text, where in (
        *((t, f"{source} network.allow_special") for t in settings.network.allow_special),
        *((t, "--allow-special") for t in cli_overrides))]
    return check_special(policy.allowed, overrides, special_places(facts.host_addresses, facts.gateway), source)


def resolve_limits(limits: LimitSettings, engine_memory: int | None) -> tuple[ContainerLimits, ContainerLimits]:
    """(filter, session) limits; a memory share needs the engine's memory (unknown: no memory limit)."""
    def memory(text: str) -> int | None:
        return None if engine_memory is None and is_share(text) else resolve_memory(text, engine_memory or 0)

    return (
        ContainerLimits(limits.filter_pids, memory(limits.filter_memory), limits.filter_cpu_shares),
        ContainerLimits(limits.session_pids, memory(limits.session_memory), limits.session_cpu_shares,
                        resolve_memory(limits.session_tmp_size, 0)),
    )


def build_session_plan(
    request: SessionRequest,
    settings: Settings,
    identity: Identity,
    filter_image: str,
    session_image: str,
    facts: NetworkFacts = NetworkFacts(),
    settings_source: str = "settings",
    resolved: Resolved | None = None,
    engine_memory: int | None = None,
    routes: RoutesPlan | None = None,
    harness_env: tuple[tuple[str, str], ...] = (),
) -> SessionPlan:
    """Both containers and the filter's configuration. ``routes``: the credential routes the proxy will
    serve (None: none, or a render for a place without the proxy); ``harness_env``: the harness's
    variables for its backend, after the routes' (its own reading of them wins)."""
    routes = routes if routes is not None and routes.routes else None
    credential_env = (*(routes.environment if routes is not None else ()), *harness_env)
    policy = build_policy(settings, request.allow, facts, settings_source, resolved, project_entries(request))
    unlocked = unlock_special(policy, settings, request.allow_special, facts, settings_source)
    filter_limits, session_limits = resolve_limits(settings.limits, engine_memory)
    upstreams = tuple(str(a) for a in facts.upstreams)
    published = published_ports(settings.session.publish, settings_source, request.publish)
    relay = relay_egress(facts.upstream_proxy)
    ruleset = render_ruleset(request.session_id, policy, facts.upstreams,
                             published=tuple(p.session_port for p in published), relay=relay)
    expectation = DENY_ALL_EXPECTATION if relay is None else RELAYED_EXPECTATION
    config = filter_config(request.session_id, ruleset, expectation, policy, upstreams, request, relay, routes)
    filter_name = f"dejima-{request.session_id}-filter"
    interactive = request.command is None
    base_labels = _common_labels(request)

    filter_spec = ContainerSpec(
        name=filter_name,
        image=filter_image,
        command=None,  # the image's entrypoint: python3 -m dejima.filter
        user="0:0",
        labels={**base_labels, labels.ROLE: labels.ROLE_FILTER},
        # With a run directory the configuration goes through its FIFO (the filter may be started
        # before the plan exists, orchestration/prestart.py); without, in the environment.
        environment=({FILTER_CONFIG_FIFO_ENV: f"{FILTER_RUN_DIR}/{FILTER_CONFIG_FIFO}"} if request.run_dir is not None
                     else {FILTER_CONFIG_ENV: config}),
        binds=(Bind(str(request.run_dir), FILTER_RUN_DIR),) if request.run_dir is not None else (),
        # NET_ADMIN for nft; NET_BIND_SERVICE for the resolver on port 53. Nothing else.
        cap_add=("NET_ADMIN", "NET_BIND_SERVICE"),
        network_mode=settings.session.network,
        read_only_rootfs=True,
        hostname="dejima",
        # The session shares this resolv.conf: the filter's resolver is its only DNS.
        dns=("127.0.0.1",),
        sysctls={
            **{f"net.ipv6.conf.{i}.disable_ipv6": "1" for i in ("all", "default", "lo")},
            # The engine lets anyone bind any port in a container's namespace; restore the floor, so
            # the session (no NET_BIND_SERVICE) cannot take a port the filter serves or will serve.
            "net.ipv4.ip_unprivileged_port_start": str(PRIVILEGED_PORT_FLOOR),
        },
        limits=filter_limits,
        ports=published,
    )
    environment = {
        **(resolved.environment() if resolved else {}),
        "HOME": SESSION_HOME,
        "USER": identity.name,
        "LOGNAME": identity.name,
        "LANG": "C.UTF-8",
        "DEJIMA_SESSION": request.session_id,
        # Python writes no bytecode in sessions, so the audit can flag every .pyc as deliberate:
        # Python trusts a .pyc whose header matches its source, whatever its code (research B11).
        "PYTHONDONTWRITEBYTECODE": "1",
        # pip compiles what it installs whatever that says, and bytecode the image's Python compiled is
        # verifiable only where the host's Python is the same release: pip installs leave none
        # (pip install's --compile option, off; PIP_NO_COMPILE=1 would turn compiling on).
        "PIP_COMPILE": "0",
        **dict(credential_env),
    }
    if interactive:
        environment["TERM"] = "xterm-256color"
    workspace = str(request.workspace)
    cache_binds = _cache_binds(resolved, request.cache_root)
    session_spec = ContainerSpec(
        name=f"dejima-{request.session_id}-session",
        image=session_image,
        command=request.command if request.command is not None else (
            resolved.harness.command if resolved else ("bash", "-l")),
        user=f"{identity.uid}:{identity.gid}",
        labels={**base_labels, labels.ROLE: labels.ROLE_SESSION},
        environment=environment,
        binds=(Bind(workspace, workspace), Bind(str(request.home_dir), SESSION_HOME), *(
            (Bind(str(request.resolv_conf), "/etc/resolv.conf", read_only=True),) if request.resolv_conf else ()),
            *cache_binds, *(Bind(str(p), str(p), read_only=True) for p in request.read_only),
            *((Bind(str(request.gate_dir), GATE_DIR, read_only=True),) if request.gate_dir else ())),
        entrypoint=GATE_ENTRYPOINT if request.gate_dir else None,
        # exec: the session's private /tmp runs what its tools build there (go test, go run); without
        # it the engine adds noexec. nosuid/nodev stay.
        tmpfs={"/tmp": f"rw,exec,nosuid,nodev,mode=1777,size={session_limits.tmp_size}"},
        # Joining the filter's network namespace puts the session behind its ruleset; joining its
        # PID namespace makes the kernel kill the session the moment the filter's init dies.
        network_mode=f"container:{filter_name}",
        pid_mode=f"container:{filter_name}",
        working_dir=workspace,
        tty=interactive,
        limits=session_limits,
    )
    return SessionPlan(
        session_id=request.session_id,
        workspace=workspace,
        interactive=interactive,
        policy=policy,
        upstreams=upstreams,
        ruleset=ruleset,
        expectation=expectation,
        filter=filter_spec,
        session=session_spec,
        resolved=resolved,
        unlocked=unlocked,
        routes=routes,
        gate=str(request.gate_dir / GATE_FIFO) if request.gate_dir else None,
        filter_config=config,
        config_fifo=str(request.run_dir / FILTER_CONFIG_FIFO) if request.run_dir is not None else None,
        credential_env=tuple(dict.fromkeys(name for name, _ in credential_env)),
        upstream_proxy=facts.upstream_proxy,
    )


def cache_paths_outside_home(resolved: Resolved | None) -> list[str]:
    """Manifest caches under $HOME persist with the per-project home; the others need a mount."""
    paths = dict.fromkeys(p for m in (resolved.manifests if resolved else ()) for p in m.caches)
    return [p for p in paths if not (p == SESSION_HOME or p.startswith(SESSION_HOME + "/"))]


def _cache_binds(resolved: Resolved | None, cache_root: PurePosixPath | None) -> tuple[Bind, ...]:
    outside = cache_paths_outside_home(resolved)
    if outside and cache_root is None:
        raise ValueError("manifest caches outside the home need a cache root")
    return tuple(Bind(str(cache_root / p.strip("/").replace("/", "__")), p) for p in outside if cache_root)


def plan_hash(plan: SessionPlan) -> str:
    """Stable hash of everything in the plan except what is drawn per session: its id and launcher, and
    the values drawn for its routes (core/placeholders.Draws: placeholders, decoys). Those are left out
    by field, not searched for in the text: the routes keep their names, upstreams, headers and sources,
    the session's credential variables their names, the filter's configuration everything but its canaries."""
    data = asdict(replace(plan, filter_config=_undrawn_config(plan.filter_config)))
    for spec in ("filter", "session"):
        data[spec]["labels"] = {
            k: v for k, v in data[spec]["labels"].items() if k not in (labels.SESSION, labels.LAUNCHER)
        }
    if FILTER_CONFIG_ENV in data["filter"]["environment"]:
        data["filter"]["environment"][FILTER_CONFIG_ENV] = data["filter_config"]
    for name in plan.credential_env:
        data["session"]["environment"][name] = "<drawn>"
    if data["routes"] is not None:
        data["routes"]["decoys"] = sorted(plan.routes.decoys.env) if plan.routes is not None else []
        data["routes"]["environment"] = [name for name, _ in data["routes"]["environment"]]
        for route in data["routes"]["routes"]:
            route["route"]["placeholder"] = "<drawn>"
            if route["route"]["signing"] is not None:
                route["route"]["signing"]["secret_placeholder"] = "<drawn>"
    data.pop("session_id")
    text = json.dumps(data, sort_keys=True, default=str).replace(plan.session_id, "<session>")
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _undrawn_config(config: str) -> str:
    """The filter's configuration without its canaries (the drawn values' signatures): how many it has stays."""
    if not config:
        return config
    document = json.loads(config)
    if "canaries" in document:
        document["canaries"] = len(document["canaries"])
    return json.dumps(document, sort_keys=True)


def canary_signature(value: str) -> str:
    """What the resolver looks for in a name: the value's last 16 letters and digits (its random
    part; prefixes like sk-ant- are shared by every key), lower-case, as a name would carry them."""
    return re.sub(r"[^a-z0-9]", "", value.lower())[-16:]


def describe_command(command: tuple[str, ...] | None) -> str:
    return "interactive shell" if command is None else shlex.join(command)
