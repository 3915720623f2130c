"""Where the installed trees of a mount lie (issue 32): a directory is a tree because the tool that
makes it left its record there, never because of its name. A ``vendor/``, ``site-packages/`` or
``node_modules/`` without that record is ordinary files, and every ordinary rule reads them (a
conftest.py, a package.json's scripts, a .pth).

- npm, pnpm, yarn: a ``node_modules`` beside a package.json that holds the manager's record of what
  it installed (``.package-lock.json``, ``.modules.yaml``, ``.yarn-state.yml``, ``.yarn-integrity``),
  and a workspace package's own node_modules below such a tree's project, which npm's record lists
  by path or the project's workspaces name;
- a Python environment (venv, virtualenv, uv, tox, nox): a directory with a ``pyvenv.cfg``;
- a conda environment: a directory with a ``conda-meta/history``;
- a Python install target (``pip install --target``, workspace only): a directory that holds
  ``*.dist-info/RECORD`` and is not an environment's site-packages;
- cargo's build output: a directory beside a Cargo.toml that holds ``.rustc_info.json`` or a
  profile's ``.fingerprint`` (``target/debug/.fingerprint``); in the session's home, the one the
  rust workflow points ``CARGO_TARGET_DIR`` at (``HOME_BUILD_OUTPUT``) when cargo's
  ``.rustc_info.json`` is in it: a place dejima chose, as the home's package caches are;
- ``cargo vendor``'s output: a directory beside a Cargo.toml whose crates each hold a
  ``.cargo-checksum.json`` (``vendor/serde/.cargo-checksum.json``);
- ``go mod vendor`` (``vendor/modules.txt`` beside go.mod) and composer (``vendor/composer/installed.json``
  beside composer.json).

Records are looked up in both snapshots: a tree made, or removed, in the session is still one. A
tree inside another (a node_modules in an environment) is judged on its own. A record can be
planted like any file; what a tree's own rules accept is what its tool writes (installs.py: a file
no RECORD lists in an environment is tampering), and a tree made in the session is never more than
an unverified install (trees.py).
"""

from __future__ import annotations

import re
from fnmatch import fnmatchcase
from itertools import groupby, repeat
from operator import attrgetter, is_not, itemgetter, methodcaller
from typing import NamedTuple

from dejima.core.audit.caches import in_package_cache
from dejima.core.audit.model import View
from dejima.core.snapshot import Change

NPM_RECORDS = (".package-lock.json", ".modules.yaml", ".yarn-state.yml", ".yarn-integrity")
# (kind, the file its tool leaves in it, the manifest beside it)
_VENDORED = (("go-vendor", "modules.txt", "go.mod"), ("composer", "composer/installed.json", "composer.json"))
_YAML_ITEM = re.compile(r"""\s*-\s*['"]?([^'"#\s]+)""")
DEPENDENCY_KINDS = ("npm", "cargo-vendor", "go-vendor", "composer")
PYTHON_KINDS = ("python", "python-target", "conda")
# Where the rust workflow has cargo build (CARGO_TARGET_DIR): the session's home, not the workspace.
HOME_BUILD_OUTPUT = ".cargo/target"
# The file an environment's tool writes at its root when it makes it.
ENVIRONMENT_RECORDS = {"python": "pyvenv.cfg", "conda": "conda-meta/history"}


class Tree(NamedTuple):
    kind: str  # npm, python, python-target, conda, cargo, cargo-vendor, go-vendor, composer
    root: str  # mount-relative directory


def _exists(path: str, view: View) -> bool:
    return path in view.after or path in view.before


def _beside(directory: str, name: str) -> str:
    parent = directory.rpartition("/")[0]
    return f"{parent}/{name}" if parent else name


def _holders(view: View, name: str, sides: tuple[str, ...] = ("before", "after")) -> frozenset[str]:
    """The directories two levels above each path named ``name`` (target/ for target/debug/.fingerprint,
    vendor/ for vendor/x.dist-info/RECORD), in these snapshots."""
    key = f"holders:{name}:{'/'.join(sides)}"
    if key not in view.memo:
        view.memo[key] = frozenset(path.rsplit("/", 2)[0] for side in sides for path in view.named(name, side=side)
                                   if path.count("/") >= 2 and (name != "RECORD" or
                                                                path.rsplit("/", 2)[1].endswith(".dist-info")))
    return view.memo[key]  # type: ignore[return-value]


def _environment_site(directory: str, view: View) -> bool:
    """An environment's own site-packages (lib/pythonX.Y/site-packages, Lib/site-packages)."""
    parts = directory.split("/")
    if parts[-1] != "site-packages":
        return False
    for depth in (3, 2):  # E/lib/pythonX.Y/site-packages, E/Lib/site-packages
        if len(parts) > depth and _exists("/".join(parts[:-depth]) + "/pyvenv.cfg", view):
            return True
    return False


def _recognise(directory: str, view: View) -> str | None:
    name = directory.rpartition("/")[2]
    if name == "node_modules":
        return "npm" if _made_by_a_manager(directory, view) or _workspace_package_tree(directory, view) else None
    kind = _recorded_kind(directory, view)
    if kind is None or directory in view.before and not _recorded_kind(directory, view, ("before",)):
        return None  # a record put in a directory that was there: ordinary files with a record beside them
    return kind


# The files _recorded_kind looks for, each in the directory it tells or one below it (conda-meta/history,
# composer/installed.json, target/debug/.fingerprint, vendor/serde/.cargo-checksum.json, x.dist-info/RECORD).
_RECORDS = ("pyvenv.cfg", ".rustc_info.json", "modules.txt", "history", "installed.json", ".fingerprint",
            ".cargo-checksum.json", "RECORD")


def _may_hold_records(view: View) -> frozenset[str] | None:
    """The directories one or two levels above a file named as a record, in either snapshot: the only
    ones that can hold one (asked of every directory of an installed tree, which mostly holds none).
    Finding them costs a pass over every path: None (each directory asked in full) where the
    changes are few beside them."""
    if "record-holders" not in view.memo:
        holders = None
        if view.worth_a_pass():
            found = [path for side in ("before", "after") for path in view.named(*_RECORDS, side=side)]
            parents = [path.rpartition("/")[0] for path in found]
            holders = frozenset(parents + [parent.rpartition("/")[0] for parent in parents])
        view.memo["record-holders"] = holders
    return view.memo["record-holders"]  # type: ignore[return-value]



def _recorded_kind(directory: str, view: View, sides: tuple[str, ...] = ("before", "after")) -> str | None:
    """The kind of tree whose tool's record the directory holds, in these snapshots."""
    holders = _may_hold_records(view)
    if holders is not None and directory not in holders:
        return None
    first, second = (view.before if side == "before" else view.after for side in (sides[0], sides[-1]))

    def exists(path: str) -> bool:  # asked of every directory of a tree: no generator per test
        return path in first or path in second

    if exists(f"{directory}/pyvenv.cfg"):
        return "python"
    if exists(f"{directory}/conda-meta/history"):
        return "conda"
    if view.kind == "home":
        return "cargo" if directory == HOME_BUILD_OUTPUT and exists(f"{directory}/.rustc_info.json") else None
    if view.kind != "workspace":
        return None
    cargo = exists(_beside(directory, "Cargo.toml"))
    if cargo and (exists(f"{directory}/.rustc_info.json") or directory in _holders(view, ".fingerprint", sides)):
        return "cargo"
    if cargo and directory in _holders(view, ".cargo-checksum.json", sides):
        return "cargo-vendor"
    for kind, record, manifest in _VENDORED:
        if exists(f"{directory}/{record}") and exists(_beside(directory, manifest)):
            return kind
    if directory in _holders(view, "RECORD", sides) and not _environment_site(directory, view):
        return "python-target"
    return None


def _made_by_a_manager(directory: str, view: View) -> bool:
    """A node_modules beside a package.json that holds its manager's record of what it installed."""
    return _exists(_beside(directory, "package.json"), view) and \
        any(_exists(f"{directory}/{record}", view) for record in NPM_RECORDS)


def _workspace_package_tree(directory: str, view: View) -> bool:
    """A workspace package's own node_modules, where npm, pnpm and yarn put what they do not hoist
    (pnpm: every one): a project above has a node_modules with its manager's record, and either
    npm's hidden lockfile lists this one's packages by path, or the project's workspaces
    (package.json's ``workspaces``, pnpm-workspace.yaml's ``packages``) name the package."""
    parts = directory.split("/")
    if "node_modules" in parts[:-1]:
        return False  # a package's own node_modules: part of the tree it is in, or of none
    package = "/".join(parts[:-1])
    for cut in range(len(parts) - 1):
        project = "/".join(parts[:cut])
        prefix = f"{project}/" if project else ""
        if not _made_by_a_manager(f"{prefix}node_modules", view):
            continue
        inside = "/".join(parts[cut:]) + "/"
        if any(key.startswith(inside) for key in _npm_keys(f"{prefix}node_modules/.package-lock.json", view)) or \
                any(fnmatchcase(package[len(prefix):], glob) for glob in workspace_globs(prefix, view)):
            return True
    return False


def workspace_package(directory: str, view: View) -> bool:
    """Whether a directory is a package a project above it names among its workspaces."""
    parts = directory.split("/")
    for cut in range(len(parts)):
        prefix = "/".join(parts[:cut]) + "/" if cut else ""
        if any(fnmatchcase(directory[len(prefix):], glob) for glob in workspace_globs(prefix, view)):
            return True
    return False


def workspace_globs(prefix: str, view: View) -> tuple[str, ...]:
    """The workspace packages a project names: package.json's ``workspaces`` (a list, or yarn's
    ``{"packages": [...]}``) and pnpm-workspace.yaml's ``packages`` list (negations left out)."""
    key = f"workspaces:{prefix}"
    if key not in view.memo:
        manifest = view.json_object(f"{prefix}package.json") or {}
        workspaces = manifest.get("workspaces")
        if isinstance(workspaces, dict):
            workspaces = workspaces.get("packages")
        globs = [str(glob) for glob in workspaces] if isinstance(workspaces, list) else []
        listing = False
        for line in (view.text(f"{prefix}pnpm-workspace.yaml") or "").splitlines():
            if line and not line[0].isspace() and not line.startswith("-"):
                listing = line.split("#")[0].strip() == "packages:"
            elif listing and (item := _YAML_ITEM.match(line)):
                globs.append(item.group(1))
        view.memo[key] = tuple(glob.rstrip("/") for glob in globs if glob and not glob.startswith("!"))
    return view.memo[key]  # type: ignore[return-value]


def _npm_keys(record: str, view: View) -> tuple[str, ...]:
    key = f"npm-keys:{record}"
    if key not in view.memo:
        document = view.json_object(record) if record in view.after else None
        packages = document.get("packages") if document is not None else None
        view.memo[key] = tuple(str(name) for name in packages) if isinstance(packages, dict) else ()
    return view.memo[key]  # type: ignore[return-value]


def _kind(directory: str, view: View) -> str | None:
    memo: dict[str, str | None] = view.memo.setdefault("tree-kind", {})  # type: ignore[assignment]
    if directory not in memo:
        memo[directory] = _recognise(directory, view)
    return memo[directory]


def tree_of(path: str, view: View) -> Tree | None:
    """The innermost recognised tree a path lies in (below its root). Asked of each changed path by
    several rules (a tree of 20k files is asked 160k times): answered once per directory."""
    memo: dict[str, Tree | None] = view.memo.setdefault("tree-of", {})  # type: ignore[assignment]
    parent = path.rpartition("/")[0]
    if parent in memo:
        return memo[parent]
    root = view.directory_above("tree", parent, lambda directory: _kind(directory, view) is not None)
    kind = _kind(root, view) if root is not None else None
    memo[parent] = found = Tree(kind, root) if kind is not None and root is not None else None
    return found


def in_tree(path: str, view: View) -> bool:
    """Inside a recognised tree or a package cache: their own rules judge it (trees.py, caches.py)."""
    answer = changed_in_tree(view).get(path)
    return answer if answer is not None else in_package_cache(path, view.kind) or tree_of(path, view) is not None


_UNTOLD = Tree("", "")  # a directory whose tree could not be told (sort_changes)
_IN_TREE = "in-tree"  # View.memo: in_tree of each changed path, where it could be told (changed_in_tree)


def changed_in_tree(view: View) -> dict[str, bool]:
    """``in_tree`` of each changed path, told once per directory that holds a change (a path's
    tree is its directory's; a package cache is asked of each path where one can be a part of the
    mount: the home), as ``sort_changes`` sorts them. The rules that pass by a tree's paths look
    them up here instead of asking each; a path missing is asked on its own (its directory's tree
    could not be told, and fails again where asked, judged there)."""
    answers: dict[str, bool] | None = view.memo.get(_IN_TREE)  # type: ignore[assignment]
    if answers is None:
        try:
            sort_changes(view)
        except Exception:  # noqa: S110 - its directory's paths are asked on their own, and fail there
            pass
        answers = view.memo.setdefault(_IN_TREE, {})  # type: ignore[assignment]
    return answers  # type: ignore[return-value]


def sort_changes(view: View) -> dict[Tree, list[Change]]:
    """The changes inside each recognised tree (each in its innermost), and ``changed_in_tree``'s
    answers, found in one pass over the changes: each directory that holds one is asked its tree
    once (a path's tree is its directory's), the changes' directories cut out and looked up in C.
    Raises what telling a directory's tree raised, first in the changes' order, once every other
    directory was told (its paths are left out of the answers)."""
    paths = list(map(attrgetter("path"), view.changes))
    parents = list(map(itemgetter(0), map(methodcaller("rpartition", "/"), paths)))
    trees: dict[str, Tree | None] = {}
    failure: Exception | None = None
    for directory in dict.fromkeys(parents):  # each once, in the changes' order
        try:
            trees[directory] = tree_of(f"{directory}/x" if directory else "x", view)
        except Exception as error:  # noqa: BLE001 - raised below, once the others are told
            failure = failure or error
    of_change = list(map(trees.get, parents, repeat(_UNTOLD)))
    groups: dict[Tree, list[Change]] = {}
    for tree, run in groupby(zip(of_change, view.changes, strict=True), key=itemgetter(0)):  # a tree's come together
        if tree is not None and tree is not _UNTOLD:
            groups.setdefault(tree, []).extend(map(itemgetter(1), run))
    if view.kind == "home":  # a package cache is a part of the home: asked of each path
        told = [(path, tree is not None or in_package_cache(path, view.kind))
                for path, tree in zip(paths, of_change, strict=True) if tree is not _UNTOLD]
        answers = dict(told)
    else:
        # A cache mount is a package cache throughout.
        answers = dict.fromkeys(paths, True) if view.kind == "cache" else \
            dict(zip(paths, map(is_not, of_change, repeat(None)), strict=True))
        if failure is not None:  # the paths of a directory not told are asked on their own
            for path, tree in zip(paths, of_change, strict=True):
                if tree is _UNTOLD:
                    answers.pop(path, None)
    view.memo.setdefault(_IN_TREE, answers)  # told once: what was told stands
    if failure is not None:
        raise failure
    return groups


# Trees pytest does not walk into by default: node_modules (norecursedirs) and environments (by their
# pyvenv.cfg or conda-meta/history). Into the others it does, and a conftest.py there runs.
_PYTEST_SKIPS = ("npm", "python", "conda")


def judged_by_tree(path: str, view: View) -> bool:
    """Whether a path's tree (or cache) alone judges it: every path in one, but a conftest.py in a
    tree pytest walks into (cargo's output, a vendor directory, a pip --target install), which gets
    pytest's rule as anywhere."""
    if in_package_cache(path, view.kind):
        return True
    tree = tree_of(path, view)
    return tree is not None and not (path.endswith("/conftest.py") and tree.kind not in _PYTEST_SKIPS)

