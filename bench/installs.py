#!/usr/bin/env python3
"""The exit audit after a real dependency install, against `git status`, hashing every file once and
the install itself, all on the same tree in the same run.

    python -m bench.installs [--runs R] [--only npm|uv]      (bench/run runs it with the others: --only installs)

For each committed lockfile (bench/data/installs: npm, 601 packages, ~21k files; uv, 41
distributions, ~20k files), installs its tree from the registries this machine reaches into a
fresh git repository (the project committed, its tree ignored, as projects keep them), after the
audit recorded the repository's start as a session's start does; then times the end audit
(`exit_audit.finish`: walk, diff, rules, an npm tree verified against its lockfile's tarballs, an
uv environment against its lockfile's wheels,
findings stored) alternated with its anchors on the same tree. uv's environment is audited as a
session's is: its own files (pyvenv.cfg, activate*, the interpreter links) held to the record of
what the host's python3 and the bench's uv write, made as an image's is (venv_probe_script.py, run
on the host) and named by each audited session's state; uv syncs with that python3.

- `git status --porcelain --ignored --untracked-files=all`, which lists every file of the tree but
  reads none (no goal; the note gives `git status --porcelain`, which does not look into it);
- reading every file's bytes once, the floor for an audit that must find tampering inside a tree
  (`find TREE -type f -print0 | xargs -0 -P 2 sha256sum`, two processes as the audit uses both
  cores): goal 1.5 ×. For npm four times: as an audit finds it when an earlier audit read the
  pinned tarballs (their manifests kept); the first audit of its pins, the tarballs the start's
  lockfile pins read from the warm cache while the session ran (exit_audit.read_ahead, untimed);
  a project's first session, the read ahead started on an empty cache (a session home's, $HOME
  pointed at it for the audit) and reading each tarball as the session's `npm ci` fetches it from
  the registry (the install untimed, the session's own time), then stopped by the end audit as a
  session's is (what it had not read then, the end audit reads, timed); and unread, the worst case,
  every tarball inflated by the end audit (the manifests dropped first; no goal: it reads the tree's
  bytes and every tarball's, two passes where the goal's floor is one); for uv twice: kept, and
  unread (every pinned wheel's archive in uv's cache listed and its RECORD read);
- the install itself from a warm cache (`npm ci`, `uv sync`; the median of R installs, one for
  npm, whose install takes ~20 s): goal 0.25 ×. For uv, the install as a session's uv makes it,
  copying every file from its cache (a mount of its own: link() fails with EXDEV); the host's
  hard-linking install reads no file and is given in the note.

Each note gives the walk alone (every file read and hashed on two processes, no rules): what is
left of the audit when the rules cost nothing, the floor this code can reach. The audit leaves
the tarballs' manifests it keeps to a process it does not wait for (fork_workers.fork_behind):
that process is asked to finish and waited for after each side, untimed, so that it does not slow the next.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import Row, audit_workdir, load, median  # noqa: E402
from dejima.adapters import fork_workers, packaged, pinned_archives, venv_record  # noqa: E402
from dejima.adapters.findings import FindingStore  # noqa: E402
from dejima.adapters.session_dirs import sessions_dir  # noqa: E402
from dejima.adapters.tree_walk import take_snapshot  # noqa: E402
from dejima.orchestration import exit_audit  # noqa: E402
from dejima.orchestration.exit_audit import Mount, MountState  # noqa: E402
from dejima.ui.console import UI, plain_console  # noqa: E402

DATA = Path(__file__).resolve().parent / "data" / "installs"
GIT = ["git", "-c", "user.name=b", "-c", "user.email=b@example.invalid", "-c", "init.defaultBranch=main",
       "-c", "gc.auto=0"]


def _npm(project: Path) -> list[str]:
    return ["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"]


def _uv(project: Path) -> list[str]:
    """uv from PyPI into a virtualenv of the bench's own (the host need not have it), syncing with
    the interpreter the bench's record of the host's environments is made with (_host_record)."""
    tools = project.parent / "uv-tool"
    if not (tools / "bin" / "uv").exists():
        subprocess.run([sys.executable, "-m", "venv", str(tools)], check=True)
        subprocess.run([str(tools / "bin" / "pip"), "install", "-q", "uv"], check=True)
    return [str(tools / "bin" / "uv"), "sync", "--quiet", "--frozen", "--python", _PYTHON]


# The host's interpreter stands for the session image's python3: uv syncs with it, and the record of
# what its `python3 -m venv` and uv write is made with it (as venv_record.py makes an image's).
_PYTHON = os.path.realpath(getattr(sys, "_base_executable", sys.executable))
HOST_IMAGE = "sha256:" + "0" * 56 + "bench000"  # the id the host's record is kept under


def _host_record(work: Path) -> str:
    """The record of what the host's python3 and the bench's uv write in an environment, made as an
    image's is (venv_probe_script.py, run here by that interpreter with that uv on PATH, instead of
    in a container of the image) and kept where the audit reads an image's: a session's audit holds
    the environment's own files to it, so the bench's audit does what a session's does. The image
    id it is kept under is the one each audited session's state names (_name_image)."""
    script = (packaged.PACKAGE_ROOT / "adapters" / "venv_probe_script.py").read_text()
    env = {**os.environ, "PATH": f"{work / 'uv-tool' / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"}
    probed = subprocess.run([_PYTHON, "-c", script], env=env, check=True, capture_output=True, text=True)
    venv_record.keep(venv_record.facts_of(HOST_IMAGE, probed.stdout))
    return HOST_IMAGE


def _name_image(session_id: str, image: str) -> None:
    """The session's state names its image, as exit_audit.start writes it (the bench audits with
    the start's states in memory, under a session id of each round's own)."""
    directory = sessions_dir() / session_id / "audit"
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "state.json").write_text(json.dumps({"image": image}))


INSTALLS: dict[str, tuple[Callable[[Path], list[str]], str]] = {"npm": (_npm, "node_modules"), "uv": (_uv, ".venv")}
ARCHIVES = {"npm": "tarballs", "uv": "wheels"}
READ = {"npm": "tarball read from npm's cache and inflated",
        "uv": "wheel's archive in uv's cache listed, its RECORD read"}


def _installed(name: str, work: Path, runs: int) -> tuple[Path, list[MountState], int, list[float], list[float]]:
    """A repository with the project committed and its start recorded, then its tree installed
    (the install timed ``runs`` times from a warm cache: the median is what one costs; for uv also
    as a session's uv makes it, each alternated with one: its cache in the session's home, another
    mount than the workspace, where link() fails with EXDEV and uv copies every file)."""
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
    installs, copied = [], []
    for _ in range(runs):
        if name == "uv":
            shutil.rmtree(root / tree)
            copied.append(_timed(lambda: subprocess.run(installing, cwd=root, env={**env, "UV_LINK_MODE": "copy"},
                                                        check=True, stdout=subprocess.DEVNULL)))
        shutil.rmtree(root / tree)
        installs.append(_timed(lambda: subprocess.run(installing, cwd=root, env=env, check=True,
                                                      stdout=subprocess.DEVNULL)))
    return root, states, sum(1 for _ in (root / tree).rglob("*")), installs, copied


@contextmanager
def _home(home: Path) -> Iterator[None]:
    """$HOME for the audit (npm_cache.npm_caches: the host user's cache), only: the state is XDG_STATE_HOME's."""
    saved = os.environ["HOME"]
    os.environ["HOME"] = str(home)
    try:
        yield
    finally:
        os.environ["HOME"] = saved


def _timed(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return (time.perf_counter() - started) * 1000


def _verdict(ratio: float, goal: float) -> str:
    return f"{ratio:.2f} × (goal ≤ {goal:g} ×: {'met' if ratio <= goal else 'MISSED'})"


def _measured(name: str, root: Path, states: list[MountState], files: int, runs: int, store: FindingStore,
              before: float, installs: list[float], copied: list[float]) -> list[Row]:
    status = [*GIT, "-C", str(root), "status", "--porcelain"]
    listing = [*status, "--ignored", "--untracked-files=all"]
    sessions = iter(range(1_000_000))

    image = _host_record(root.parent) if name == "uv" else ""

    def end() -> None:
        session = f"{name}-{next(sessions)}"
        if image:
            _name_image(session, image)
        exit_audit.finish(session, UI(plain_console(io.StringIO())), store, states=states)

    dropping: list[float] = []  # what the session's time holds, taken out of the cold audits' time

    def end_unread() -> None:  # the first audit of these pins, none read before: every tarball inflated now
        dropping.append(_timed(lambda: shutil.rmtree(pinned_archives.manifests_dir(), ignore_errors=True)))
        end()

    def end_cold() -> None:  # the first audit of these pins, read ahead from the cache while the session ran
        def session() -> None:
            shutil.rmtree(pinned_archives.manifests_dir(), ignore_errors=True)
            exit_audit.read_ahead(states)  # as the session's start does
            fork_workers.finish_behind()  # done while the session ran
        dropping.append(_timed(session))
        end()

    first_home = root.parent / f"{name}-first-home"  # a first session's home: no npm cache at the start
    first: dict[str, list[float]] = {"installs": [], "kept": []}

    def end_first() -> None:  # a project's first session: its install fetches the pins while the read ahead waits
        def session() -> None:
            shutil.rmtree(pinned_archives.manifests_dir(), ignore_errors=True)
            shutil.rmtree(first_home, ignore_errors=True)
            first_home.mkdir()
            with _home(first_home):  # the host user's cache is not the session's either
                reading = exit_audit.read_ahead(states)  # as the start does: nothing cached, all awaited
            shutil.rmtree(root / INSTALLS[name][1])
            env = {**os.environ, "npm_config_cache": str(first_home / ".npm")}  # fetched from the registry
            first["installs"].append(_timed(lambda: subprocess.run(INSTALLS[name][0](root), cwd=root, env=env,
                                                                   check=True, stdout=subprocess.DEVNULL)))
            kept = pinned_archives.manifests_dir() / "npm"
            first["kept"].append(len(os.listdir(kept)) if kept.exists() else 0)  # read while it installed
            os.sync()  # the install's writes flushed, as within the session's time after it (the kernel's 30 s)
            # Ended by the end audit, as a session's start leaves it: what it has not read by then (the last
            # look's fetches), the end audit reads, timed.
            exit_audit._reading_ahead.extend(reading)
        dropping.append(_timed(session))
        with _home(first_home):
            end()

    tree = INSTALLS[name][1]
    hashing = f"find {tree} -type f -print0 | xargs -0 -P 2 -n 500 sha256sum"
    cold = name == "npm"  # its start's lockfile pins tarballs the start reads ahead
    sides: dict[str, Callable[[], object]] = {
        "status": lambda: subprocess.run(status, check=True, stdout=subprocess.DEVNULL),
        "audit": end,
        "listing": lambda: subprocess.run(listing, check=True, stdout=subprocess.DEVNULL),
        "hashing": lambda: subprocess.run(hashing, shell=True, cwd=root, check=True, stdout=subprocess.DEVNULL),
        "walk": lambda: take_snapshot(root / tree, previous={}, workers=2),
        "unread": end_unread, **({"cold": end_cold, "first": end_first} if cold else {})}
    samples: dict[str, list[float]] = {side: [] for side in sides}
    for index in range(runs + 1):  # alternated (the order flipped each round), after a warm-up round
        for side in (list(sides) if index % 2 else list(reversed(sides))):
            took = _timed(sides[side])
            fork_workers.finish_behind()  # what the audit left to a process of its own, done before the next side
            if index:
                samples[side].append(took - (dropping[-1] if side in ("cold", "first", "unread") else 0.0))
    m = {side: median(values) for side, values in samples.items()}
    install = median(installs)
    found = store.findings(str(root))
    # A finding above low is given whole: what it could not verify is the point of the row.
    findings = ", ".join(sorted({f"{s.finding.rule} {s.finding.severity} {s.finding.path}"
                                 + (f" ({s.finding.evidence}{''.join(f'; {n}' for n in s.finding.notes)})"
                                    if s.finding.severity not in ("info", "low") else "") for s in found}))
    verified = next((part.strip() for s in found if s.finding.rule in ("B07", "B10")
                     for part in s.finding.evidence.split("; ") if part.startswith("verified ")), "")
    after = load()
    # The goals are against the install as a session makes it: a session's uv copies every file (its
    # cache is a mount of its own, link() fails with EXDEV). The host's hard-linking install, which
    # reads no file, is given in the note: no audit that reads the tree can be a quarter of it.
    anchor, how = (copied, "as a session's uv makes it: copying from its cache") if copied else (installs, "")
    session_install = median(anchor)
    walk = f"the walk alone (every file read and hashed, two processes, no rules) {m['walk']:.0f} ms: " \
        f"{m['walk'] / m['hashing']:.2f} × the hashing, {m['walk'] / session_install:.2f} × the install"
    # No goal against git: it lists the tree's files, reads none of them (the goals are the next rows').
    rows = [Row(f"audit: end of session after a real {name} install, {files // 1000}k files", "ms", m["audit"],
                m["listing"], "git status --porcelain --ignored --untracked-files=all", None,
                samples={"dejima": samples["audit"], "anchor": samples["listing"]},
                note=f"{files} new entries; `git status --porcelain` (which does not look into the ignored tree) "
                     f"{m['status']:.0f} ms; git reads no file of the tree, so no goal here; findings: {findings}",
                load=[before, after]),
            Row(f"audit: end of session after a real {name} install, against hashing every file once", "ms",
                m["audit"], m["hashing"], "sha256sum of every file (2 processes)", 1.5,
                samples={"dejima": samples["audit"], "anchor": samples["hashing"]},
                note=f"{verified or 'no tree verified'}"
                     + f"; the pinned {ARCHIVES[name]}' manifests kept by an earlier audit"
                     + f"; {walk}", load=[before, after])]
    if cold:
        rows.append(Row(f"audit: end of session after a real {name} install, first audit of its pins, against "
                        "hashing every file once", "ms", m["cold"], m["hashing"],
                        "sha256sum of every file (2 processes)", 1.5,
                        samples={"dejima": samples["cold"], "anchor": samples["hashing"]},
                        note=f"every pinned tarball read from npm's cache and inflated while the session ran "
                             f"(exit_audit.read_ahead: the start's lockfile pins them, the cache held them; "
                             f"{verified}); as kept by an earlier audit: {m['audit']:.0f} ms", load=[before, after]))
        pins = len(os.listdir(pinned_archives.manifests_dir() / "npm"))
        rows.append(Row(f"audit: end of session after a real {name} install, a first session: nothing cached at the "
                        "start, its install fetched the pins, against hashing every file once", "ms", m["first"],
                        m["hashing"], "sha256sum of every file (2 processes)", 1.5,
                        samples={"dejima": samples["first"], "anchor": samples["hashing"]},
                        note=f"the read ahead started with an empty cache (a first session's home) and read each "
                             f"pinned tarball as the session's `npm ci` fetched it from the registry: of {pins}, "
                             f"{', '.join(f'{k:.0f}' for k in first['kept'])} kept when the install ended "
                             f"({', '.join(f'{i / 1000:.1f}' for i in first['installs'])} s); the read ahead "
                             "stopped by the end audit, which reads the rest (timed), as a session's",
                        load=[before, after]))
    # npm's worst case has no goal: it reads every tarball's bytes as well as the tree's, two passes where
    # the goal's floor (the hashing) is one; the read ahead, timed in the rows above, is what keeps a
    # session's end from it. uv's wheels are not read ahead: its unread row is the one a session meets.
    worst = ("the worst case, no goal: every pinned tarball read from npm's cache and inflated by the end audit, "
             "none by the read ahead (a session that ended before it read them): the tree's bytes and every "
             "tarball's, two passes where the goal's floor is one" if cold else
             f"every pinned {READ[name]} by the end audit (no read ahead for {ARCHIVES[name]})")
    rows.append(Row(f"audit: end of session after a real {name} install, first audit of its pins, none read "
                    "during the session, against hashing every file once", "ms", m["unread"], m["hashing"],
                    "sha256sum of every file (2 processes)", None if cold else 1.5,
                    samples={"dejima": samples["unread"], "anchor": samples["hashing"]}, note=worst,
                    load=[before, after]))
    slower = max(m["audit"], m["unread"])
    rows.append(Row(f"audit: end of session after a real {name} install, against the install itself", "ms",
                    slower, session_install, f"the install ({name}, warm cache{', ' + how if how else ''})", 0.25,
                    samples={"dejima": samples["unread"], "anchor": anchor},
                    note=f"the slower of the audits above; {len(anchor)} install(s): "
                         f"{', '.join(f'{i:.0f}' for i in anchor)} ms"
                         + (f"; on the host, hard-linking from uv's cache (no file read, the session cannot do it), "
                            f"{install:.0f} ms: {slower / install:.2f} ×" if copied else "")
                         + f"; {walk}", load=[before, after]))
    return rows


def run(runs: int, only: tuple[str, ...] = tuple(INSTALLS)) -> list[Row]:
    rows = []
    with audit_workdir("dejima-installs-bench-") as (work, store):
        for name in only:
            before = load()
            try:
                root, states, files, installs, copied = _installed(name, work, 1 if name == "npm" else runs)
            except (OSError, subprocess.CalledProcessError) as exc:
                rows.append(Row(f"audit: end of session after a real {name} install", "ms", None, None,
                                "the install", 0.25, note=f"not measured: the install failed ({exc})"))
                continue
            rows.extend(_measured(name, root, states, files, runs, store, before, installs, copied))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--only", choices=list(INSTALLS), action="append", help="this install only (repeatable)")
    args = parser.parse_args()
    rows = run(args.runs, tuple(args.only or INSTALLS))
    for row in rows:
        verdict = "-" if row.ratio is None else _verdict(row.ratio, row.goal) if row.goal is not None \
            else f"{row.ratio:.2f} × (no goal)"
        shown = f"{row.dejima:.0f} ms, {row.anchor_name} {row.anchor:.0f} ms, {verdict}" \
            if row.dejima is not None and row.anchor else "-"
        print(f"{row.measurement}: {shown}; {row.note}")
    return 1 if any(row.passed is False for row in rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
