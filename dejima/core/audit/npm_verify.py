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
  anew in the session (its lockfile entry's pin changed: the session chose it; held to the new pin,
  or, when the new entry pins no tarball or is gone, to the start's), a package pinned without an
  integrity, a tarball the caches do not hold: said so (medium), with what would
  verify it (a clean install on the host, ``npm ci``).

What it proves: that every file the session wrote in the tree is, byte for byte, the content of
the tarball the lockfile pinned before the session. What it cannot: files the session did not
change are as they were at the start (the audit judges the session, not the tree's past); tools'
own directories in the tree (``.cache``) hold no package and are only named; pnpm and yarn trees
are judged by installs.py alone (a tree is theirs by their state there at the start, or written in
a project with their lockfile or without npm's: never by one marker written where npm's pinned it).
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Callable, Iterable

from dejima.core.audit.caches import changes_value
from dejima.core.audit.model import View
from dejima.core.audit.pinned import Held, TreeJudgement, TreeVerdict, Wanted, hold, lockfile_above
from dejima.core.snapshot import Change

LOCKFILES = ("npm-shrinkwrap.json", "package-lock.json")
CLEAN_INSTALL = "npm ci"
# Another package manager's tree: its layout and state are not npm's (installs.py judges it).
_OTHER_MANAGERS = (".modules.yaml", ".pnpm", ".yarn-integrity", ".yarn-state.yml")
_OTHER_LOCKFILES = ("pnpm-lock.yaml", "yarn.lock")
_PIN = ("version", "resolved", "integrity", "link")
_CONTENT = ("added", "modified", "type", "link-target")


def _packages(text: str | None) -> dict[str, dict[str, object]] | None:
    try:
        document = json.loads(text) if text is not None else None
    except (ValueError, RecursionError):
        return None
    packages = document.get("packages") if isinstance(document, dict) else None
    if not isinstance(packages, dict):
        return None
    return {str(k): v for k, v in packages.items() if isinstance(v, dict)}


def pinned_integrities(texts: Iterable[str | None]) -> dict[str, bool]:
    """The integrity of every package these lockfiles' texts pin (none of one that cannot be read),
    each with whether only optional packages pin it (``"optional": true``: npm fetches one only
    where it applies, those for other platforms never): the tarballs a session's start reads ahead
    for the end audit, waiting for those an install fetches everywhere (exit_audit.read_ahead)."""
    pins: dict[str, bool] = {}
    for text in texts:
        for entry in (_packages(text) or {}).values():
            if isinstance(integrity := entry.get("integrity"), str):
                pins[integrity] = pins.get(integrity, True) and entry.get("optional") is True
    return pins


def _pin(entry: dict[str, object] | None) -> tuple[object, ...] | None:
    return None if entry is None else tuple(map(entry.get, _PIN))


def package_key(relative: str, listed: Callable[[str], bool]) -> str | None:
    """``node_modules/a/node_modules/@s/b`` for a path inside that package (relative to the
    lockfile's directory): the outermost package, then each nested ``node_modules/x`` that the
    lockfile lists (a package's own files may hold a directory called node_modules: resolve's test
    fixtures); None for a path directly in node_modules. A workspace package's own tree is keyed
    from there: ``packages/a/node_modules/b``."""
    at = 0 if relative.startswith("node_modules/") else relative.find("/node_modules/") + 1
    if at < 0 or at == 0 and not relative.startswith("node_modules/"):
        return None
    first, rest = first_package(relative[at:])
    if first is None:
        return None
    key = relative[:at] + first
    while rest.startswith("node_modules/"):
        nested, deeper = first_package(rest)
        if nested is None or not listed(f"{key}/{nested}"):
            break
        key, rest = f"{key}/{nested}", deeper
    return key


def first_package(relative: str) -> tuple[str | None, str]:
    """(``node_modules/a`` or ``node_modules/@s/a``, the rest of the path) for a path in it."""
    end = relative.find("/")
    for _ in range(2 if relative.startswith("@", end + 1) else 1):  # the package's name: a scope's takes two parts
        end = relative.find("/", end + 1)
        if end < 0:
            return None, ""
    return relative[:end], relative[end + 1:]


def _pinned_by(key: str, packages: dict[str, dict[str, object]]) -> str:
    """The package whose tarball holds ``key``'s files: itself, or for a bundled dependency
    (``inBundle``) the package above it that bundles it."""
    while packages.get(key, {}).get("inBundle"):
        parent = key.rpartition("/node_modules/")[0]
        if not parent or parent not in packages:
            break
        key = parent
    return key


def verify(tree: str, changes: list[Change], view: View) -> TreeVerdict | None:
    """The session's changes in an npm tree held to its lockfile at the start; None when the
    tree is not npm's (pnpm, yarn)."""
    lockfile = lockfile_above(tree, view, LOCKFILES)
    if not tree.endswith("node_modules") or _other_managers(tree, lockfile, view):
        return None
    if lockfile is None and f"{tree}/.package-lock.json" not in view.after:
        return None  # not npm's, as far as anything says
    verdict = TreeVerdict(lockfile or "package-lock.json")
    started = view.text(lockfile, "before") if lockfile is not None else None
    start = _packages(started)
    if start is None or lockfile is None:
        if any(_written(change, tree) for change in changes):  # else npm only rewrote its own state
            verdict.unverified.append(f"{verdict.lockfile} " + (
                "was not there at the session's start" if lockfile not in view.before else
                "at the session's start was not kept or has no per-package entries (lockfileVersion 1)"))
        return verdict
    ended = view.text(lockfile) if lockfile in view.after else None
    end = start if ended is not None and ended == started else _packages(ended)  # left as it was: parsed once
    base = lockfile.rpartition("/")[0]
    _Check(verdict, tree, base, start, end or {}, view).run(changes)
    return verdict


def _other_managers(tree: str, lockfile: str | None, view: View) -> bool:
    """Whether pnpm or yarn made the tree: its state there at the start, or written in the session
    in a project that had no npm lockfile then or had that manager's lockfile beside it. A marker
    alone, written where package-lock.json pinned the tree, is one file the session can plant to
    end the verification: it does not."""
    if any(f"{tree}/{name}" in view.before for name in _OTHER_MANAGERS):
        return True
    if not any(f"{tree}/{name}" in view.after for name in _OTHER_MANAGERS):
        return False
    if lockfile is None or lockfile not in view.before:
        return True
    project = lockfile.rpartition("/")[0]
    return any((f"{project}/{name}" if project else name) in view.before for name in _OTHER_LOCKFILES)


def _written(change: Change, tree: str) -> bool:
    """Whether a change wrote something in the tree other than npm's record of it."""
    return change.after is not None and change.what in _CONTENT and change.after.kind != "dir" and \
        change.path != f"{tree}/.package-lock.json"


# held_in_full's answer: the files its tarball must hold, where a path's part inside the package
# begins, the package's name and whether its install script may write in it.
_InFull = tuple[list[Wanted | Held], int, str, bool]


def _files_of(wanted: list[Wanted | Held], cut: int, package: str, scripted: bool) -> list[Change]:
    """Where a run's files held in full go: the package's last Held, when the tarball's list ends
    with it (its runs follow one another), or a new one."""
    last = wanted[-1] if wanted else None
    if not isinstance(last, Held) or (last.cut, last.package, last.excused) != (cut, package, scripted):
        last = Held([], cut, package, scripted)
        wanted.append(last)
    return last.changes


class _Check:
    """One tree's changes against the lockfile's pins at the start (``start``) and at the end
    (``end``: for what the session pinned itself), the tarballs asked for at once."""

    def __init__(self, verdict: TreeVerdict, tree: str, base: str, start: dict[str, dict[str, object]],
                 end: dict[str, dict[str, object]], view: View) -> None:
        self.verdict, self.tree, self.base, self.start, self.end, self.view = verdict, tree, base, start, end, view
        self.wanted: dict[str, list[Wanted | Held]] = {}  # integrity -> the files its tarball must hold
        self.unpinned: dict[str, str] = {}  # package key -> why it cannot be verified
        self.anew: dict[str, bool] = {}  # package key -> whether the session pinned it anew (asked per file)
        # Asked once per directory and per package, not per file (a tree of 20k files holds ~600 packages).
        self.keys: dict[str, str | None] = {}  # directory (lockfile-relative) -> package_key of what it holds
        self.deeper: set[str] = set()  # directories of keys with a node_modules between their package and them
        self.governed: dict[str, tuple[dict[str, dict[str, object]] | None, str]] = {}  # key -> governing()
        self.owners: dict[tuple[str, bool], tuple[str, str, str, bool]] = {}  # (key, the start's pins?) -> owner()
        self.directories: dict[str, _InFull | None] = {}  # directory -> held_in_full()
        self.packages_held: dict[str, _InFull | None] = {}  # key -> package_held()

    def listed(self, key: str) -> bool:
        return key in self.start or key in self.end

    def relative(self, path: str) -> str:
        return path[len(self.base) + 1:] if self.base else path

    def run(self, changes: list[Change]) -> None:
        # The changes come sorted by path: a directory's files come in runs (cut by its
        # subdirectories'), each run's directory found by its first file. A file added or modified
        # in a directory of a package held in full to its start pin is wanted from that pin's
        # tarball at once (what ``change`` would say of it, one step each).
        prefix, held = "\0", None  # the run's directory and a '/' after it (none yet), held_in_full's answer
        files: list[Change] | None = None  # where the run's files held in full go (once it has one)
        for change in changes:
            new = change.after
            if new is None or change.what not in _CONTENT:
                continue
            path = change.path
            if not path.startswith(prefix) or path.find("/", len(prefix)) >= 0:  # in another directory
                prefix = path[:path.rfind("/") + 1]
                held, files = self.held_in_full(prefix[:-1]), None
            if held is None:
                self.change(path, change)
            elif new.kind == "file" and change.what in ("added", "modified"):
                if files is None:
                    files = _files_of(*held)
                files.append(change)
            elif new.kind != "dir":  # a package's directory holds nothing to verify (``change`` says nothing)
                self.change(path, change)
                files = None  # it may have wanted a file of the same tarball: the run's next ones come after it
        for key, reason in sorted(self.unpinned.items()):
            self.verdict.unverified.append(f"{self.base + '/' if self.base else ''}{key}: {reason}")
        hold(self.verdict, self.wanted, self.view, "tarball")

    def held_in_full(self, directory: str) -> _InFull | None:
        """For a directory inside a package whose files are held to the start's pin and nothing
        else is said of them (``change``'s way for a file there, taken once): the list its files
        go to, where a path's part inside the package begins, the package's name and whether its
        install script may write in it; None for any other directory (each file asked on its own).
        Answered once per directory (its files come in several runs, cut by its subdirectories')."""
        if directory not in self.directories:
            self.directories[directory] = self.directory_held(directory)
        return self.directories[directory]

    def directory_held(self, directory: str) -> _InFull | None:
        if directory == self.tree or not directory.startswith(self.tree + "/"):
            return None  # npm's own record, or files where no package puts one
        parent = self.relative(directory)
        if parent.endswith("node_modules/.bin"):
            return None
        key = self.key_of(f"{parent}/x", parent, False)
        if key is None or key.endswith("node_modules/.bin"):
            return None
        if key not in self.packages_held:
            self.packages_held[key] = self.package_held(key)
        return self.packages_held[key]

    def package_held(self, key: str) -> _InFull | None:
        how = self.governing(key)
        if how[0] is not self.start or how[1]:
            return None
        owner, integrity, package, scripted = self.owner(key, self.start)
        if not integrity:
            return None
        return (self.wanted.setdefault(integrity, []), (len(self.base) + 1 if self.base else 0) + len(owner) + 1,
                package, scripted)

    def change(self, path: str, change: Change) -> None:
        new = change.after
        assert new is not None
        relative = self.relative(path)
        parent, _, name = relative.rpartition("/")
        if path[len(self.tree) + 1:] == ".package-lock.json":
            self.hidden_lockfile(path)
        elif parent.endswith("node_modules/.bin"):
            self.bin_link(path, new.kind, new.target)
        elif new.kind == "dir":
            return
        elif (key := self.key_of(relative, parent, new.kind == "symlink")) is None:
            if name.startswith("."):  # a tool's own directory or file in the tree (.cache, .vite)
                self.verdict.unverified.append(f"{path}: in no package (a tool's own; not verified)")
            else:
                self.verdict.problems.append(f"{path}: in node_modules, where no package puts a file")
        elif key.endswith("node_modules/.bin") and relative == key:  # the directory itself, not a directory
            self.verdict.problems.append(f"{path}: a {new.kind} where npm makes its .bin directory")
        else:
            self.in_package(path, key, relative, new.kind, new.sha256, new.target)

    def key_of(self, relative: str, parent: str, link: bool) -> str | None:
        """``package_key`` of a path, asked once per directory: every path deeper than a package's
        own directory has its directory's key (a package's own directory, or a link in its place,
        is keyed by itself)."""
        if link:
            return package_key(relative + "/x", self.listed)
        keys = self.keys
        if parent not in keys:
            keys[parent] = self.directory_key(parent) if parent else None
        return keys[parent]

    def directory_key(self, directory: str) -> str | None:
        """``package_key`` of a path in ``directory``: its parent directory's, when that one was asked
        (the sorted changes ask it first: its entry for this directory comes before what this one
        holds) and no node_modules lies between its package and this directory; else asked."""
        up, _, name = directory.rpartition("/")
        key = self.keys.get(up)
        if key is not None and name != "node_modules" and up not in self.deeper:
            return key
        key = package_key(f"{directory}/x", self.listed)
        if key is not None and "/node_modules/" in f"/{directory[len(key) + 1:]}/":
            self.deeper.add(directory)  # below a node_modules in its package (a fixture's, an unlisted package's)
        return key

    def in_package(self, path: str, key: str, relative: str, kind: str, sha256: str | None,
                   target: str | None) -> None:
        """A path inside the package ``key``: held to the pin that governs the package."""
        pins, reason = self.governing(key)
        if pins is None:
            if reason == "unlisted":
                self.verdict.problems.append(f"{path}: in {key}, a package the lockfile does not list")
            elif reason == "tool":
                self.verdict.unverified.append(f"{path}: in no package (a tool's own; not verified)")
            elif reason == "link":
                self.workspace_link(path, key, self.start.get(key) or self.end[key], kind, target, relative)
            else:
                self.unpinned.setdefault(key, reason)
            return
        if reason:
            self.unpinned.setdefault(key, reason)
        self.package_file(path, key, relative, kind, sha256, pins)

    def governing(self, key: str) -> tuple[dict[str, dict[str, object]] | None, str]:
        """``_governing``, answered once per package."""
        how = self.governed.get(key)
        if how is None:
            how = self.governed[key] = self._governing(key)
        return how

    def _governing(self, key: str) -> tuple[dict[str, dict[str, object]] | None, str]:
        """Which lockfile's pins hold the files of the package ``key`` (the start's, or the
        session's for a package it pinned anew), and why it is not verified in full; or no pins,
        and what is said of each of its files instead (``unlisted``, ``tool``, ``link``, or the
        reason it is unverified)."""
        if key.rpartition("/")[2].startswith(".") or "/.bin/" in f"/{key}/":
            return None, "tool"
        if key not in self.start and key not in self.end:
            return None, "unlisted"
        if (self.start.get(key) or self.end[key]).get("link"):
            return None, "link"
        if self.unpinned_in_session(key):
            # The start pinned its tarball and the session's lockfile pins none (an integrity
            # dropped, the entry removed, a git source or another version without one): an edit
            # that would otherwise leave the files held to nothing. The start's pin holds them.
            return self.start, "no longer pinned by the lockfile (" + (
                "its entry removed" if key not in self.end else "pinned without an integrity") + \
                " in the session); its files are held to the start's pin"
        if key in self.end and self.pinned_anew(key):
            # Pinned by the session itself: held to its new pin (a file that differs is still
            # tampering), but what the pin names is the session's choice (the lockfile's own finding).
            return self.end, "pinned in the session (its lockfile entry is new or changed)"
        if key not in self.end and self.end:
            return None, "no longer in the lockfile"
        return self.start, ""

    def pinned_anew(self, key: str) -> bool:
        """Whether the end's lockfile pins ``key`` (listed there) otherwise than the start's."""
        anew = self.anew.get(key)
        if anew is None:
            anew = self.anew[key] = _pin(self.end[key]) != _pin(self.start.get(key))
        return anew

    def unpinned_in_session(self, key: str) -> bool:
        """Whether the start pinned ``key``'s tarball (an integrity, its own or its bundler's) and
        the session's lockfile pins none for it."""
        if key not in self.start or not self.end or not self.start[_pinned_by(key, self.start)].get("integrity"):
            return False
        return key not in self.end or not self.end[_pinned_by(key, self.end)].get("integrity")

    def package_file(self, path: str, key: str, relative: str, kind: str, sha256: str | None,
                     packages: dict[str, dict[str, object]]) -> None:
        if kind != "file":
            self.verdict.problems.append(f"{path}: a {kind}, where npm writes the tarball's files only")
            return
        owner, integrity, package, scripted = self.owner(key, packages)
        if not integrity:
            resolved = packages[owner].get("resolved")
            self.unpinned.setdefault(owner, f"pinned without an integrity (resolved: {resolved})")
        else:
            self.wanted.setdefault(integrity, []).append(Wanted(path, relative[len(owner) + 1:], sha256, package,
                                                                scripted))

    def owner(self, key: str, packages: dict[str, dict[str, object]]) -> tuple[str, str, str, bool]:
        """``_owner``, answered once per package and lockfile."""
        pinned = self.owners.get((key, packages is self.start))
        if pinned is None:
            pinned = self.owners[(key, packages is self.start)] = self._owner(key, packages)
        return pinned

    def _owner(self, key: str, packages: dict[str, dict[str, object]]) -> tuple[str, str, str, bool]:
        """The package whose tarball holds ``key``'s files, its integrity ("" when it pins none),
        its name as the findings say it, and whether its install script may write in it (esbuild)."""
        owner = _pinned_by(key, packages)
        integrity = packages[owner].get("integrity")
        return (owner, integrity if isinstance(integrity, str) else "", f"{self.base}/{owner}" if self.base else owner,
                bool(packages[owner].get("hasInstallScript")))

    def bin_link(self, path: str, kind: str, target: str | None) -> None:
        """``.bin/NAME``: npm's link to the ``bin`` the lockfile records for NAME in that package."""
        name = path.rpartition("/")[2]
        if kind != "symlink" or target is None:
            self.verdict.problems.append(f"{path}: a {kind} where npm makes a link to a package's bin")
            return
        resolved = posixpath.normpath(posixpath.join(posixpath.dirname(path), target))
        inside = not target.startswith("/") and (not self.base or resolved.startswith(self.base + "/"))
        key = package_key(self.relative(resolved), self.listed) if inside else None
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
            pinned = self.start.get(key) if key not in self.end or not self.pinned_anew(key) else self.end.get(key)
            if pinned is None or any(entry.get(k) != pinned.get(k) for k in _PIN if k in entry or k in pinned):
                self.verdict.problems.append(f"{path}: its entry {key} is not the lockfile's")


def clean_install(tree: str) -> str:
    """What reinstalls a tree as its lockfile says, in words (for the finding)."""
    project = tree.rpartition("/")[0]
    return f"rm -r {tree} && {CLEAN_INSTALL}" + (f" (in {project})" if project else "")


def reinstaller(tree: str) -> str | None:
    """The clean reinstall command of the tool whose tree this is (restore offers it), if known."""
    return CLEAN_INSTALL if tree == "node_modules" or tree.endswith("/node_modules") else None


def npm_judgement(tree: str, changes: list[Change], view: View) -> TreeJudgement | None:
    """An npm tree verified against its lockfile, its one finding waiting for what the other checks
    find (``TreeJudgement.finding``); None when the tree is not npm's."""
    verdict = verify(tree, changes, view)
    if verdict is None:
        return None
    idle = None if any(_written(change, tree) for change in changes) else \
        f"npm's tree changed ({len({c.path for c in changes})} entries) with no package file written: nothing to verify"
    return TreeJudgement(tree, verdict, changes_value(changes), f"on the host: {clean_install(tree)}", idle=idle)
