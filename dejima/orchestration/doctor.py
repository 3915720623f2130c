"""`dejima doctor`: is this machine able to hold the boundary, and does it hold?

Checks, in order, each stopping the ones after it when it fails: the engine answers (and which
walk the exit audit runs, said either way); the images a
start on the project would use are present (or built with --build: orchestration/project_images.py);
a decoy answers an unfiltered container; nftables works in a filter container; and a real session
cannot reach that decoy. Traffic goes only to the decoy.
"""

from __future__ import annotations

import secrets
import shutil
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath

from dejima.adapters import host, pinned_archives, tree_walk
from dejima.adapters.image_builds import ensure_image
from dejima.adapters.runtime import Runtime, connect
from dejima.core.plan import Identity, SessionPlan, SessionRequest, build_session_plan
from dejima.core.settings import Settings
from dejima.errors import DiagnosticError
from dejima.orchestration import session
from dejima.orchestration.project_images import project_images
from dejima.orchestration.selftest import ProbeResult, control_probe, probe_command, start_decoy
from dejima.orchestration.session_reporter import SessionReporter


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    ok: bool
    detail: str


def _probe_plan(settings: Settings, filter_image: str, session_image: str, address: str,
                identity: Identity) -> SessionPlan:
    """A session pair whose command is the probe, as the project's session user; it needs no workspace or home."""
    request = SessionRequest(
        session_id=f"doctor{secrets.token_hex(3)}", scope=host.scope(), workspace=PurePosixPath("/nonexistent"),
        home_dir=PurePosixPath("/nonexistent"), command=probe_command(address), launcher=host.launcher_token(),
    )
    plan = build_session_plan(request, settings, identity, filter_image, session_image)
    return replace(plan, session=replace(plan.session, binds=(), working_dir="/"))


def _describe(result: ProbeResult) -> str:
    seconds = result.tcp.get("seconds", 0.0)
    return (f"TCP {result.tcp['result']} in {float(seconds):.2f}s, "  # type: ignore[arg-type]
            f"UDP {result.udp['result']}, loopback {result.loopback['result']}")


def boundary_check(runtime: Runtime, settings: Settings, filter_image: str, session_image: str,
                   identity: Identity | None = None) -> list[Check]:
    network, launcher = settings.session.network, host.launcher_token()
    created: list[str] = []
    checks: list[Check] = []
    try:
        decoy = start_decoy(runtime, host.scope(), session_image, network, launcher, created)
        control = control_probe(runtime, host.scope(), session_image, network, launcher, decoy.address)
        reachable = control.tcp["result"] == "connected"
        checks.append(Check("decoy reachable without dejima", reachable, _describe(control)))
        if not reachable:
            return checks
        plan = _probe_plan(settings, filter_image, session_image, decoy.address, identity or host.identity())
        created.append(session.start_filter(runtime, plan, settings.session.ready_timeout))
        checks.append(Check("nftables in a namespace", True, "the filter applied and verified its ruleset"))
        probe = runtime.create(plan.session)
        created.append(probe)
        runtime.start(probe)
        runtime.wait(probe, timeout=60)
        result = ProbeResult.parse(runtime.logs(probe))
        held = result.egress_blocked and result.loopback["result"] == "connected"
        checks.append(Check("session has no egress", held, _describe(result)))
    except DiagnosticError as exc:
        checks.append(Check("nftables in a namespace", False, exc.message))
    finally:
        session.teardown(runtime, created)
    return checks


def _image_check(runtime: Runtime, settings: Settings, ui: SessionReporter, build: bool, directory: Path | None,
                 harness: str) -> tuple[Check, tuple[str, str, Identity] | None]:
    """The images a start on ``directory`` would use (the project's: its owner, its manifests' layers)."""
    try:
        wanted = project_images(runtime, settings, directory, ui, harness, build)
        if wanted is None:
            return Check("images", False, f"base {settings.images.base} is not present; `dejima doctor --build` "
                                          "or `dejima images build` makes it"), None
        missing = [r.tag for r in (wanted.filter, wanted.session) if not runtime.image_id(r.tag)]
        if missing and not build:
            return Check("images", False, f"missing {', '.join(missing)}, which a start on {wanted.chosen_for} "
                                          "uses; `dejima doctor --build` builds them (a start does too)"), None
        filter_image, session_image = (ensure_image(runtime, r, ui) for r in (wanted.filter, wanted.session))
        return Check("images", True, f"{filter_image}, {session_image} (base {wanted.base.ref}) for "
                                     f"{wanted.chosen_for}"), (filter_image, session_image, wanted.identity)
    except DiagnosticError as exc:
        return Check("images", False, exc.message), None


def walk_check() -> Check:
    """Which walk the exit audit runs, and how it reads pinned archives' headers: with their C parts,
    or (installed where no C compiler was) in Python, slower on a large tree or an npm tree's tarballs.
    Both find the same; only the time differs, so it passes either way."""
    missing = [part for part, built in (("dejima/adapters/_stat_compare.c: the walk", tree_walk.NATIVE),
                                        ("dejima/adapters/_tar_headers.c: the archives' headers",
                                         pinned_archives.NATIVE_HEADERS)) if not built]
    if not missing:
        return Check("exit audit walk", True, "with its C parts (dejima/adapters/_stat_compare.c, _tar_headers.c)")
    return Check("exit audit walk", True, f"in Python ({'; '.join(missing)}): the C parts were not built when "
                 "dejima was installed (no C compiler or Python headers), so the end of a session takes longer "
                 "on a large tree; install gcc and python3-dev, then reinstall dejima")


def run_doctor(settings: Settings, ui: SessionReporter, build: bool, directory: Path | None = None,
               harness: str = "shell") -> list[Check]:
    try:
        runtime = connect()
        version = runtime.version()
    except DiagnosticError as exc:
        return [Check("engine", False, exc.message + (f" — {exc.hint}" if exc.hint else ""))]
    checks = [Check("engine", True, f"Docker {version.get('Version', '?')} (API {version.get('ApiVersion', '?')})")]
    cli = shutil.which("docker")
    checks.append(Check("docker CLI (interactive sessions)", cli is not None,
                        cli or "not on PATH: only `dejima PATH -- CMD` works"))
    checks.append(walk_check())
    image_check, images = _image_check(runtime, settings, ui, build, directory, harness)
    checks.append(image_check)
    if images is not None:
        checks.extend(boundary_check(runtime, settings, *images))
    return checks
