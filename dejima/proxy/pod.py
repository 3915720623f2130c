"""The credential proxy as a pod's container: `python3 -m dejima.proxy` (core/kubernetes.py renders it).

Locally the proxy is a thread of the launcher (proxy/runner.py). In a pod it is a container of its
own, running as a uid no other container of the pod has (core/kubernetes.py PROXY_UID): it reads the
routes it serves from its configuration (a ConfigMap: upstreams, placeholders, decoys, push rules; no
secret) and each route's secret from its environment, where the kubelet puts a Kubernetes Secret's
key. It listens on a unix socket in a volume the filter shares and the session does not mount; the
filter relays the session's 127.0.0.1:BRIDGE_PORT to it, as locally. Its own connections out are the
only ones of the pod the filter's ruleset lets reach the routes' ports (by its uid).

    document = pod_document(routes)          # at render time, from the render's routes plan
    python3 -m dejima.proxy                  # in the pod: $DEJIMA_PROXY_CONFIG, the secrets' variables
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dejima.adapters.session_dirs import LEDGER
from dejima.adapters.session_dirs import RECORDS as VIOLATIONS
from dejima.core.credentials import Route, RouteError, parse_upstream
from dejima.core.manifest import CredentialRoute
from dejima.core.paths import FILTER_RUN_DIR, PROXY_CONFIG_ENV, PROXY_RECORDS_DIR, PROXY_TRUST_DIR
from dejima.core.plan import PROXY_SOCKET, TLS_SOCKET
from dejima.core.pushrules import PushPolicy
from dejima.core.route_plan import FORWARDS, GUARDS_PUSHES, SIGNS, RoutesPlan
from dejima.core.sigv4 import AwsSigning, SigningScope
from dejima.errors import ExitStatus
from dejima.proxy.aws_source import AwsSource
from dejima.proxy.routes import RouteSpec
from dejima.proxy.server import ProxyConfig, ProxyServer
from dejima.proxy.setup import behaviour_for, session_interception
from dejima.proxy.sources import CredentialError, CredentialSource, env_source

CONFIG_ENV = PROXY_CONFIG_ENV
SOCKET = f"{FILTER_RUN_DIR}/{PROXY_SOCKET}"  # in the volume the filter shares (its run directory)
TLS = f"{FILTER_RUN_DIR}/{TLS_SOCKET}"  # the TLS fallback's, beside it
RECORDS = PROXY_RECORDS_DIR  # the ledger and the violations, in a volume of the proxy's own
READY = "dejima-proxy: ready"
FAILED = "dejima-proxy: failed"


# A signing route's keys in the pod: the variables the host's AWS source reads first (the session
# token only for temporary keys: optional).
AWS_VARIABLES, AWS_OPTIONAL = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"), ("AWS_SESSION_TOKEN",)


def not_carried(route: CredentialRoute) -> str | None:
    """Why a route cannot be served from a pod yet (None: it can)."""
    if route.source[0] == "claude_login":
        return "it refreshes the host's Claude login"
    return None


def secret_variable(name: str, source: tuple[str, tuple[str, ...]]) -> str:
    """The proxy container's variable (and the Kubernetes Secret's key) holding the route's secret: the
    host's own variable when the manifest reads one, so one Secret key serves every route of that
    secret; the AWS secret key for a signing route (with AWS_VARIABLES); else DEJIMA_SECRET_<ROUTE>."""
    kind, values = source
    if kind == "env":
        return values[0]
    if kind == "aws":
        return AWS_VARIABLES[1]
    return "DEJIMA_SECRET_" + re.sub(r"[^A-Z0-9]", "_", name.upper())


def secret_variables(document: Mapping[str, Any]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(the variables the pod's proxy needs, those it may go without): the Secret's keys."""
    signing = any(r["signing"] for r in document["routes"])
    needed = dict.fromkeys([*(AWS_VARIABLES if signing else ()), *(r["secret"] for r in document["routes"])])
    return tuple(needed), AWS_OPTIONAL if signing else ()


def pod_document(plan: RoutesPlan) -> dict[str, Any]:
    """The configuration a pod's proxy starts from: the planned routes with their placeholders, the
    decoys, the limits. Every value here is one the session sees anyway, or policy: no secret."""
    routes = []
    for planned in plan.routes:
        route, policy, signing = planned.route, planned.push, planned.route.signing
        routes.append({
            "name": route.name, "upstream": str(route.upstream), "header": route.header, "scheme": route.scheme,
            "placeholder": route.placeholder, "username": route.username,
            "secret": secret_variable(planned.name, planned.source),
            "signing": None if signing is None else {"region": signing.scope.region, "service": signing.scope.service,
                                                     "secret_placeholder": signing.secret_placeholder},
            "push": None if policy is None else {"repositories": list(policy.repositories),
                                                 "allow_force": policy.allow_force,
                                                 "allow_default_branch": policy.allow_default_branch},
        })
    # The TLS fallback's hosts: the pod's proxy makes its own session CA when it starts (its key never
    # leaves that process), so the document names the hosts only.
    return {"routes": routes, "decoys": dict(sorted(plan.decoys.values().items())), "intercept": plan.intercepted,
            "memory_budget": plan.limits.memory, "max_connections": plan.limits.connections}


def proxy_config(document: Mapping[str, Any], environ: Mapping[str, str], records: Path) -> ProxyConfig:
    """The server's configuration from a pod document and the container's environment (the secrets)."""
    specs = []
    for item in document["routes"]:
        where = f"route {item['name']!r}"
        signed = item.get("signing")
        signing = None if not signed else AwsSigning(SigningScope(signed["region"], signed["service"]),
                                                     signed["secret_placeholder"])
        route = Route(item["name"], parse_upstream(item["upstream"], item["name"]), item["header"], item["scheme"],
                      item["placeholder"], item["username"], signing)
        push = item["push"]
        policy = PushPolicy(tuple(push["repositories"]), push["allow_force"], push["allow_default_branch"]) \
            if push else None
        # A signing route's keys: the AWS variables (no profile file in the pod); others: their one variable.
        source: CredentialSource = AwsSource("default", where, {k: v for k, v in environ.items() if k.startswith(
            "AWS_")}, Path("/nonexistent")) if signing else env_source(item["secret"], where, environ)
        kind = SIGNS if signing else GUARDS_PUSHES if policy is not None else FORWARDS  # as plan_routes decides
        specs.append(RouteSpec(route, source, behaviour_for(kind, policy)))
    interception = session_interception(document.get("intercept") or {})
    return ProxyConfig(tuple(specs), records / LEDGER, records / VIOLATIONS,
                       dict(document["decoys"]), memory_budget=int(document["memory_budget"]),
                       max_connections=int(document["max_connections"]), interception=interception)


async def serve(config: ProxyConfig, socket: Path, tls_socket: Path, trust: Path) -> None:
    """Serve on ``socket`` (and the TLS fallback on ``tls_socket``) until SIGTERM or SIGINT; say ready
    once listening. The session CA is in ``trust`` before the sockets accept: the session, started once
    they do, finds it there."""
    from dejima.proxy.runner import write_trust

    if config.interception is not None:
        write_trust(trust.parent, (trust.name,), config.interception.authority.ca_pem, None)
    server = ProxyServer(config)
    await server.start(unix_path=socket, tls_unix_path=tls_socket if config.interception is not None else None)
    # The filter connects as root without CAP_DAC_OVERRIDE: the mode lets it in; the session does not
    # mount the volume the sockets are in.
    for path in (socket, tls_socket):
        if path.exists():
            os.chmod(path, 0o666)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    print(f"{READY} routes={','.join(spec.route.name for spec in config.routes)}", flush=True)
    await stop.wait()
    await server.close()


def main(environ: Mapping[str, str] | None = None, socket: str = SOCKET, records: str = RECORDS, tls: str = TLS,
         trust: str = PROXY_TRUST_DIR) -> int:
    env = os.environ if environ is None else environ
    try:
        document = json.loads(env[CONFIG_ENV])
        Path(records).mkdir(mode=0o700, exist_ok=True)  # the volume's root, or a directory of a test
        config = proxy_config(document, env, Path(records))
    except (KeyError, ValueError, TypeError, RouteError, CredentialError, OSError) as exc:
        # A secret's value never reaches this message: sources name their variable, not its content.
        print(f"{FAILED} {type(exc).__name__}: {exc}", flush=True)
        return ExitStatus.DEJIMA_FAILED
    asyncio.run(serve(config, Path(socket), Path(tls), Path(trust)))
    return ExitStatus.SUCCESS


if __name__ == "__main__":
    sys.exit(main())
