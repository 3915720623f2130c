"""`dejima doctor`: is this machine able to hold the boundary, and does it hold?

Checks, in order, each stopping the ones after it when it fails: the engine answers; the images
are present (or buildable with --build); nftables works inside a filter container; and a real
session pair cannot reach a decoy that an unfiltered container can reach.
"""

from __future__ import annotations

import secrets
import shutil
from dataclasses import dataclass, replace
from pathlib import PurePosixPath

from dejima import host, session
from dejima.core import labels
from dejima.core.plan import ContainerSpec, SessionPlan, SessionRequest, build_session_plan
from dejima.core.settings import Settings
from dejima.errors import DiagnosticError
from dejima.imaging import ensure_image, find_base, recipes, resolve_base
from dejima.runtime import Runtime, connect
from dejima.selftest import ProbeResult, decoy_command, probe_command
from dejima.ui.console import UI


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    ok: bool
    detail: str


def _decoy_spec(scope: str, run_id: str, image: str, network: str, command: tuple[str, ...], role: str) -> ContainerSpec:
    return ContainerSpec(
        name=f"dejima-doctor-{run_id}-{role}",
        image=image,
        command=command,
        user="0:0",
        labels={labels.SCOPE: scope, labels.SESSION: f"doctor-{run_id}", labels.ROLE: f"doctor-{role}",
                labels.LAUNCHER: host.launcher_token()},
        network_mode=network,
    )


def _run_to_end(runtime: Runtime, spec: ContainerSpec, created: list[str]) -> str:
    container = runtime.create(spec)
    created.append(container)
    runtime.start(container)
    runtime.wait(container, timeout=60)
    return runtime.logs(container)


def _address(runtime: Runtime, container: str, network: str) -> str:
    info = runtime.inspect(container) or {}
    networks = info.get("NetworkSettings", {}).get("Networks", {})
    address = (networks.get(network) or next(iter(networks.values()), {})).get("IPAddress", "")
    return str(address)


def boundary_check(runtime: Runtime, settings: Settings, filter_image: str, session_image: str) -> list[Check]:
    scope, run_id, network = host.scope(), secrets.token_hex(3), settings.session.network
    created: list[str] = []
    checks: list[Check] = []
    try:
        decoy = runtime.create(_decoy_spec(scope, run_id, session_image, network, decoy_command(), "decoy"))
        created.append(decoy)
        runtime.start(decoy)
        runtime.first_log_line(decoy)  # the decoy prints one line once it listens
        address = _address(runtime, decoy, network)
        control = ProbeResult.parse(_run_to_end(
            runtime, _decoy_spec(scope, run_id, session_image, network, probe_command(address), "control"), created))
        if control.tcp["result"] != "connected":
            return [Check("decoy reachable without dejima", False,
                          f"an unfiltered container could not reach the decoy at {address}: {control.tcp}")]
        checks.append(Check("decoy reachable without dejima", True, f"{address} answers TCP and UDP"))
        request = SessionRequest(
            session_id=f"doctor{run_id}", scope=scope, workspace=PurePosixPath("/nonexistent-workspace"),
            home_dir=PurePosixPath("/nonexistent-home"), command=probe_command(address), launcher=host.launcher_token(),
        )
        plan = build_session_plan(request, settings, host.identity(), filter_image, session_image)
        plan = _without_mounts(plan)
        filter_id = session.start_filter(runtime, plan, settings.session.ready_timeout)
        created.append(filter_id)
        checks.append(Check("nftables in a namespace", True, "filter applied and verified the ruleset"))
        output = _run_to_end(runtime, plan.session, created)
        result = ProbeResult.parse(output)
        held = result.egress_blocked and result.loopback["result"] == "connected"
        checks.append(Check(
            "session has no egress", held,
            f"TCP {result.tcp['result']} in {float(result.tcp['seconds']):.2f}s, UDP {result.udp['result']}, "
            f"loopback {result.loopback['result']}",
        ))
    except DiagnosticError as exc:
        checks.append(Check("nftables in a namespace", False, exc.message))
    finally:
        session.teardown(runtime, created)
    return checks


def _without_mounts(plan: SessionPlan) -> SessionPlan:
    """The doctor's probe session needs no workspace or home."""
    return replace(plan, session=replace(plan.session, binds=(), working_dir="/"))


def run_doctor(settings: Settings, ui: UI, build: bool) -> list[Check]:
    checks: list[Check] = []
    try:
        runtime = connect()
        version = runtime.version()
        checks.append(Check("engine", True, f"Docker {version.get('Version', '?')} (API {version.get('ApiVersion', '?')})"))
    except DiagnosticError as exc:
        return [Check("engine", False, exc.message + (f" — {exc.hint}" if exc.hint else ""))]
    checks.append(Check("docker CLI (interactive sessions)", shutil.which("docker") is not None,
                        shutil.which("docker") or "not on PATH: only `dejima PATH -- CMD` works"))
    try:
        base = resolve_base(runtime, settings, ui) if build else find_base(runtime, settings)
        if base is None:
            checks.append(Check("images", False, f"base {settings.images.base} is not present; "
                                "`dejima doctor --build` or `dejima images build` makes it"))
            return checks
        filter_recipe, session_recipe = recipes(base, settings, host.identity())
        missing = [r.tag for r in (filter_recipe, session_recipe) if not runtime.image_id(r.tag)]
        if missing and not build:
            checks.append(Check("images", False, f"missing {', '.join(missing)}; `dejima images build` builds them"))
            return checks
        filter_image = ensure_image(runtime, filter_recipe, ui)
        session_image = ensure_image(runtime, session_recipe, ui)
        checks.append(Check("images", True, f"{filter_image}, {session_image} (base {base.ref})"))
    except DiagnosticError as exc:
        checks.append(Check("images", False, exc.message))
        return checks
    checks.extend(boundary_check(runtime, settings, filter_image, session_image))
    return checks

