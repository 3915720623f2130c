"""Session start, end to end: `dejima -q WS -- true` (images present; start, verify, run, teardown,
audit) against two bare `docker run --rm SESSION_IMAGE true` of the session image the launcher
itself uses, alternated; then where the launcher's time goes (bench/phases.py), phase by phase."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from bench.common import DEJIMA, PYTHON, REPO, Env, Row, alternate, dejima_images, load, median, timed


def run(env: Env, runs: int) -> tuple[list[Row], dict[str, float]]:
    workspace = env.workspace("start")
    _, session_image = dejima_images(env, workspace)
    ours = [*DEJIMA, "-q", str(workspace), "--", "true"]
    bare = ["docker", "run", "--rm", session_image, "true"]
    before = load()
    samples = alternate({
        "dejima": lambda: timed(ours, env.vars),
        "anchor": lambda: timed(bare) + timed(bare),
    }, runs)
    after = load()
    found, adopted = phases(env, workspace, max(3, runs // 2))
    row = Row("session start: dejima -q WS -- true", "s", median(samples["dejima"]), median(samples["anchor"]),
              "2 × docker run --rm IMAGE true", 1.0, samples=samples, load=[before, after],
              note=f"session image {session_image}; the prestarted filter was adopted in {adopted[0]} of "
                   f"{adopted[1]} instrumented starts")
    return [row], found


def phases(env: Env, workspace: Path, runs: int) -> tuple[dict[str, float], tuple[int, int]]:
    """Median milliseconds of each timed phase of a start, over ``runs`` instrumented starts, and in
    how many of them the prestarted filter was adopted (the session's was then the one container
    created while the filter started)."""
    found: dict[str, list[float]] = defaultdict(list)
    adopted = 0
    report = env.root / "phases.json"
    for _ in range(runs):
        wall = timed([PYTHON, str(REPO / "bench" / "phases.py"), "-q", str(workspace), "--", "true"],
                     {**env.vars, "DEJIMA_BENCH_PHASES": str(report)}) * 1000
        data = json.loads(report.read_text())
        found["imports before main() (CLI)"].append(data["imports_end"] * 1000)
        seen: dict[str, float] = defaultdict(float)
        creates = sum(1 for path, _, _ in data["calls"] if path.endswith("engine.create"))
        adopted += any(path == f"{M}/prestart.begin" for path, _, _ in data["calls"]) and creates == 1
        for path, start, end in data["calls"]:
            if path in PHASES:
                seen[PHASES[path]] += (end - start) * 1000
        for name, value in seen.items():
            found[name].append(value)
        found["whole process (wall)"].append(wall)
        main_start, main_end = data["main"]
        found["interpreter start and exit"].append(wall - (main_end - main_start + data["imports_end"]) * 1000)
    return {name: median(values) for name, values in found.items()}, (adopted, runs)


M, P, R = "main", "main/start.prepare_session", "main/start.run_session"
S = f"{R}/executor.run"
# Call path (bench/phases.py) -> the phase it is shown as. A start's actions run on threads of their own
# (orchestration/executor.py), so what they call is shown without the path of the action that called it.
PHASES = {
    M: "launcher main(), total",
    f"{M}/prestart.begin": "prestart: the remembered filter's create and start begun",
    f"{M}/start_request.resolve_manifests": "settings and manifests",
    P: "prepare: facts, plan, apply",
    f"{P}/start.read_facts": "  facts (engine, network, images, credential sources; stale sessions removed)",
    "start.review_findings": "    findings: dead launchers' sessions audited, unreviewed ones checked (with the "
                             "audit's import)",
    "start.review_findings/audit.recover": "      audit: recover",
    "images.image_needs": "    image checks",
    "images.image_needs/images.recipes": "      recipes (render, hash; when not remembered)",
    "engine.memory": "    engine memory (docker info)",
    f"{P}/start_plan.plan_start": "  plan (policy, routes, ruleset render)",
    f"{P}/start_plan.plan_start/start_plan.build_session_plan": "    session plan (ruleset render)",
    f"{P}/executor.run": "  apply (images when missing, directories, run directory, gate, record)",
    S: "the pair's start: filter start || session create, audit start snapshot, session start, ready",
    "prestart.adopt": "  prestarted filter adopted (request compared)",
    "engine.create": "  engine creates (the filter when not prestarted, the session)",
    "audit.start": "  audit: start snapshot",
    "engine.start": "  engine start (the filter, when not prestarted)",
    "session._wait_ready": "  filter: ready wait (ruleset applied, verified)",
    "session._start_attached": "  session: start (its command behind the gate)",
    f"{R}/session._run_attached": "session: run, wait",
    f"{R}/executor.unwind": "teardown (the log unwound)",
    "session.stop_filter_and_read": "  filter stop, logs (own thread)",
    "audit.finish": "  audit: end (once the session is removed)",
}
