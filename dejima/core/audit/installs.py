"""What an install does not do (research B07, B10): the changes inside a dependency tree or a
Python environment that no package manager makes, each named with the evidence.

node_modules, against the project's lockfile (package-lock.json, v2/v3 ``packages``):
- a package whose version is not the lockfile's;
- a package with install scripts (preinstall, install, postinstall) that the lockfile does not
  record (npm writes ``hasInstallScript`` for every package that has them), or that the lockfile
  does not know at all;
- a link that leaves the tree (``.bin`` links point into it; a workspace link is in the lockfile or
  names a workspace package; pnpm links into its store, node_modules/.pnpm, another tree of the project);
- a file directly in node_modules, where no package puts one (``require('x')`` finds x.js there);
- a file added to a package that was there at the start and was not installed again (its
  package.json unchanged): an install writes a package whole.

Python environments and install targets, against each installed distribution's RECORD (path,
SHA-256, size):
- an installed file whose content is not the one its RECORD names (a console script rewritten,
  a line added to a module);
- a file that no RECORD lists, anywhere in the tree (a conftest.py beside a planted pyvenv.cfg
  too), where an installer writes only what a RECORD lists (bytecode and the environment's own
  files excepted: pyvenv.cfg, activate scripts, interpreter links, uv's ``_virtualenv``);
- a .pth with an import line other than the installers' own (virtualenv's, setuptools' distutils
  shim, an editable install's finder), RECORD or not: Python runs it at every start;
- a link other than the interpreter's (venv, virtualenv and uv make those; a wheel holds none).

conda environments, against their packages' records in conda-meta/*.json (``files``, and the hash
of each file as installed): a file or link none lists, a listed file whose content is not the
recorded one, a .pth with an import line of its own.

What they prove: that the tree is not what its manager made from the lockfile and the packages'
own records. What they cannot: a RECORD is written in the tree too, so an agent that rewrites a
file and its RECORD line together passes; the lockfile check uses the lockfile as it is at the
end, so a session that changed both is told apart only by the lockfile's own finding (X05, C7).
"""

from __future__ import annotations

import binascii
import csv
import posixpath
import re
from collections.abc import Iterable

from dejima.core.audit.model import View
from dejima.core.audit.treeroots import tree_of, workspace_package
from dejima.core.snapshot import Change

_INSTALL_SCRIPTS = ("preinstall", "install", "postinstall")
# What the package managers write in a tree's top directory at every install, in place: their record
# of what they installed (npm's hidden lockfile, yarn's and pnpm's state; and pnpm's .pnpm/lock.yaml).
# Rewriting it is an install. (Every other dot-name there, .bin or a tool's .cache or .vite, is
# judged with the tree as an ordinary change.)
TOOL_STATE = frozenset({".package-lock.json", ".yarn-integrity", ".yarn-state.yml", ".modules.yaml",
                        ".pnpm-workspace-state.json", ".pnpm-workspace-state-v1.json", ".pnpm/lock.yaml"})
# In an environment, outside every RECORD: its own files (venv, uv) and bytecode.
# (Headers and data files under include/ and share/ are a distribution's: its RECORD lists them.)
_ENVIRONMENT_OWN = ("pyvenv.cfg", "bin/activate", "bin/Activate", "bin/deactivate", "bin/pydoc", "bin/python",
                    "bin/pypy", "lib64", ".gitignore", "CACHEDIR.TAG", ".lock", ".tox-info.json", "log/")
# Anywhere in an environment: uv's and virtualenv's start-up module (its .pth is checked by its content), the
# files an installer writes beside a RECORD. (virtualenv's seed markers end in .virtualenv.)
_OWN_NAMES = frozenset({"_virtualenv.py", "_virtualenv.pth", "RECORD", "INSTALLER", "REQUESTED", "direct_url.json"})
# The interpreter's names in an environment's bin/ (python, python3, python3.12, pypy3...).
_INTERPRETER = re.compile(r"bin/(?:python|pypy)[\d.]*")
# A line Python runs in a .pth (site.py: one that starts with "import" and a space or tab), and the
# ones installers write: virtualenv's and uv's, setuptools' distutils shim, an editable install's finder.
_PTH_IMPORT = re.compile(r"\s*import[ \t]")
_INSTALLERS_PTH = (
    re.compile(r"import _virtualenv"),
    re.compile(r"import os; var = 'SETUPTOOLS_USE_DISTUTILS'; enabled = os\.environ\.get\(var, '(?:local|stdlib)'\) "
               r"== 'local'; enabled and __import__\('_distutils_hack'\)\.add_shim\(\);"),
    re.compile(r"import (__editable___\w+_finder); \1\.install\(\)"),
)


def _lock_packages(view: View, tree: str) -> dict[str, dict[str, object]] | None:
    """The ``packages`` of the lockfile beside the tree (keyed "node_modules/a/node_modules/b");
    None when there is none (or it is v1, which has no per-path entries)."""
    project = tree.rpartition("/")[0]
    for name in ("npm-shrinkwrap.json", "package-lock.json"):
        document = view.json_object(f"{project}/{name}" if project else name)
        packages = document.get("packages") if document is not None else None
        if isinstance(packages, dict):
            return {str(k): v for k, v in packages.items() if isinstance(v, dict)}
    return None


def _package_key(tree: str, manifest: str) -> str:
    """``node_modules/a/node_modules/b`` for ``<tree>/a/node_modules/b/package.json``."""
    project = tree.rpartition("/")[0]
    directory = manifest.rpartition("/")[0]
    return directory[len(project) + 1:] if project else directory


def npm_tampering(tree: str, changes: list[Change], view: View) -> list[str]:
    """What in a node_modules tree's changes no npm install does, one line each."""
    if not tree.endswith("node_modules"):
        return []
    lock = _lock_packages(view, tree)
    found = []
    held: dict[str, bool] = {}
    # The packages whose manifest was there at the start and is unchanged: none when the session
    # installed the tree anew, and then no added file's package is looked for.
    unchanged = {path.rpartition("/")[0] for path in view.named("package.json", side="before")
                 if path.startswith(tree + "/") and path not in view.changed}

    def kept(directory: str) -> bool:  # asked once per directory: a file's package is its directory's
        if directory not in held:
            held[directory] = _package_directory(f"{directory}/x") in unchanged
        return held[directory]

    inside = len(tree) + 1
    for change in changes:
        new, path = change.after, change.path
        if new is None:
            continue
        if new.kind == "symlink":
            if new.target is not None and change.what in ("added", "type", "link-target"):
                found.extend(_link(tree, path, new.target, lock, view))
            continue
        if new.kind != "file":
            continue  # a directory, or a special file (the file rules' F04)
        if path.find("/", inside) < 0 and not path.startswith(".", inside):  # directly in node_modules
            found.append(f"{path}: a file in node_modules that no package puts there")
        elif change.what in ("added", "modified") and path.endswith("/package.json") and \
                f"{_package_directory(path)}/package.json" == path:  # a package's own, not a test fixture's
            found.extend(_manifest(tree, path, view, lock))
        elif unchanged and change.what == "added" and kept(path.rpartition("/")[0]):
            found.append(f"{path}: a file added to an installed package that was not installed again")
    return found


def _package_directory(path: str) -> str | None:
    """``.../node_modules/a`` or ``.../node_modules/@s/a`` for a path inside that package."""
    head, marker, rest = path.rpartition("/node_modules/")
    if not marker:
        head, marker, rest = ("", "node_modules/", path[len("node_modules/"):]) if path.startswith(
            "node_modules/") else ("", "", "")
    parts = rest.split("/")
    size = 2 if parts[0].startswith("@") else 1
    if not marker or len(parts) <= size:
        return None
    return f"{head}{marker}{'/'.join(parts[:size])}" if head else f"node_modules/{'/'.join(parts[:size])}"


def _link(tree: str, path: str, target: str, lock: dict[str, dict[str, object]] | None, view: View) -> list[str]:
    resolved = posixpath.normpath(posixpath.join(posixpath.dirname(path), target))
    if not target.startswith("/") and (resolved == tree or resolved.startswith(tree + "/")):
        return []
    project = tree.rpartition("/")[0]
    inner = tree_of(resolved, view)
    if not target.startswith("/") and (inner is not None and inner.kind == "npm" or workspace_package(resolved, view)):
        return []  # into the project's other tree (pnpm's store in node_modules/.pnpm), or a workspace package
    entry = (lock or {}).get(path[len(project) + 1:] if project else path)
    if entry and entry.get("link") and not target.startswith("/") and \
            posixpath.normpath(posixpath.join(project, str(entry.get("resolved", "")))) == resolved:
        return []  # a workspace package, linked as the lockfile says
    return [f"{path}: a link that leaves the tree, to {target}"]


def _manifest(tree: str, path: str, view: View, lock: dict[str, dict[str, object]] | None) -> list[str]:
    manifest = view.json_object(path)
    if manifest is None or "name" not in manifest:
        return []  # not a package's own manifest (test fixtures, nested examples)
    scripts = manifest.get("scripts")
    installs = sorted(s for s in _INSTALL_SCRIPTS if isinstance(scripts, dict) and s in scripts)
    if lock is None:
        return []
    entry = lock.get(_package_key(tree, path))
    if entry is None:
        return [f"{path}: a package with install scripts ({', '.join(installs)}) that the lockfile does not "
                "know"] if installs else []
    found = []
    if "version" in entry and manifest.get("version") != entry["version"]:
        found.append(f"{path}: version {manifest.get('version')!r} installed, the lockfile says {entry['version']!r}")
    if installs and not entry.get("hasInstallScript"):
        found.append(f"{path}: install scripts ({', '.join(installs)}) that the lockfile does not record")
    return found


# --- Python environments --------------------------------------------------------------------------

def record_entries(record: str, site: str, tree: str, view: View) -> list[tuple[str, str]]:
    """(installed path, the hash as RECORD writes it: ``sha256=<urlsafe base64>``, or "") of each line
    of a distribution's RECORD (``path,hash,size``, csv), its paths relative to ``site``
    (site-packages, or an install target: ``tree``). Read once per audit: the tampering rules here and
    the verification against the pins (python_verify.py) go through the same RECORDs."""
    key = f"record:{record}\0{site}\0{tree}"
    found: list[tuple[str, str]] | None = view.memo.get(key)  # type: ignore[assignment]
    if found is None:
        found = []
        for line in (view.text(record) or "").splitlines():
            if line.startswith('"'):  # a path csv quoted (a comma or a quote in it)
                row = next(csv.reader([line]), [""])
                name, digest = row[0], row[1] if len(row) > 1 else ""
            else:
                name, digest = line.rsplit(",", 2)[:2] if line.count(",") >= 2 else (*line.split(",", 1), "")[:2]
            if site == tree and name.startswith("../../"):
                # pip --target installs under a home of its own (lib/python, bin) and moves both into
                # the target: the RECORD still names a script from lib/python, as ../../bin/x.
                name = name[len("../../"):]
            found.append((joined(site, name), digest))
        view.memo[key] = found
    return found


def joined(directory: str, relative: str) -> str:
    """posixpath.normpath(posixpath.join(directory, relative)) of a normal ``directory``: a plain
    relative path (no ``.`` or ``..`` component, no doubled, leading or trailing slash) joined as it
    is, as normpath would leave it (it costs a µs or two, on each of an install's 20k paths)."""
    if relative and relative[0] not in "/." and relative[-1] != "/" and "//" not in relative and \
            "/." not in relative:
        return f"{directory}/{relative}" if directory else relative
    return posixpath.normpath(posixpath.join(directory, relative))


def _record_hashes(view: View, site: str, tree: str) -> dict[str, str]:
    """Tree-relative path -> SHA-256 (hex, "" when RECORD gives none) from every RECORD in ``site``
    (site-packages, or an install target), as the end snapshot has them."""
    hashes: dict[str, str] = {}
    prefix, inside = site + "/", tree + "/"
    for path in view.named("RECORD"):
        if not path.startswith(prefix) or not path[len(prefix):].split("/")[0].endswith(".dist-info"):
            continue
        for target, digest in record_entries(path, site, tree, view):
            if target.startswith(inside):
                hashes[target] = _hex(digest)
    return hashes


def record_hashes(environment: str, view: View) -> dict[str, str]:
    """Every RECORD line of the environment's site-packages, or of an install target's own
    ``*.dist-info`` (memoized per audit)."""
    key = f"records:{environment}"
    if key not in view.memo:
        hashes = _record_hashes(view, environment, environment)
        for site in view.named("site-packages"):
            if site.startswith(environment + "/"):
                hashes.update(_record_hashes(view, site, environment))
        view.memo[key] = hashes
    return view.memo[key]  # type: ignore[return-value]


def recorded(path: str, environment: str, view: View, kind: str = "python") -> bool:
    """Whether a file is, byte for byte, what its distribution's RECORD (or its conda package's
    record) names."""
    expected = (conda_files if kind == "conda" else record_hashes)(environment, view).get(path)
    entry = view.entry(path)
    return bool(expected) and entry is not None and entry.sha256 == expected


def _hex(digest: str) -> str:
    """A RECORD hash's SHA-256 in hex ("" when it gives none): base64.urlsafe_b64decode's answer,
    without its wrappers' cost on each of an environment's 15k lines."""
    algorithm, _, value = digest.partition("=")
    if algorithm != "sha256" or not value:
        return ""
    try:
        return binascii.a2b_base64(value.replace("-", "+").replace("_", "/") + "=" * (-len(value) % 4)).hex()
    except (binascii.Error, ValueError):
        return ""


def _own(environment: str, path: str) -> bool:
    relative = path[len(environment) + 1:]
    name = relative.rsplit("/", 1)[-1]
    return relative.startswith(_ENVIRONMENT_OWN) or name in _OWN_NAMES or name.endswith((".pyc", ".virtualenv")) \
        or "/__pycache__/" in f"/{relative}"


def _pth_code(path: str, view: View) -> str | None:
    """Why a .pth runs code no installer writes there: an import line (Python runs it at every
    start) other than those of virtualenv/uv, setuptools' distutils shim and an editable install's
    finder. A .pth of path lines only is data."""
    if not path.endswith(".pth"):
        return None
    lines = [line for line in (view.text(path) or "").splitlines() if _PTH_IMPORT.match(line)]
    unknown = [line for line in lines if not any(shape.fullmatch(line.strip()) for shape in _INSTALLERS_PTH)]
    return f"{path}: a .pth whose import line runs at every start: {unknown[0].strip()[:120]}" if unknown else None


def _home(environment: str, view: View) -> str | None:
    """The base interpreter's directory, as the environment's pyvenv.cfg names it."""
    for line in (view.text(f"{environment}/pyvenv.cfg") or "").splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "home":
            return value.strip().rstrip("/") or None
    return None


def _environment_link(environment: str, change: Change, view: View) -> str | None:
    """What is wrong with a link in an environment, if anything. venv, virtualenv and uv make only
    the interpreter's links (to the base interpreter pyvenv.cfg names, or to one beside them) and
    lib64 -> lib; an installer makes none (a wheel holds no links)."""
    new = change.after
    assert new is not None and new.target is not None
    path, target = change.path, new.target
    relative = path[len(environment) + 1:]
    if relative == "lib64" and target == "lib" or change.before is not None and change.what not in (
            "type", "link-target"):
        return None
    if _INTERPRETER.fullmatch(relative) and change.before is None:
        home = _home(environment, view)
        if "/" not in target or home is not None and target.startswith("/") and \
                posixpath.dirname(posixpath.normpath(target)) == home:
            return None
        return f"{path}: an interpreter link to {target}, not the base interpreter pyvenv.cfg names (home = {home})"
    return f"{path}: a link to {target}, which no installer makes"


def python_tampering(environment: str, changes: Iterable[Change], view: View) -> list[str]:
    """What in an environment's (or install target's) changes no installer does, one line each:
    a file that is neither the environment's own nor listed by a RECORD, one whose content is not
    what its RECORD names, a .pth with an import line of its own, a link other than the
    interpreter's, an interpreter that was there replaced."""
    hashes = record_hashes(environment, view)
    found: list[str] = []
    for change in changes:
        path, new = change.path, change.after
        if new is None or change.what not in ("added", "modified", "type", "link-target"):
            continue
        if new.kind == "symlink" and new.target is not None:
            wrong = _environment_link(environment, change, view)
            found.extend([wrong] if wrong else [])
            continue
        if new.kind != "file":
            continue
        if change.before is not None and _INTERPRETER.fullmatch(path[len(environment) + 1:]):
            found.append(f"{path}: the environment's interpreter replaced")
            continue
        code = _pth_code(path, view)
        if code is not None:
            found.append(code)
            continue
        if _own(environment, path):
            continue
        expected = hashes.get(path)
        if expected is None:
            found.append(f"{path}: a file that no installed distribution's RECORD lists")
        elif expected and new.sha256 != expected:
            found.append(f"{path}: not the content its distribution's RECORD names")
    return found


# --- conda environments ----------------------------------------------------------------------------

def conda_files(environment: str, view: View) -> dict[str, str]:
    """Environment-relative path -> SHA-256 as installed ("" when not given) of every file the
    environment's conda-meta/*.json records list (``files``, and ``paths_data`` with the hash of
    the file after conda rewrote its prefix), memoized per audit."""
    key = f"conda:{environment}"
    if key not in view.memo:
        files: dict[str, str] = {}
        for name in view.siblings(f"{environment}/conda-meta"):
            document = view.json_object(f"{environment}/conda-meta/{name}") if name.endswith(".json") else None
            if document is None:
                continue
            listed = document.get("files")
            for path in listed if isinstance(listed, list) else ():
                files.setdefault(f"{environment}/{path}", "")
            paths = document.get("paths_data")
            for entry in paths.get("paths", []) if isinstance(paths, dict) else ():
                if isinstance(entry, dict) and isinstance(entry.get("_path"), str):
                    files[f"{environment}/{entry['_path']}"] = str(entry.get("sha256_in_prefix") or "")
        view.memo[key] = files
    return view.memo[key]  # type: ignore[return-value]


def conda_tampering(environment: str, changes: Iterable[Change], view: View) -> list[str]:
    """What in a conda environment's changes conda does not do: a file or link no package's record
    lists, one whose content is not the one recorded, a .pth with an import line of its own."""
    files = conda_files(environment, view)
    found = []
    for change in changes:
        path, new = change.path, change.after
        relative = path[len(environment) + 1:]
        if new is None or new.kind not in ("file", "symlink") or change.what not in (
                "added", "modified", "type", "link-target") or relative.startswith("conda-meta/") or \
                relative.endswith(".pyc") or "/__pycache__/" in f"/{relative}":
            continue
        code = _pth_code(path, view) if new.kind == "file" else None
        expected = files.get(path)
        if code is not None:
            found.append(code)
        elif expected is None:
            found.append(f"{path}: a {'link' if new.kind == 'symlink' else 'file'} that no conda package lists")
        elif expected and new.kind == "file" and new.sha256 != expected:
            found.append(f"{path}: not the content its conda package records")
    return found
