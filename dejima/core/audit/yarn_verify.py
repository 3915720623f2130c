"""A yarn (1.x) tree verified against what ``yarn.lock`` pinned before the session (issue 32).

yarn 1 lays node_modules out as npm does (hoisted, nested node_modules), records its install in
``node_modules/.yarn-integrity``, and pins each package in yarn.lock by name and version with the
tarball's ``integrity``. yarn.lock names no paths, so a package directory is found in it by its
name there and the version its package.json declares; that package.json is itself one of the
files compared with the tarball, so a version rewritten to pick another pin is found. The tarball
is read from yarn's cache (each entry keeps it as ``.yarn-tarball.tgz``) or npm's (the same
integrity names the same bytes), counted only when its bytes hash to the integrity (the adapter,
dejima/adapters/yarn_cache.py):

- a file that is not the tarball's, a file the tarball does not hold, a link inside a package, a
  package (name and version) yarn.lock does not list, a file directly in node_modules, a ``.bin``
  entry that is not a link to a bin its package declares: each named (high);
- what cannot be verified: no yarn.lock (v1) at the start, a package pinned in the session, a
  package pinned without an integrity, a tarball in no cache, files a package's own install script
  writes (its package.json has one): said so (medium), with the clean install that would verify it
  (``yarn install --frozen-lockfile``).

What it proves, and what it cannot, is what npm_verify.py says for npm trees. yarn 2 and later
(a YAML yarn.lock with ``__metadata``, ``.yarn-state.yml``) and pnpm are not verified: installs.py
judges them.
"""

from __future__ import annotations

import posixpath
from typing import NamedTuple

from dejima.core.audit.caches import changes_value
from dejima.core.audit.model import View
from dejima.core.audit.npm_verify import package_key
from dejima.core.audit.pinned import TreeJudgement, TreeVerdict, Wanted, hold, lockfile_above
from dejima.core.audit.treeroots import workspace_package
from dejima.core.snapshot import Change

LOCKFILE = "yarn.lock"
RECORD = ".yarn-integrity"
YARN_PREFIX = "yarn "
CLEAN_INSTALL = "yarn install --frozen-lockfile"
EVIDENCE = "yarn's tree: "  # the evidence of its findings begins with these words (restore names the command)
_V1 = "# yarn lockfile v1"
_CONTENT = ("added", "modified", "type", "link-target")
_INSTALL_SCRIPTS = ("preinstall", "install", "postinstall")


class _Pin(NamedTuple):
    resolved: str
    integrity: str


def yarn_key(name: str, resolved: str, integrity: str) -> str:
    """The key the artifacts' reader is asked for a tarball by: yarn's cache names an entry by the
    package and the hash in ``resolved``'s fragment; the integrity (last: it may hold spaces) is
    what the bytes must hash to."""
    return f"{YARN_PREFIX}{name} {resolved.partition('#')[2] or '-'} {integrity}"


def yarn_of_key(key: str) -> tuple[str, str, str]:
    """(name, the hash yarn's cache names the entry by, integrity) of a yarn key."""
    name, fragment, integrity = key[len(YARN_PREFIX):].split(" ", 2)
    return name, fragment, integrity


def _name(pattern: str) -> str:
    """The dependency's name in a yarn.lock pattern: ``a@^1``, ``@s/a@~2``, ``alias@npm:real@1``."""
    at = pattern.find("@", 1)
    return pattern[:at] if at > 0 else pattern


def parse(text: str) -> dict[tuple[str, str], _Pin] | None:
    """(name, version) -> its pin, from a yarn 1 lockfile; None for any other text."""
    if _V1 not in text[:400]:
        return None
    pins: dict[tuple[str, str], _Pin] = {}
    names: list[str] = []
    fields: dict[str, str] = {}

    def flush() -> None:
        for name in names:
            if "version" in fields:
                pins[(name, fields["version"])] = _Pin(fields.get("resolved", ""), fields.get("integrity", ""))

    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if not line[0].isspace():
            flush()
            names, fields = [_name(p.strip().strip('"')) for p in line.rstrip().rstrip(":").split(",")], {}
        elif line.startswith("  ") and not line.startswith("   "):
            key, _, value = line.strip().partition(" ")
            fields[key.strip('"')] = value.strip().strip('"')
    flush()
    return pins


def _written(change: Change) -> bool:
    return change.after is not None and change.what in _CONTENT and change.after.kind != "dir" and \
        not change.path.endswith(f"/{RECORD}")


def verify(tree: str, changes: list[Change], view: View) -> TreeVerdict | None:
    """The session's changes in a yarn 1 tree held to yarn.lock at the start; None when the tree is
    not yarn 1's."""
    if f"{tree}/{RECORD}" not in view.after and f"{tree}/{RECORD}" not in view.before:
        return None
    lockfile = lockfile_above(tree, view, (LOCKFILE,))
    end = parse(view.text(lockfile) or "") if lockfile is not None else None
    if lockfile is not None and lockfile in view.after and end is None:
        return None  # yarn 2 or later: not verified here
    verdict = TreeVerdict(lockfile or LOCKFILE)
    start = parse(view.text(lockfile, "before") or "") if lockfile is not None else None
    if start is None or lockfile is None:
        if any(_written(change) for change in changes):
            verdict.unverified.append(f"{verdict.lockfile} " + (
                "was not there at the session's start" if lockfile not in view.before else
                "at the session's start was not kept, or is not yarn 1's"))
        return verdict
    _YarnCheck(verdict, tree, start, end or {}, view).run(changes)
    return verdict


class _YarnCheck:
    def __init__(self, verdict: TreeVerdict, tree: str, start: dict[tuple[str, str], _Pin],
                 end: dict[tuple[str, str], _Pin], view: View) -> None:
        self.verdict, self.tree, self.start, self.end, self.view = verdict, tree, start, end, view
        self.base = tree.rpartition("/")[0]
        self.wanted: dict[str, list[Wanted]] = {}
        self.unpinned: dict[str, str] = {}

    def directory(self, key: str) -> str:
        return f"{self.base}/{key}" if self.base else key

    def listed(self, key: str) -> bool:
        return f"{self.directory(key)}/package.json" in self.view.after

    def run(self, changes: list[Change]) -> None:
        for change in changes:
            if _written(change):
                self.change(change)
        self.verdict.unverified.extend(f"{package}: {reason}" for package, reason in sorted(self.unpinned.items()))
        hold(self.verdict, self.wanted, self.view, "tarball")

    def change(self, change: Change) -> None:
        new, path = change.after, change.path
        assert new is not None
        inside = path[len(self.tree) + 1:]
        relative = path[len(self.base) + 1:] if self.base else path
        if inside.startswith(".bin/") and inside.count("/") == 1:
            self.bin_link(path, new.kind, new.target)
            return
        if new.kind == "symlink" and (linked := package_key(relative + "/x", self.listed)) == relative:
            self.workspace_link(path, linked, new.target)
            return
        key = package_key(relative, self.listed)
        if key is None or key.rpartition("/")[2].startswith("."):
            if inside.startswith("."):  # a tool's own (.cache) in the tree
                self.verdict.unverified.append(f"{path}: in no package (a tool's own; not verified)")
            else:
                self.verdict.problems.append(f"{path}: in node_modules, where no package puts a file")
            return
        package = self.directory(key)
        manifest = self.view.json_object(f"{package}/package.json") or {}
        name, version = key.rpartition("node_modules/")[2], str(manifest.get("version", ""))
        pin = self.start.get((name, version))
        if pin is None and (name, version) in self.end:
            pin = self.end[(name, version)]  # the session's pin: held to it, but said
            self.unpinned.setdefault(package, f"{name}@{version} pinned in the session (its yarn.lock entry is new)")
        if pin is None:
            self.verdict.problems.append(f"{path}: in {package}, {name}@{version or '?'}, a package yarn.lock "
                                         "does not list")
        elif new.kind != "file":
            self.verdict.problems.append(f"{path}: a {new.kind}, where yarn writes the tarball's files only")
        elif not pin.integrity:
            self.unpinned.setdefault(package, f"pinned without an integrity (resolved: {pin.resolved})")
        else:
            scripts = manifest.get("scripts")
            scripted = isinstance(scripts, dict) and any(s in scripts for s in _INSTALL_SCRIPTS)
            self.wanted.setdefault(yarn_key(name, pin.resolved, pin.integrity), []).append(
                Wanted(path, path[len(package) + 1:], new.sha256, package, scripted))

    def workspace_link(self, path: str, key: str, target: str | None) -> None:
        """A link where a package goes: yarn's link to the workspace package of that name."""
        resolved = posixpath.normpath(posixpath.join(posixpath.dirname(path), target or ""))
        manifest = self.view.json_object(f"{resolved}/package.json") or {}
        if target is None or target.startswith("/") or not workspace_package(resolved, self.view) or \
                manifest.get("name") != key.rpartition("node_modules/")[2]:
            self.verdict.problems.append(f"{path}: a link where yarn puts a package, not to the workspace package "
                                         "of that name")

    def bin_link(self, path: str, kind: str, target: str | None) -> None:
        """``.bin/NAME``: yarn's link to a bin that the package it points into (installed, or one of
        the project's workspace packages) declares as NAME."""
        name = path.rpartition("/")[2]
        if kind != "symlink" or target is None:
            self.verdict.problems.append(f"{path}: a {kind} where yarn makes a link to a package's bin")
            return
        resolved = posixpath.normpath(posixpath.join(posixpath.dirname(path), target))
        package: str | None = None
        if target.startswith("/"):
            pass
        elif resolved.startswith(self.tree + "/"):
            key = package_key(resolved[len(self.base) + 1:] if self.base else resolved, self.listed)
            package = self.directory(key) if key is not None else None
        else:  # a workspace package's bin
            package = self.view.directory_above("workspace-package", resolved.rpartition("/")[0],
                                                lambda directory: workspace_package(directory, self.view))
        manifest = self.view.json_object(f"{package}/package.json") if package is not None else None
        bins = manifest.get("bin") if manifest is not None else None
        if isinstance(bins, str) and manifest is not None:
            bins = {str(manifest.get("name", "")).rpartition("/")[2]: bins}
        declared = bins.get(name) if isinstance(bins, dict) else None
        where = resolved[len(package) + 1:] if package is not None else ""
        if not isinstance(declared, str) or posixpath.normpath(declared) != posixpath.normpath(where):
            self.verdict.problems.append(f"{path}: a link to {target}, not a bin its package declares as {name}")


def reinstaller(tree: str, evidence: str) -> str | None:
    """yarn's clean install, for a yarn tree's finding (restore offers it)."""
    return CLEAN_INSTALL if evidence.startswith(EVIDENCE) else None


def yarn_judgement(tree: str, changes: list[Change], view: View) -> TreeJudgement | None:
    """A yarn 1 tree verified against its lockfile, its one finding waiting for what the other
    checks find (``TreeJudgement.finding``); None when the tree is not yarn 1's."""
    verdict = verify(tree, changes, view)
    if verdict is None:
        return None
    project = tree.rpartition("/")[0]
    remedy = f"on the host: rm -r {tree} && {CLEAN_INSTALL}" + (f" (in {project})" if project else "")
    idle = None if any(_written(change) for change in changes) else \
        f"changed ({len({c.path for c in changes})} entries) with no package file written: nothing to verify"
    return TreeJudgement(tree, verdict, changes_value(changes), remedy, idle=idle, lead=EVIDENCE)
