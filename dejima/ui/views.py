"""Pure views: values in, text out (the CLI prints them)."""

from __future__ import annotations

from dejima.core.limits import describe, describe_proxy
from dejima.core.plan import SessionPlan
from dejima.core.publish import Published


def format_plan(plan: SessionPlan) -> str:
    lines = [f"# dejima plan for {plan.workspace} (plan hash {plan.plan_hash})", ""]
    if plan.resolved is not None:
        lines.append("## Manifests")
        for choice in plan.resolved.choices:
            lines.append(f"{choice.manifest.ref:<28} {choice.why:<34} {choice.manifest.source}")
        lines.append("")
    lines.append("## Egress policy")
    if not plan.policy.allowed:
        lines.append("allowed: nothing (no egress at all)")
    for entry in plan.policy.allowed:
        scope = "every port" if entry.port is None else f"TCP port {entry.port}"
        kind = {"name": "the name", "wildcard": "strict subdomains of", "network": "address"}[entry.kind]
        lines.append(f"allow  {entry.canonical:<32} {kind}, {scope}  (from {entry.origin})")
    for u in plan.unlocked:
        lines.append(f"OVERRIDE {u.entry.canonical} {u.reason}  (override from {u.override_origin})")
    for entry, reason in plan.policy.denied:
        lines.append(f"deny   {entry.canonical:<32} reason: {reason}  (from {entry.origin})")
    lines.append("answers may not point at: loopback, private, CGNAT, link-local/metadata, multicast, reserved"
                 + (f"; allowed answer networks: {', '.join(map(str, plan.policy.answer_networks))}"
                    if plan.policy.answer_networks else ""))
    lines.append("host and engine addresses refused in answers: "
                 + (", ".join(str(n) for n in plan.policy.denied_addresses) or "none found") + " (+ the engine "
                 "gateway, found at start)")
    lines.append(f"upstream resolvers (the filter's own marked sockets only): {', '.join(plan.upstreams) or 'none'}")
    if plan.upstream_proxy is not None:
        lines.append(f"upstream proxy: {plan.upstream_proxy.url} ({plan.upstream_proxy.address}, from "
                     f"{plan.upstream_proxy.origin}); allowed TCP goes to the filter's relay, CONNECT name:port")
    lines.append("IPv6: disabled in the namespace; UDP and ICMP: closed")
    lines += ["", "## Credential routes (the secret stays in dejima's proxy on the host; each source is read when a "
                  "session starts, a route whose source is missing is left out then)"]
    if plan.routes is None:
        lines.append("none: no manifest of this session declares one, or no route's source is on this host")
    for r in plan.routes.routes if plan.routes is not None else ():
        lines.append(f"{r.name:<24} {r.source_shown} -> {r.route.upstream} only; session gets "
                     f"{r.variables_shown or 'no variable'} = a placeholder"
                     + (f", {r.base_url_env} = the proxy" if r.base_url_env else "")
                     + (", its host's TLS answered by the proxy (session CA)" if r.intercept else "")
                     + f"  (from {r.origin})")
    if plan.routes is not None:
        lines.append(f"proxy budget: {describe_proxy(plan.routes.limits)}")
    lines += _harness_lines(plan)
    lines += ["", "## Containers"]
    for spec in (plan.filter, plan.session):
        lines.append(f"{spec.name}: user {spec.user}, capabilities {', '.join(spec.cap_add) or 'none'}, "
                     f"network {spec.network_mode}")
        if spec.limits is not None:
            lines.append(f"  limits {describe(spec.limits)}")
        for key, value in sorted(spec.sysctls.items()):
            lines.append(f"  sysctl {key}={value}")
        for bind in spec.binds:
            lines.append(f"  mount {bind.source} -> {bind.target} ({'ro' if bind.read_only else 'rw'})")
        if spec is plan.filter:
            lines += _relay_lines(plan.filter_config)
            lines += [f"  publishes {_published(p)}" for p in spec.ports]
        elif spec.environment:  # names only: the values are the plan's, placeholders included, never a secret
            lines.append(f"  env {', '.join(sorted(spec.environment))}")
    lines += ["", "## nft ruleset (applied in the filter, then read back and verified)", plan.ruleset]
    return "\n".join(lines)


def _relay_lines(config: str) -> list[str]:
    """The filter's relays into the credential proxy (its configuration's ``bridge`` and ``intercept``)."""
    import json

    sockets = json.loads(config) if config else {}
    lines = []
    if "bridge" in sockets:
        lines.append(f"  relays 127.0.0.1:{sockets['bridge']['port']} to the credential proxy")
    if "relay" in sockets:
        lines.append(f"  relays allowed TCP (redirected to 127.0.0.1:{sockets['relay']['port']}) to the upstream proxy "
                     f"{sockets['relay']['proxy']}:{sockets['relay']['proxy_port']} as CONNECT name:port")
    if "intercept" in sockets:
        lines.append(f"  relays 127.0.0.1:{sockets['intercept']['port']} to the proxy's TLS fallback for "
                     f"{', '.join(sockets['intercept']['names'])}")
    return lines


def _published(port: Published) -> str:
    where = "this machine only" if port.local_only else "WARNING: other machines too"
    return f"{port.shown} ({where}; from {port.origin})"


def _inbound_lines(plan: SessionPlan) -> list[str]:
    """Published ports (core/publish.py): one line each; one that other machines reach, a warning."""
    lines = []
    for n, port in enumerate(plan.filter.ports):
        lines.append(f"{'inbound' if n == 0 else '':<11} {_published(port)}")
    if lines:
        lines.append("            no other port of the session is reachable from outside; a server there listens on "
                     "0.0.0.0 (its 127.0.0.1 is the session's own)")
    return lines


def _harness_lines(plan: SessionPlan) -> list[str]:
    """What the harness's program is given to reach its backend ({base_url}: the backend's first
    route through the proxy; {placeholder}: that route's placeholder), and the home settings."""
    if plan.resolved is None:
        return []
    harness, connect = plan.resolved.harness, plan.resolved.harness_connect()
    if not harness.files and connect is None:
        return []
    lines = ["", f"## Harness settings (from {harness.source})"]
    for name, text in sorted((connect.env if connect else {}).items()):
        lines.append(f"env  {name} = {text}")
    paths = sorted({*harness.files, *(connect.files if connect else {})})
    for path in paths:
        keys = sorted({*_keys(harness.files.get(path, {})), *_keys(connect.files.get(path, {}) if connect else {})})
        lines.append(f"file {path}: merged before the session: {', '.join(keys)}")
    if connect is not None:
        lines.append("({base_url}: the backend's first route through the proxy; {placeholder}: its placeholder)")
    return lines


def _keys(values: object, prefix: str = "") -> list[str]:
    if not isinstance(values, dict):
        return [prefix]
    return [key for name, item in values.items() for key in _keys(item, f"{prefix}{name}" if not prefix
                                                                   else f"{prefix}.{name}")]


def _credential_lines(plan: SessionPlan) -> list[str]:
    if plan.routes is None:
        return ["credentials none: no secret enters the session, and no route to one is set up"]
    lines = ["credentials the session holds placeholders only; dejima's proxy on the host swaps in the secret "
             "toward each route's own upstream"]
    for r in plan.routes.routes:
        lines.append(f"            {r.name}: {r.source_shown} -> {r.route.upstream}")
    lines.append(f"            proxy budget: {describe_proxy(plan.routes.limits)}")
    return lines


def _upstream_proxy_lines(plan: SessionPlan) -> list[str]:
    proxy = plan.upstream_proxy
    if proxy is None:
        return []
    return [f"via proxy   {proxy.url} ({proxy.address}, from {proxy.origin}): allowed TCP leaves only as CONNECT "
            "name:port through it, the credential proxy's upstreams too; refused names never reach it"]


def boundary_card(plan: SessionPlan) -> list[str]:
    """What the session is held to, in a few lines, shown before the agent starts."""
    resolved = plan.resolved
    chosen = ", ".join(f"{c.manifest.ref} ({c.why})" for c in resolved.choices) if resolved else "none"
    allowed = list(dict.fromkeys(e.canonical for e in plan.policy.allowed))
    shown = ", ".join(allowed[:6]) + (f" and {len(allowed) - 6} more" if len(allowed) > 6 else "")
    mounts = ", ".join(f"{b.target} ({'ro' if b.read_only else 'rw'})" for b in plan.session.binds)
    uid = plan.session.user.partition(":")[0]
    who = "ROOT (uid 0, asked for with --as-root)" if uid == "0" else f"uid:gid {plan.session.user}"
    overrides = [f"OVERRIDE    {u.entry.canonical} allowed by {u.override_origin}: {u.reason}" for u in plan.unlocked]
    limits = [f"limits      session: {describe(plan.session.limits)}; filter: {describe(plan.filter.limits)}"
              if plan.session.limits and plan.filter.limits else "limits      none (the engine's defaults)"]
    return [
        f"session {plan.session_id} on {plan.workspace}",
        f"manifests   {chosen}",
        f"network     default-deny, verified in the kernel; allowed: {shown or 'nothing'}",
        "dns         only dejima's resolver; names not allowed are refused and never leave the filter",
        *overrides,
        *_upstream_proxy_lines(plan),
        *_inbound_lines(plan),
        "ipv6        off; UDP and ICMP closed",
        f"identity    {who}, no capabilities, no-new-privileges, no Docker socket; ports below 1024 "
        "are the filter's",
        *limits,
        f"mounts      {mounts}, /tmp (tmpfs)",
        *_credential_lines(plan),
        "grants      `dejima-allow NAME` opens a name live (`dejima-allow` lists what was refused); "
        "--revoke cuts it again",
        "exit audit  workspace, home and caches compared with their start at exit; what can run code later "
        "is recorded for review (dejima-audit)",
        *(["python envs uv and poetry environments live in the session home (/home/dejima/.local/venvs), not "
           "the workspace; a .venv made there is a finding"] if "UV_PROJECT_ENVIRONMENT" in plan.session.environment
          else []),
    ]
