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
    row = Row("session start: dejima -q WS -- true", "s", median(samples["dejima"]), median(samples["anchor"]),
              "2 × docker run --rm IMAGE true", 1.0, samples=samples, load=[before, load()],
              note=f"session image {session_image}")
    return [row], phases(env, workspace, max(3, runs // 2))


def phases(env: Env, workspace: Path, runs: int) -> dict[str, float]:
    """Median milliseconds of each timed phase of a start, over ``runs`` instrumented starts."""
    found: dict[str, list[float]] = defaultdict(list)
    report = env.root / "phases.json"
    for _ in range(runs):
        wall = timed([PYTHON, str(REPO / "bench" / "phases.py"), "-q", str(workspace), "--", "true"],
                     {**env.vars, "DEJIMA_BENCH_PHASES": str(report)}) * 1000
        data = json.loads(report.read_text())
        found["imports (CLI, docker SDK, audit rules)"].append(data["imports_end"] * 1000)
        seen: dict[str, float] = defaultdict(float)
        for path, start, end in data["calls"]:
            if path in PHASES:
                seen[PHASES[path]] += (end - start) * 1000
        for name, value in seen.items():
            found[name].append(value)
        found["whole process (wall)"].append(wall)
        main_start, main_end = data["main"]
        found["interpreter start and exit"].append(wall - (main_end - main_start + data["imports_end"]) * 1000)
    return {name: median(values) for name, values in found.items()}


M, P, R = "main", "main/app.prepare_session", "main/app.run_session"
# Call path (bench/phases.py) -> the phase it is shown as.
PHASES = {
    M: "launcher main(), total",
    f"{M}/app.resolve_manifests": "settings and manifests",
    P: "prepare (stale check, findings, images, plan)",
    f"{P}/images.ensure_images": "  image checks",
    f"{P}/images.ensure_images/images.recipes": "    recipes (render, hash)",
    f"{P}/app.build_session_plan": "  plan (ruleset render)",
    f"{R}/audit.start": "audit: start snapshot",
    f"{R}/session.start_filter": "filter: create, start, until ready",
    f"{R}/session.start_filter/engine.start": "  engine start (filter)",
    f"{R}/session.start_filter/session._wait_ready": "  ready wait (ruleset applied, verified)",
    f"{R}/engine.create": "session: create",
    f"{R}/session._run_attached": "session: start, run, wait",
    f"{R}/session.teardown": "teardown",
    f"{R}/session.teardown/session.stop_filter_and_read": "  graceful filter stop, logs",
    f"{R}/audit.finish": "audit: end",
}
