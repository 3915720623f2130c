"""An npm tree verified against what its lockfile pinned before the session (research B07).

``package-lock.json`` as the session's start kept it pins each package by ``integrity`` (an SRI
hash of its tarball); npm's cache is addressed by that very hash, so the tarball it holds is the
pinned one once its bytes hash to it (the adapter, dejima/adapters/npm_cache.py, checks). npm
writes a package's files as the tarball holds them (npm 7 and later keep package.json too), so
every file the session wrote in a package is compared with the tarball's entry of that path:

- a file whose content is not the tarball's, a file the tarball does not hold, a link inside a
  package, a package directory the lockfile does not list, a ``.bin`` entry that is not npm's link
  to a ``bin`` the lockfile records for that package, ``node_modules/.package-lock.json`` entries
  that are not the lockfile's: each named (high);
- what cannot be verified: no lockfile at the start (or one npm cannot follow), a package pinned
  anew in the session (its lockfile entry's pin changed: the session chose it), a package pinned
  without an integrity, a tarball the caches do not hold: said so (medium), with what would
  verify it (a clean install on the host, ``npm ci``).

What it proves: that every file the session wrote in the tree is, byte for byte, the content of
the tarball the lockfile pinned before the session. What it cannot: files the session did not
change are as they were at the start (the audit judges the session, not the tree's past); tools'
own directories in the tree (``.cache``) hold no package and are only named; pnpm and yarn trees
are judged by installs.py alone.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Callable
from dataclasses import dataclass, field

from dejima.core.audit.caches import changes_value
from dejima.core.audit.model import Artifact, Finding, View, finding
from dejima.core.snapshot import Change

LOCKFILES = ("npm-shrinkwrap.json", "package-lock.json")
CLEAN_INSTALL = "npm ci"
# Another package manager's tree: its layout and state are not npm's (installs.py judges it).
_OTHER_MANAGERS = (".modules.yaml", ".pnpm", ".yarn-integrity", ".yarn-state.yml")
_PIN = ("version", "resolved", "integrity", "link")
_LISTED = 10
_CONTENT = ("added", "modified", "type", "link-target")


@dataclass
class NpmVerdict:
    lockfile: str
    problems: list[str] = field(default_factory=list)  # what no install from the lockfile makes
    unverified: list[str] = field(default_factory=list)  # what cannot be held to a pin, and why
    files: int = 0
    packages: set[str] = field(default_factory=set)


def _lockfile(tree: str, view: View) -> str | None:
    """The lockfile that governs a node_modules tree: beside it, or in a directory above (a
    workspace package's tree follows the root's lockfile); at the start or the end."""
    directory = tree.rpartition("/")[0]
    while True:
        for name in LOCKFILES:
            path = f"{directory}/{name}" if directory else name
            if path in view.before or path in view.after:
                return path
        if not directory:
            return None
        directory = directory.rpartition("/")[0]


def _packages(text: str | None) -> dict[str, dict[str, object]] | None:
    try:
        document = json.loads(text) if text is not None else None
    except (ValueError, RecursionError):
        return None
    packages = document.get("packages") if isinstance(document, dict) else None
    if not isinstance(packages, dict):
        return None
    return {str(k): v for k, v in packages.items() if isinstance(v, dict)}


def _pin(entry: dict[str, object] | None) -> tuple[object, ...] | None:
    return None if entry is None else tuple(entry.get(key) for key in _PIN)


def _package_key(relative: str, listed: Callable[[str], bool]) -> str | None:
    """``node_modules/a/node_modules/@s/b`` for a path inside that package (relative to the
    lockfile's directory): the outermost package, then each nested ``node_modules/x`` that the
    lockfile lists (a package's own files may hold a directory called node_modules: resolve's test
    fixtures); None for a path directly in node_modules. A workspace package's own tree is keyed
    from there: ``packages/a/node_modules/b``."""
    at = 0 if relative.startswith("node_modules/") else relative.find("/node_modules/") + 1
    if at < 0 or at == 0 and not relative.startswith("node_modules/"):
        return None
    first, rest = _first_package(relative[at:])
    if first is None:
        return None
    key = relative[:at] + first
    while rest.startswith("node_modules/"):
        nested, deeper = _first_package(rest)
        if nested is None or not listed(f"{key}/{nested}"):
            break
        key, rest = f"{key}/{nested}", deeper
    return key


def _first_package(relative: str) -> tuple[str | None, str]:
    """(``node_modules/a`` or ``node_modules/@s/a``, the rest of the path) for a path in it."""
    parts = relative.split("/")
    size = 3 if parts[1].startswith("@") else 2
    if len(parts) <= size:
        return None, ""
    return "/".join(parts[:size]), "/".join(parts[size:])


def _pinned_by(key: str, packages: dict[str, dict[str, object]]) -> str:
    """The package whose tarball holds ``key``'s files: itself, or for a bundled dependency
    (``inBundle``) the package above it that bundles it."""
    while packages.get(key, {}).get("inBundle"):
        parent = key.rpartition("/node_modules/")[0]
        if not parent or parent not in packages:
            break
        key = parent
    return key


def verify(tree: str, changes: list[Change], view: View) -> NpmVerdict | None:
    """The session's changes in an npm tree held to its lockfile at the start; None when the
    tree is not npm's (pnpm, yarn)."""
    if not tree.endswith("node_modules") or any(f"{tree}/{name}" in view.after or f"{tree}/{name}" in view.before
                                                for name in _OTHER_MANAGERS):
        return None
    lockfile = _lockfile(tree, view)
    if lockfile is None and f"{tree}/.package-lock.json" not in view.after:
        return None  # not npm's, as far as anything says
    verdict = NpmVerdict(lockfile or "package-lock.json")
    start = _packages(view.text(lockfile, "before")) if lockfile is not None else None
    if start is None or lockfile is None:
        if any(_written(change, tree) for change in changes):  # else npm only rewrote its own state
            verdict.unverified.append(f"{verdict.lockfile} " + (
                "was not there at the session's start" if lockfile not in view.before else
                "at the session's start was not kept or has no per-package entries (lockfileVersion 1)"))
        return verdict
    end = _packages(view.text(lockfile)) if lockfile in view.after else None
    base = lockfile.rpartition("/")[0]
    _Check(verdict, tree, base, start, end or {}, view).run(changes)
    return verdict


def _written(change: Change, tree: str) -> bool:
    """Whether a change wrote something in the tree other than npm's record of it."""
    return change.after is not None and change.what in _CONTENT and change.after.kind != "dir" and \
        change.path != f"{tree}/.package-lock.json"


class _Check:
    """One tree's changes against the lockfile's pins at the start (``start``) and at the end
    (``end``: for what the session pinned itself), the tarballs asked for at once."""

    def __init__(self, verdict: NpmVerdict, tree: str, base: str, start: dict[str, dict[str, object]],
                 end: dict[str, dict[str, object]], view: View) -> None:
        self.verdict, self.tree, self.base, self.start, self.end, self.view = verdict, tree, base, start, end, view
        # integrity -> (path, in package, sha256, whether its package runs an install script, package)
        self.wanted: dict[str, list[tuple[str, str, str | None, bool, str]]] = {}
        self.unpinned: dict[str, str] = {}  # package key -> why it cannot be verified
        self.anew: dict[str, bool] = {}  # package key -> whether the session pinned it anew (asked per file)

    def listed(self, key: str) -> bool:
        return key in self.start or key in self.end

    def relative(self, path: str) -> str:
        return path[len(self.base) + 1:] if self.base else path

    def run(self, changes: list[Change]) -> None:
        for change in changes:
            if change.after is not None and change.what in _CONTENT:
                self.change(change.path, change)
        for key, reason in sorted(self.unpinned.items()):
            self.verdict.unverified.append(f"{self.base + '/' if self.base else ''}{key}: {reason}")
        self.compare()

    def change(self, path: str, change: Change) -> None:
        new = change.after
        assert new is not None
        inside = path[len(self.tree) + 1:]
        relative = self.relative(path)
        name = relative.rpartition("/")[2]
        parent = relative.rpartition("/")[0]
        if inside == ".package-lock.json":
            self.hidden_lockfile(path)
        elif parent.endswith("node_modules/.bin") or parent == "node_modules/.bin":
            self.bin_link(path, new.kind, new.target)
        elif new.kind == "dir":
            return
        elif (key := _package_key(relative + "/x" if new.kind == "symlink" else relative, self.listed)) is None:
            if name.startswith("."):  # a tool's own directory or file in the tree (.cache, .vite)
                self.verdict.unverified.append(f"{path}: in no package (a tool's own; not verified)")
            else:
                self.verdict.problems.append(f"{path}: in node_modules, where no package puts a file")
        elif key.endswith("node_modules/.bin") and relative == key:  # the directory itself, not a directory
            self.verdict.problems.append(f"{path}: a {new.kind} where npm makes its .bin directory")
        elif key.rpartition("/")[2].startswith(".") or "/.bin/" in f"/{key}/":
            self.verdict.unverified.append(f"{path}: in no package (a tool's own; not verified)")
        elif key not in self.start and key not in self.end:
            self.verdict.problems.append(f"{path}: in {key}, a package the lockfile does not list")
        elif (self.start.get(key) or self.end[key]).get("link"):
            self.workspace_link(path, key, self.start.get(key) or self.end[key], new.kind, new.target, relative)
        elif key in self.end and self.pinned_anew(key):
            # Pinned by the session itself: held to its new pin (a file that differs is still
            # tampering), but what the pin names is the session's choice (the lockfile's own finding).
            self.unpinned.setdefault(key, "pinned in the session (its lockfile entry is new or changed)")
            self.package_file(path, key, relative, new.kind, new.sha256, self.end)
        elif key not in self.end and self.end:
            self.unpinned.setdefault(key, "no longer in the lockfile")
        else:
            self.package_file(path, key, relative, new.kind, new.sha256, self.start)

    def pinned_anew(self, key: str) -> bool:
        """Whether the end's lockfile pins ``key`` (listed there) otherwise than the start's."""
        anew = self.anew.get(key)
        if anew is None:
            anew = self.anew[key] = _pin(self.end[key]) != _pin(self.start.get(key))
        return anew

    def package_file(self, path: str, key: str, relative: str, kind: str, sha256: str | None,
                     packages: dict[str, dict[str, object]]) -> None:
        owner = _pinned_by(key, packages)
        integrity = packages[owner].get("integrity")
        if kind != "file":
            self.verdict.problems.append(f"{path}: a {kind}, where npm writes the tarball's files only")
        elif not isinstance(integrity, str) or not integrity:
            resolved = packages[owner].get("resolved")
            self.unpinned.setdefault(owner, f"pinned without an integrity (resolved: {resolved})")
        else:
            scripted = bool(packages[owner].get("hasInstallScript"))
            self.wanted.setdefault(integrity, []).append((path, relative[len(owner) + 1:], sha256, scripted, owner))

    def compare(self) -> None:
        artifacts = self.view.artifacts
        got: dict[str, Artifact | str] = artifacts(sorted(self.wanted)) if artifacts is not None and self.wanted \
            else {}
        for integrity, files in self.wanted.items():
            artifact = got.get(integrity, "no npm cache to read it from")
            if isinstance(artifact, str):
                self.verdict.unverified.append(f"{len(files)} file(s) of {_package_of(files[0][0])}: {artifact}")
                continue
            built: dict[str, int] = {}
            for path, inside, sha256, scripted, owner in files:
                expected = artifact.files.get(inside)
                if expected is not None and sha256 == expected:
                    self.verdict.files += 1
                    self.verdict.packages.add(owner)
                elif scripted:  # its install script writes in it (esbuild's binary, node-gyp's build/)
                    built[_package_of(path)] = built.get(_package_of(path), 0) + 1
                elif expected is None:
                    self.verdict.problems.append(f"{path}: a file its package's tarball does not hold")
                else:
                    self.verdict.problems.append(f"{path}: not the content of its package's tarball")
            self.verdict.unverified.extend(f"{count} file(s) of {package} that are not its tarball's, as its install "
                                           "script (the lockfile records one) may write them"
                                           for package, count in sorted(built.items()))

    def bin_link(self, path: str, kind: str, target: str | None) -> None:
        """``.bin/NAME``: npm's link to the ``bin`` the lockfile records for NAME in that package."""
        name = path.rpartition("/")[2]
        if kind != "symlink" or target is None:
            self.verdict.problems.append(f"{path}: a {kind} where npm makes a link to a package's bin")
            return
        resolved = posixpath.normpath(posixpath.join(posixpath.dirname(path), target))
        inside = not target.startswith("/") and (not self.base or resolved.startswith(self.base + "/"))
        key = _package_key(self.relative(resolved), self.listed) if inside else None
        entry = self.start.get(key) if key is not None else None
        if key is not None and key in self.end and _pin(self.end[key]) != _pin(entry):
            entry = self.end[key]  # pinned in the session: its bin as the session's lockfile says, and unverified
            self.unpinned.setdefault(key, "pinned anew in the session (its lockfile entry changed)")
        bins = entry.get("bin") if entry is not None else None
        where = self.relative(resolved)[len(key) + 1:] if key is not None else ""
        declared = bins.get(name) if isinstance(bins, dict) else None
        if not isinstance(declared, str) or posixpath.normpath(declared) != posixpath.normpath(where):
            self.verdict.problems.append(f"{path}: a link to {target}, not a bin the lockfile records for {name}")

    def workspace_link(self, path: str, key: str, entry: dict[str, object], kind: str, target: str | None,
                       relative: str) -> None:
        resolved = entry.get("resolved")
        linked = posixpath.normpath(posixpath.join(posixpath.dirname(relative), target or ""))
        if relative != key or kind != "symlink" or target is None or target.startswith("/") or \
                linked != posixpath.normpath(str(resolved)):
            self.verdict.problems.append(f"{path}: not the workspace link the lockfile records for {key}")

    def hidden_lockfile(self, path: str) -> None:
        """npm's record of the tree (node_modules/.package-lock.json) must say what the lockfile
        says: npm trusts it instead of reading the tree again."""
        hidden = _packages(self.view.text(path))
        if hidden is None:
            self.verdict.problems.append(f"{path}: not a lockfile npm reads")
            return
        for key, entry in sorted(hidden.items()):
            pinned = self.start.get(key) if key not in self.end or _pin(self.end[key]) == _pin(self.start.get(key)) \
                else self.end.get(key)
            if pinned is None or any(entry.get(k) != pinned.get(k) for k in _PIN if k in entry or k in pinned):
                self.verdict.problems.append(f"{path}: its entry {key} is not the lockfile's")


def _package_of(path: str) -> str:
    head, marker, rest = path.rpartition("node_modules/")
    parts = rest.split("/")
    return head + marker + "/".join(parts[:2] if parts[0].startswith("@") else parts[:1])


def _listed(items: list[str]) -> str:
    shown = "; ".join(items[:_LISTED])
    return shown + (f"; and {len(items) - _LISTED} more" if len(items) > _LISTED else "")


def clean_install(tree: str) -> str:
    """What reinstalls a tree as its lockfile says, in words (for the finding)."""
    project = tree.rpartition("/")[0]
    return f"rm -r {tree} && {CLEAN_INSTALL}" + (f" (in {project})" if project else "")


def reinstaller(tree: str) -> str | None:
    """The clean reinstall command of the tool whose tree this is (restore offers it), if known."""
    return CLEAN_INSTALL if tree == "node_modules" or tree.endswith("/node_modules") else None


def npm_findings(tree: str, changes: list[Change], view: View, tampered: list[str]) -> list[Finding] | None:
    """One finding for an npm tree: what it verified, or what differs (with ``tampered``, what the
    other checks found), or what it could not verify; None when the tree is not npm's."""
    verdict = verify(tree, changes, view)
    if verdict is None:
        return None
    problems = [*tampered, *verdict.problems]
    remedy = f"on the host: {clean_install(tree)}"
    verified = f"verified {verdict.files} file(s) of {len(verdict.packages)} package(s) against {verdict.lockfile} " \
        "as the session's start had it"
    value = changes_value(changes)
    if not verdict.unverified and not verdict.files and not any(_written(change, tree) for change in changes):
        verified = f"npm's tree changed ({len({c.path for c in changes})} entries) with no package file written: " \
            "nothing to verify"
    if problems:
        return [finding("B07", "high", tree, f"{len(problems)} change(s) no install from {verdict.lockfile} makes: "
                        f"{_listed(problems)}; {remedy}", value, remedy="reinstall")]
    if verdict.unverified:
        return [finding("B07", "medium", tree, f"{verified}; {len(verdict.unverified)} not verifiable: "
                        f"{_listed(verdict.unverified)}; to be sure, {remedy}", value, remedy="reinstall")]
    return [finding("B07", "low", tree, verified, value, remedy="reinstall")]
