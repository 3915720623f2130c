#!/usr/bin/env python3
"""The exit audit on a generated repository, against `git status` on the same tree, same run.

    python bench/audit.py [--files N]

Generates N small files in a git repository (committed), then times: `git status --porcelain`
(warm cache, median of 3), one snapshot (lstat + hash of every file), and one full audit (the
end-of-session snapshot plus the diff and the rules). The goal is audit <= 2 x git status.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dejima.core.audit import audit, watched  # noqa: E402
from dejima.snapshot import read_kept, take_snapshot  # noqa: E402

GIT = ["git", "-c", "user.name=b", "-c", "user.email=b@example.invalid", "-c", "init.defaultBranch=main"]


def timed(fn: object) -> float:
    start = time.perf_counter()
    fn()  # type: ignore[operator]
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=100_000)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="dejima-audit-bench-"))
    try:
        for i in range(args.files):
            directory = root / f"d{i // 1000:03d}" / f"e{(i // 100) % 10}"
            if i % 100 == 0:
                directory.mkdir(parents=True, exist_ok=True)
            (directory / f"f{i}.txt").write_text(f"file {i}\n")
        subprocess.run([*GIT, "init", "-q", str(root)], check=True)
        subprocess.run([*GIT, "-C", str(root), "add", "-A"], check=True)
        subprocess.run([*GIT, "-C", str(root), "commit", "-qm", "bench"], check=True)
        status = lambda: subprocess.run([*GIT, "-C", str(root), "status", "--porcelain"], check=True,  # noqa: E731
                                        stdout=subprocess.DEVNULL)
        status()
        git_times = [timed(status) for _ in range(3)]
        before = take_snapshot(root, hash_path=watched)
        kept = read_kept(root, before, watched)
        snap = timed(lambda: take_snapshot(root, hash_path=watched))

        def full_audit() -> None:
            after = take_snapshot(root, previous=before)
            kept_after = read_kept(root, after, watched)
            audit(before, after, lambda side, p: (kept if side == "before" else kept_after).get(p))

        audit_time = timed(full_audit)
        g = statistics.median(git_times)
        print(f"files: {args.files} (+ .git)")
        print(f"git status --porcelain: median {g * 1000:.0f} ms")
        print(f"snapshot:               {snap * 1000:.0f} ms ({snap / g:.2f} x git status)")
        print(f"audit (snapshot + diff + rules): {audit_time * 1000:.0f} ms ({audit_time / g:.2f} x git status; "
              "goal <= 2)")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
