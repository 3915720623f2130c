#!/usr/bin/env python3
"""The exit audit on a generated repository, against `git status` on the same tree, same run.

    python bench/audit.py [--files N] [--runs R]      (bench/run runs it with the others)
    python bench/audit.py --corpus    findings per flagged file on the audit corpus, and per class

Generates N files with the sizes of a real source tree (log-normal, median ~1.5 kB, a few up to
1 MiB; ~0.3 GB for 100k) in a git repository (committed, then packed by `git gc`, as in any real
clone), then times, each as the median of R runs after a warm-up, alternated with `git status
--porcelain` on the same tree: a session's start as `exit_audit.start` does it (snapshot, kept
files, start state saved) when the previous session's audit left its state (the common case; the
first start, which walks in full, is noted; the entries the start trusts are loaded while the
session runs, untimed here as there); the end as `exit_audit.finish` does it (snapshot,
diff and rules, findings written to the store, state kept for the next start) on an untouched tree,
and again after modifying, adding and removing files, whose changes must be exactly what was done
(one start ended R + 1 times: the copy of its entries that a session makes while it runs, and the
end consumes, is made again before each, untimed).
"""

from __future__ import annotations

import argparse
import io
import itertools
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import Row, audit_workdir, load, median  # noqa: E402
from dejima.adapters import tree_walk  # noqa: E402
from dejima.adapters.findings import FindingStore  # noqa: E402
from dejima.adapters.mount_state import load_snapshot  # noqa: E402
from dejima.core.snapshot import diff  # noqa: E402
from dejima.orchestration import exit_audit  # noqa: E402
from dejima.orchestration.exit_audit import Mount, MountState, audit_mount  # noqa: E402
from dejima.ui.console import UI, plain_console  # noqa: E402

GIT = ["git", "-c", "user.name=b", "-c", "user.email=b@example.invalid", "-c", "init.defaultBranch=main",
       "-c", "gc.auto=0"]  # no background gc racing the timings: the bench packs once, in the foreground
TOUCHED = 100  # files modified, added and removed each in the second scenario
Marks = list[float]  # perf_counter() at the start and after each phase


def generate(root: Path, files: int) -> int:
    """The tree; returns its size in bytes."""
    sizes = random.Random(14)
    text = b"".join(b"line %d: the quick brown fox jumps over the lazy dog\n" % n for n in range(20000))
    total = 0
    for i in range(files):
        directory = root / f"d{i // 1000:03d}" / f"e{(i // 100) % 10}"
        if i % 100 == 0:
            directory.mkdir(parents=True, exist_ok=True)
        size = min(1 << 20, int(sizes.lognormvariate(7.3, 1.2)))  # median e^7.3 ~ 1.5 kB
        start = (i * 7919) % (len(text) - size) if size < len(text) else 0
        (directory / f"f{i}.txt").write_bytes(b"file %d\n" % i + text[start:start + size])
        total += size
    for command in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "bench"],
                    ["-c", "pack.window=0", "gc", "-q"]):  # packed, as a clone is; no delta search to wait for
        subprocess.run([*GIT, "-C", str(root), *command], check=True)
    return total


def medians(run: Callable[[Marks], object], runs: int, raw: bool = False) -> list[Any]:
    """The median milliseconds of each phase ``run`` marks, over ``runs`` runs after a warm-up
    (``raw``: every run's milliseconds of each phase instead)."""
    laps = []
    for _ in range(runs + 1):
        marks = [time.perf_counter()]
        run(marks)
        laps.append([(end - start) * 1000 for start, end in itertools.pairwise(marks)])
    columns = [list(column) for column in zip(*laps[1:], strict=True)]
    return columns if raw else [statistics.median(column) for column in columns]


def git_status(root: Path, marks: Marks) -> None:
    subprocess.run([*GIT, "-C", str(root), "status", "--porcelain"], check=True, stdout=subprocess.DEVNULL)
    marks.append(time.perf_counter())


def start_session(root: Path, session: str, marks: Marks) -> list[MountState]:
    """What a session's start does for the workspace: snapshot, keep watched files, save the state."""
    states = exit_audit.start(session, [Mount("workspace", root)])
    marks.append(time.perf_counter())
    return states


def end_session(session: str, states: list[MountState], store: FindingStore, marks: Marks) -> None:
    """What the end of a session does: snapshot, diff and rules, findings written to the store,
    the state kept for the next start (the start state is in memory; only a crashed launcher's is
    loaded from disk, timed apart)."""
    exit_audit.finish(session, UI(plain_console(io.StringIO())), store, states=states)
    marks.append(time.perf_counter())


def load_alone(state: Path, runs: int) -> float:
    def run(marks: Marks) -> None:
        load_snapshot(state)
        marks.append(time.perf_counter())

    return float(medians(run, runs)[0])


def modify(root: Path, files: int) -> Counter[str]:
    """Modifies, adds and removes TOUCHED files spread over the tree; returns the expected changes."""
    step = max(1, files // TOUCHED)
    for n, i in enumerate(range(0, step * TOUCHED, step)):
        directory = root / f"d{i // 1000:03d}" / f"e{(i // 100) % 10}"
        (directory / f"f{i}.txt").write_text(f"changed {i}\n")
        (directory / f"f{i + 1}.txt").unlink()
        (directory / f"new{n}.txt").write_text(f"new {n}\n")
    return Counter({"modified": TOUCHED, "added": TOUCHED, "removed": TOUCHED})


def run(files: int, runs: int) -> list[Row]:
    """The rows bench/run shows; raises when the audit does not find exactly the changes made."""
    with audit_workdir("dejima-audit-bench-") as (work, store):
        return _run(work, store, files, runs)


def _run(work: Path, store: FindingStore, files: int, runs: int) -> list[Row]:
    root = work / "repo"
    sessions = itertools.count()
    size = generate(root, files)
    before = load()
    first: Marks = [time.perf_counter()]
    end_session("first", start_session(root, "first", first), store, first)  # walks in full
    current: list[list[MountState]] = []

    def cycle(marks: Marks) -> None:  # alternated, so that a machine changing speed slows both
        session = f"s{next(sessions)}"
        git_status(root, marks)
        states = start_session(root, session, marks)
        for state in states:  # what the session's own run leaves time for: its trusted entries loaded
            state.join()
        marks.append(time.perf_counter())  # a lap of its own, untimed: not git status's
        git_status(root, marks)
        end_session(session, states, store, marks)
        current[:] = [states]

    untouched = medians(cycle, runs, raw=True)
    captured = current[0]
    expected = modify(root, files)

    def changed(marks: Marks) -> None:
        for state in captured:  # one start ended again and again: what each session's end finds made, made again
            state.copy_for_end()
        marks[0] = time.perf_counter()
        git_status(root, marks)
        end_session(f"c{next(sessions)}", captured, store, marks)

    touched = medians(changed, runs, raw=True)
    _, after = audit_mount(captured[0])
    found = Counter(change.what for change in diff(captured[0].snapshot, after))
    if found != expected:
        raise RuntimeError(f"the audit found {dict(found)}, expected {dict(expected)}")
    loaded = load_alone(next((work / "state").rglob("base-*.snapshot")), runs)
    tree = f"{files} files, {size / 1e6:.0f} MB + .git (packed)"
    loads, unit, anchor_name = [before, load()], "ms", "git status --porcelain"
    walk = "walked with its C part" if tree_walk.NATIVE else "walked in Python (the C part is not built: slower)"
    return [
        Row(f"audit: start snapshot, {files // 1000}k files", dejima=median(untouched[1]),
            anchor=median(untouched[0]), goal=1.5, samples={"dejima": untouched[1], "anchor": untouched[0]},
            note=f"{tree}; start state saved; the previous session's audit left its state (a first start "
                 f"walks in full: {(first[1] - first[0]) * 1000:.0f} ms); the entries it trusts load during "
                 f"the session (~{loaded:.0f} ms of one core)", unit=unit, anchor_name=anchor_name, load=loads),
        Row(f"audit: end of session, untouched, {files // 1000}k files", dejima=median(untouched[4]),
            anchor=median(untouched[3]), goal=1.0, samples={"dejima": untouched[4], "anchor": untouched[3]},
            note=f"findings stored, state kept; {walk}; mission: ≤ 2 ×; issue 14: ≤ 1 ×", unit=unit,
            anchor_name=anchor_name, load=loads),
        Row(f"audit: end of session, {3 * TOUCHED} changed, {files // 1000}k files", dejima=median(touched[1]),
            anchor=median(touched[0]), goal=1.0, samples={"dejima": touched[1], "anchor": touched[0]},
            note=f"found exactly the {3 * TOUCHED} changes made; findings stored; a crashed launcher's saved "
                 f"start loads in {loaded:.0f} ms", unit=unit, anchor_name=anchor_name, load=loads),
    ]


def corpus() -> int:
    """The corpus of tests/unit/test_audit_corpus.py: how many findings each flagged file gets
    (the counting rule says one), and which samples of each class pass."""
    from dejima.core.audit import rank  # noqa: PLC0415
    from tests.unit import test_audit_corpus as c  # noqa: PLC0415 - the corpus lives with its tests

    work = Path(tempfile.mkdtemp(prefix="dejima-audit-corpus-"))
    try:
        c.build_b0(work / "base")
        findings = files = 0
        results: Counter[str] = Counter()
        samples = [("attack", *a) for a in c.ATTACKS] + [("class attack", *a) for a in c.CLASS_ATTACKS]
        for index, (kind, _name, change, expected, *variant) in enumerate(samples):
            repo = work / f"s{index}"
            subprocess.run(["cp", "-a", str(work / "base"), str(repo)], check=True)
            if variant:
                c.VARIANTS[variant[0]](repo)
            found = [f for f in c.findings_after(repo, change) if rank(f.severity) >= rank("low")]
            findings, files = findings + len(found), files + len({f.path for f in found})
            try:
                c._check(found, expected)
                results[f"{kind}: found"] += 1
            except AssertionError:
                results[f"{kind}: MISSED"] += 1
        benign = [(name, change, "") for name, change in c.BENIGN] + c.CLASS_BENIGN  # "": no variant
        for index, (_name, change, named) in enumerate(benign):
            repo = work / f"b{index}"
            subprocess.run(["cp", "-a", str(work / "base"), str(repo)], check=True)
            if named:
                c.VARIANTS[named](repo)
            results["benign: quiet" if not c.loud(c.findings_after(repo, change)) else "benign: LOUD"] += 1
        print(f"attack samples: {findings} findings on {files} flagged files = {findings / files:.2f} per file")
        for key, count in sorted(results.items()):
            print(f"{key}: {count}")
        return 1 if any(k.endswith(("MISSED", "LOUD")) for k in results) else 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--corpus", action="store_true", help="findings per flagged file on the audit corpus")
    args = parser.parse_args()
    if args.corpus:
        return corpus()
    if args.files < 2 * TOUCHED:
        parser.error(f"--files must be at least {2 * TOUCHED}")
    for row in run(args.files, args.runs):
        print(f"{row.measurement}: {row.dejima:.0f} ms, {row.anchor_name} {row.anchor:.0f} ms, "
              f"{row.ratio:.2f} × (goal {row.goal_text()}); {row.note}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
