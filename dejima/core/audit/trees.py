"""Dependency trees, Python environments and bytecode (research B07, B10, B11), and caches through
caches.py (M01): places with thousands of files, reported as one finding per tree that says what to
do (reinstall on the host), with the few files that run at every start (.pth, sitecustomize,
activate) named one by one.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from dejima.core.audit.caches import cache_mount_findings, changes_value, home_cache_findings, in_package_cache
from dejima.core.audit.installs import TOOL_STATE, npm_tampering, python_tampering, recorded
from dejima.core.audit.isolation import judged
from dejima.core.audit.model import Finding, View, finding
from dejima.core.audit.npm_verify import npm_findings
from dejima.core.snapshot import Change

_DEPENDENCIES = re.compile(r"^(.*?(?:^|/)(?:node_modules|vendor|\.pnpm))/")
_TARGET = re.compile(r"^(.*?(?:^|/)target)/")  # cargo's build output, beside a Cargo.toml
_ENVIRONMENT = re.compile(r"^(.*?(?:^|/)(?:\.venv|venv|\.tox|\.nox|__pypackages__|\.conda))/")
_STARTUP = re.compile(r"(?:\.pth|/sitecustomize\.py|/usercustomize\.py|/bin/activate[^/]*|/pyvenv\.cfg|"
                      r"/pip\.conf)\Z")
_PTH_CODE = re.compile(r"^\s*import[\s\t]", re.MULTILINE)
_PYC = re.compile(r"(?:^|/)__pycache__/[^/]+\.pyc\Z|\.pyc\Z")
_LISTED = 5


def _summary(paths: list[str]) -> str:
    shown = ", ".join(paths[:_LISTED])
    return shown + (f" and {len(paths) - _LISTED} more" if len(paths) > _LISTED else "")


def _in_place(change: Change, view: View) -> bool:
    """Modified where it lies rather than installed anew: a reinstall creates files, which changes
    their directory; a tamperer rewrites a file and leaves its directory as it was. (Inode numbers
    cannot tell: the filesystem reuses a freed one at once.)"""
    if change.what in ("mode", "owner", "link-target"):
        return True
    parent = change.path.rpartition("/")[0]
    old, new = view.before.get(parent), view.after.get(parent)
    return change.what == "modified" and old is not None and new is not None and \
        (old.inode, old.ctime_ns) == (new.inode, new.ctime_ns)


def environment_root(path: str, view: View) -> str | None:
    """The Python environment a path lies in: a conventional name, or any directory with a
    pyvenv.cfg (a venv called env/ or .env/ is still one)."""
    match = _ENVIRONMENT.match(path)
    if match:
        return match.group(1)
    return view.directory_above("environment", path.rpartition("/")[0], lambda directory: _has_pyvenv(directory, view),
                                outermost=True)


def _has_pyvenv(directory: str, view: View) -> bool:
    config = f"{directory}/pyvenv.cfg"
    return config in view.after or config in view.before


def _group(view: View, root_of: Callable[[str], str | None]) -> dict[str, list[Change]]:
    groups: dict[str, list[Change]] = {}
    for change in view.changes:
        root = root_of(change.path)
        if root is not None:
            groups.setdefault(root, []).append(change)
    return groups


def _dependency_root(path: str) -> str | None:
    match = _DEPENDENCIES.match(path)
    return match.group(1) if match else None


def build_root(path: str, view: View) -> str | None:
    """Cargo's target directory a path lies in (a target/ beside a Cargo.toml)."""
    match = _TARGET.match(path)
    if match is None:
        return None
    project = match.group(1).rpartition("/")[0]
    manifest = f"{project}/Cargo.toml" if project else "Cargo.toml"
    return match.group(1) if manifest in view.after or manifest in view.before else None


def _build_output(view: View) -> list[Finding]:
    """Cargo rewrites its target directory in place at every build and hard-links its outputs: one
    low finding per directory (cargo may run what is there without building it again)."""
    return [finding("B07", "low", root, f"build output written in the session ({len({c.path for c in changes})} "
                    "entries); `cargo clean` on the host before running what it holds", changes_value(changes),
                    remedy="reinstall")
            for root, changes in _group(view, lambda path: build_root(path, view)).items()]


def _dependencies(view: View) -> list[Finding]:
    """Each dependency tree judged on its own (isolation): one that fails is a finding there."""
    return [f for root, changes in _group(view, _dependency_root).items()
            if environment_root(root + "/x", view) is None
            for f in judged(view, "B07", root, _dependency_tree, root, changes, view)]


def _dependency_tree(root: str, changes: list[Change], view: View) -> list[Finding]:
    in_place = [f"{c.path}: modified in place, not installed anew" for c in changes if _in_place(c, view)
                and c.path[len(root) + 1:] not in TOOL_STATE]
    tampered = in_place + npm_tampering(root, changes, view)
    if (verified := npm_findings(root, changes, view, tampered)) is not None:  # held to its lockfile's pins
        return verified
    if tampered:
        return [finding("B07", "high", root, f"{len(tampered)} change(s) no install makes: {_summary(tampered)}; "
                        f"delete {root} and reinstall on the host", changes_value(changes), remedy="reinstall")]
    return [finding("B07", "low", root, f"dependency tree rewritten ({len({c.path for c in changes})} entries, e.g. "
                    "an install in the session); reinstall on the host to be sure", changes_value(changes),
                    remedy="reinstall")]


def _environments(view: View) -> list[Finding]:
    """Python environments: one finding each, and the start-up files changed in one that was there.
    In the session's home (the workflows put uv's and poetry's environments there) only sessions run
    them, inside the boundary: an ordinary install is low, start-up code or tampering medium."""
    return [f for root, changes in _group(view, lambda path: environment_root(path, view)).items()
            for f in judged(view, "B10", root, _environment, root, changes, view)]


def _environment(root: str, changes: list[Change], view: View) -> list[Finding]:
    home = view.kind == "home"
    found = []
    tampered = python_tampering(root, changes, view)
    created = f"{root}/pyvenv.cfg" not in view.before and root not in view.before
    rest = []
    for change in changes:
        new = change.after
        if created or new is None or new.kind != "file" or not _STARTUP.search(change.path) or \
                change.path.endswith(".pth") and not _PTH_CODE.search(view.text(change.path) or "") or \
                recorded(change.path, root, view):  # what a distribution installs: part of its install
            rest.append(change)
            continue
        found.append(finding("B10", "medium" if home else "critical", change.path, "runs at every start of "
                             f"this Python environment ({change.what})", new.sha256 or "", remedy="reinstall"))
    paths = sorted({c.path for c in rest})
    where = "" if home else " on the host"
    if tampered:
        found.append(finding("B10", "medium" if home else "high", root, f"{len(tampered)} change(s) no installer "
                             f"makes: {_summary(tampered)}; recreate the environment{where}",
                             changes_value(changes), remedy="reinstall"))
    elif created:  # all of it is new, its start-up files included (uv sync, venv)
        what = "the session's home: sessions run it, the host does not" if home else \
            "the session; its start-up files (.pth, activate) run code: recreate it on the host"
        found.append(finding("B10", "low" if home else "high", root, f"a Python environment created in {what} "
                             f"({len(paths)} entries)", changes_value(changes), remedy="reinstall"))
    elif rest:
        found.append(finding("B10", "low" if home else "high", root, f"Python environment changed ({len(paths)} "
                             f"entries: {_summary(paths)}); recreate it{where}", changes_value(rest),
                             remedy="reinstall"))
    return found


def _bytecode(view: View) -> list[Finding]:
    """Sessions run with PYTHONDONTWRITEBYTECODE, so Python itself writes no bytecode there: a .pyc
    written in a session was written on purpose, and Python trusts one whose header matches its
    source's mtime and size (research B11)."""
    written = [c for c in view.changes if c.what in ("added", "modified") and c.after is not None
               and c.after.kind == "file" and _PYC.search(c.path) and not in_tree(c.path, view)]
    if not written:
        return []
    paths = sorted(c.path for c in written)
    return [finding("B11", "high", paths[0], f"{len(paths)} bytecode file(s) written in the session "
                    f"({_summary(paths)}): Python may run them instead of the source; delete them",
                    changes_value(written), remedy="restore")]


def tree_findings(view: View) -> list[Finding]:
    """Each tree judged on its own (isolation), and each kind of tree: one that fails is a finding there."""
    if view.kind == "cache":
        return judged(view, "M01", "", cache_mount_findings, view)
    if view.kind == "home":
        return [*judged(view, "M01", "", home_cache_findings, view), *_environments(view)]
    return [*_dependencies(view), *_environments(view), *judged(view, "B07", "", _build_output, view),
            *judged(view, "B11", "", _bytecode, view)]


def in_tree(path: str, view: View) -> bool:
    """Inside a dependency tree, a Python environment, a build output directory or a package cache
    (their own rules cover it)."""
    return bool(_DEPENDENCIES.match(path)) or in_package_cache(path, view.kind) or \
        environment_root(path, view) is not None or (view.kind == "workspace" and build_root(path, view) is not None)
