#!/usr/bin/env python3
"""The exit audit after a real dependency install, against `git status` on the same tree, same run.

    python -m bench.installs [--runs R]      (bench/run runs it with the others: --only installs)

For each committed lockfile (bench/data/installs: npm, 601 packages, ~21k files; uv, 41
distributions, ~20k files), installs its tree from the registries this machine reaches into a
fresh git repository (the project committed, its tree ignored, as projects keep them), after the
audit recorded the repository's start as a session's start does; then times the end audit
(`exit_audit.finish`: walk, diff, rules, findings stored) alternated with `git status --porcelain`
on the same tree. That anchor does not look into an ignored tree; the note gives
`git status --porcelain --ignored --untracked-files=all`, which lists every file of it.

A second row per tree holds the same end audit (which verifies an npm tree against its lockfile's
tarballs, read from npm's cache) to the floor for an audit that must find tampering inside the
tree: reading its bytes once (`find TREE -type f -print0 | xargs -0 sha256sum`, two processes, as
the audit uses both cores), goal 1.5 ×; its note gives the ratio to the install's own time.
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import Row, audit_workdir, load, median  # noqa: E402
from dejima.adapters.findings import FindingStore  # noqa: E402
from dejima.orchestration import exit_audit  # noqa: E402
from dejima.orchestration.exit_audit import Mount, MountState  # noqa: E402
from dejima.ui.console import UI, plain_console  # noqa: E402

DATA = Path(__file__).resolve().parent / "data" / "installs"
GIT = ["git", "-c", "user.name=b", "-c", "user.email=b@example.invalid", "-c", "init.defaultBranch=main",
       "-c", "gc.auto=0"]


def _npm(project: Path) -> list[str]:
    return ["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"]


def _uv(project: Path) -> list[str]:
    """uv from PyPI into a virtualenv of the bench's own (the host need not have it)."""
    tools = project.parent / "uv-tool"
    if not (tools / "bin" / "uv").exists():
        subprocess.run([sys.executable, "-m", "venv", str(tools)], check=True)
        subprocess.run([str(tools / "bin" / "pip"), "install", "-q", "uv"], check=True)
    return [str(tools / "bin" / "uv"), "sync", "--quiet", "--frozen"]


INSTALLS: dict[str, tuple[Callable[[Path], list[str]], str]] = {"npm": (_npm, "node_modules"), "uv": (_uv, ".venv")}


def _installed(name: str, work: Path) -> tuple[Path, list[MountState], int, float]:
    """A repository with the project committed and its start recorded, then its tree installed."""
    command, tree = INSTALLS[name]
    root = work / name
    shutil.copytree(DATA / name, root)
    (root / ".gitignore").write_text(f"{tree}/\n")
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "project"]):
        subprocess.run([*GIT, "-C", str(root), *args], check=True, stdout=subprocess.DEVNULL)
    states = exit_audit.start(f"{name}-start", [Mount("workspace", root)])
    for state in states:
        state.join()
    env = {**os.environ, "UV_PROJECT_ENVIRONMENT": str(root / tree)}
    installing = command(root)
    subprocess.run(installing, cwd=root, env=env, check=True, stdout=subprocess.DEVNULL)  # warms the cache
    shutil.rmtree(root / tree)
    install = _timed(lambda: subprocess.run(installing, cwd=root, env=env, check=True, stdout=subprocess.DEVNULL))
    return root, states, sum(1 for _ in (root / tree).rglob("*")), install


def _timed(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return (time.perf_counter() - started) * 1000


def _measured(name: str, root: Path, states: list[MountState], files: int, runs: int, store: FindingStore,
              before: float, install: float) -> list[Row]:
    status = [*GIT, "-C", str(root), "status", "--porcelain"]
    listing = [*status, "--ignored", "--untracked-files=all"]

    def end(index: int) -> None:
        exit_audit.finish(f"{name}-{index}", UI(plain_console(io.StringIO())), store, states=states)

    tree = INSTALLS[name][1]
    hashing = f"find {tree} -type f -print0 | xargs -0 -P 2 -n 500 sha256sum"
    audits, anchors, lists, hashes = [], [], [], []
    for index in range(runs + 1):  # alternated, after a warm-up round
        anchor = _timed(lambda: subprocess.run(status, check=True, stdout=subprocess.DEVNULL))
        audit = _timed(partial(end, index))
        listed = _timed(lambda: subprocess.run(listing, check=True, stdout=subprocess.DEVNULL))
        hashed = _timed(lambda: subprocess.run(hashing, shell=True, cwd=root, check=True, stdout=subprocess.DEVNULL))
        if index:
            audits.append(audit)
            anchors.append(anchor)
            lists.append(listed)
            hashes.append(hashed)
    found = store.findings(str(root))
    findings = ", ".join(sorted({f"{s.finding.rule} {s.finding.severity} {s.finding.path}" for s in found}))
    verified = next((s.finding.evidence.partition(";")[0] for s in found if s.finding.rule in ("B07", "B10")), "")
    after = load()
    return [Row(f"audit: end of session after a real {name} install, {files // 1000}k files", "ms", median(audits),
                median(anchors), "git status --porcelain", 2.0, samples={"dejima": audits, "anchor": anchors},
                note=f"{files} new entries; `git status --porcelain --ignored --untracked-files=all` "
                     f"{median(lists):.0f} ms ({median(audits) / median(lists):.1f} ×); findings: {findings}",
                load=[before, after]),
            Row(f"audit: end of session after a real {name} install, against hashing every file once", "ms",
                median(audits), median(hashes), "sha256sum of every file (2 processes)", 1.5,
                samples={"dejima": audits, "anchor": hashes},
                note=f"{verified or 'no tree verified'}; the install itself ({name}, warm cache) {install:.0f} ms: "
                     f"the audit is {median(audits) / install:.2f} × of it "
                     "(goal ≤ 0.25 ×)", load=[before, after])]


def run(runs: int) -> list[Row]:
    rows = []
    with audit_workdir("dejima-installs-bench-") as (work, store):
        for name in INSTALLS:
            before = load()
            try:
                root, states, files, install = _installed(name, work)
            except (OSError, subprocess.CalledProcessError) as exc:
                rows.append(Row(f"audit: end of session after a real {name} install", "ms", None, None,
                                "git status --porcelain", 2.0, note=f"not measured: the install failed ({exc})"))
                continue
            rows.extend(_measured(name, root, states, files, runs, store, before, install))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    for row in run(args.runs):
        shown = f"{row.dejima:.0f} ms, {row.anchor_name} {row.anchor:.0f} ms, {row.ratio:.0f} ×" \
            if row.dejima is not None and row.anchor else "-"
        print(f"{row.measurement}: {shown} (goal {row.goal_text()}); {row.note}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
