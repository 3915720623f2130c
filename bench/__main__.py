"""Every benchmark in one command: `bench/run` (or `python -m bench` from the repository root).

    bench/run [--quick] [--only start,small,dns,audit,installs,grants,proxy,pair] [--out DIR]

Prints one table (measurement, dejima, anchor, ratio, goal, pass/fail), writes DIR/results.json
(every sample, the load before and after each measurement, versions) and DIR/latency.png,
DIR/start.png (distributions) when matplotlib is installed (bench/run installs it). Anchors run on
this box in the same run, alternated with dejima; the machine is noisy, so only ratios count.
Needs Docker and the images (`dejima images build`); ~10 minutes here (--quick: ~4).
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench import audit, dns, grants, installs, pair, proxy, small, start
from bench.common import REPO, Row, bench_env, docker, write_json

# Goals whose benchmarks land with their features show in the table as pending (common.pending).
PENDING: list[Row] = []


def main() -> int:
    parser = argparse.ArgumentParser(prog="bench/run", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer runs and a 20k-file tree: a smoke run")
    parser.add_argument("--only", default="start,small,dns,audit,installs,grants,proxy,pair",
                        help="comma-separated benchmarks")
    parser.add_argument("--out", default=str(REPO / "bench" / "results"), help="where results.json and PNGs go")
    args = parser.parse_args()
    chosen = set(args.only.split(","))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    began = time.time()
    rows: list[Row] = []
    extra: dict[str, Any] = {"started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "machine": machine(),
                             "quick": args.quick}
    with bench_env() as env:
        if "small" in chosen:
            rows += small.run(env, 6 if args.quick else 15)
        if "start" in chosen:
            found, phases = start.run(env, 5 if args.quick else 15)
            rows += found
            extra["start phases (ms, median)"] = phases
    if "dns" in chosen:
        with bench_env() as env:
            found, samples = dns.run(env, 1 if args.quick else 4, 3 if args.quick else 6)
            rows += found
            extra["dns samples"] = samples
    if "grants" in chosen:
        with bench_env() as env:
            rows += grants.run(env, 4 if args.quick else 10)
    if "audit" in chosen:
        rows += audit.run(20_000 if args.quick else 100_000, 3 if args.quick else 5)
    if "installs" in chosen:
        rows += installs.run(2 if args.quick else 5)
    if "proxy" in chosen:
        rows += proxy.run(args.quick)
    if "pair" in chosen:
        with bench_env() as env:
            rows += pair.run(env, 500 if args.quick else 2000)
    rows += PENDING
    extra["seconds"] = round(time.time() - began, 1)
    write_json(out / "results.json", rows, extra)
    print(table(rows))
    if "start phases (ms, median)" in extra:
        print("\nWhere a start goes (median ms of instrumented starts, bench/phases.py):")
        for name, value in extra["start phases (ms, median)"].items():
            print(f"  {name:<48s} {value:8.1f}")
    pictures = plots(rows, out)
    print(f"\nresults: {out / 'results.json'}" + "".join(f", {p}" for p in pictures)
          + f"; {extra['seconds']:.0f} s; load {os.getloadavg()[0]:.2f}")
    return 1 if any(r.passed is False for r in rows) else 0


def machine() -> dict[str, Any]:
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    return {"host": platform.node(), "kernel": platform.release(), "cpus": os.cpu_count(),
            "python": sys.version.split()[0], "commit": commit,
            "docker": docker("version", "--format", "{{.Server.Version}}", check=False)}


def number(value: float | None, unit: str = "") -> str:
    if value is None:
        return "-"
    text = f"{value:,.0f}" if abs(value) >= 100 else f"{value:.2f}" if abs(value) < 10 else f"{value:.1f}"
    return f"{text} {unit}".strip()


def table(rows: list[Row]) -> str:
    head = ("measurement", "dejima", "anchor", "ratio", "goal", "result")
    body = []
    for r in rows:
        verdict = {True: "pass", False: "FAIL", None: "-" if r.dejima is not None else "pending"}[r.passed]
        body.append((r.measurement, number(r.dejima, r.unit), f"{number(r.anchor, r.unit)} ({r.anchor_name})"
                     if r.anchor is not None else "-", r.ratio_text(),
                     r.goal_text(), verdict))
    widths = [max(len(line[i]) for line in (head, *body)) for i in range(len(head))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip() for line in (head, *body)]
    lines.insert(1, "  ".join("-" * w for w in widths))
    notes = [f"  {r.measurement}: {r.note}" for r in rows if r.note and r.dejima is not None]
    return "\n".join(lines + (["", "notes:", *notes] if notes else []))


def plots(rows: list[Row], out: Path) -> list[Path]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(no PNGs: matplotlib is not installed; bench/run installs it)", file=sys.stderr)
        return []
    made = []
    groups = {"latency.png": [r for r in rows if r.unit == "ms" and "one at a time" in r.measurement],
              "start.png": [r for r in rows if r.measurement.startswith(("session start", "small command", "audit"))]}
    for name, chosen in groups.items():
        chosen = [r for r in chosen if r.samples.get("dejima")]
        if not chosen:
            continue
        figure, axes = plt.subplots(len(chosen), 1, figsize=(9, 2.2 * len(chosen)), squeeze=False)
        for axis, row in zip(axes[:, 0], chosen, strict=True):
            both = row.samples["dejima"] + row.samples["anchor"]
            bins = [min(both) + (max(both) - min(both)) * i / 40 for i in range(41)] if max(both) > min(both) else 10
            axis.hist(row.samples["dejima"], bins=bins, alpha=0.6, label="dejima")
            axis.hist(row.samples["anchor"], bins=bins, alpha=0.6, label=row.anchor_name)
            axis.legend(fontsize=7)
            axis.set_title(f"{row.measurement} ({row.unit})", fontsize=9)
            axis.tick_params(labelsize=8)
        figure.tight_layout()
        figure.savefig(out / name, dpi=110)
        plt.close(figure)
        made.append(out / name)
    return made


if __name__ == "__main__":
    raise SystemExit(main())
