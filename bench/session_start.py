#!/usr/bin/env python3
"""Session start, end to end, against its baseline measured in the same run.

    python bench/session_start.py [--runs N] [--workspace DIR]

Times `dejima -q WS -- true` (images present; start, verify, run, teardown) and, interleaved
with it, two bare `docker run --rm IMAGE true` on the session image. Prints medians and the
ratio; the goal is a ratio <= 1.0. The machine is noisy: compare ratios, not absolute numbers.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time


def timed(command: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--workspace")
    args = parser.parse_args()
    workspace = args.workspace or tempfile.mkdtemp(prefix="dejima-bench-")
    dejima = [sys.executable, "-m", "dejima", "-q", workspace, "--", "true"]
    subprocess.run(dejima, check=True)  # warm-up; builds images if they are missing
    image = subprocess.run(
        ["docker", "images", "--filter", "label=dejima.role=session", "--format", "{{.Repository}}:{{.Tag}}"],
        check=True, capture_output=True, text=True,
    ).stdout.split()[0]
    bare = ["docker", "run", "--rm", image, "true"]
    timed(bare)
    ours, baseline = [], []
    for _ in range(args.runs):
        ours.append(timed(dejima))
        baseline.append(timed(bare) + timed(bare))
    o, b = statistics.median(ours), statistics.median(baseline)
    for label, values in (("dejima -- true:          ", ours), ("2 x docker run --rm true:", baseline)):
        low, mid, high = (v * 1000 for v in (min(values), statistics.median(values), max(values)))
        print(f"{label} median {mid:.0f} ms  (min {low:.0f}, max {high:.0f})")
    print(f"ratio: {o / b:.2f} (goal <= 1.0)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
