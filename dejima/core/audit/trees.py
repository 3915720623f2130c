"""Dependency trees, Python environments and bytecode (research B07, B10, B11), and caches through
caches.py (M01): places with thousands of files, reported as one finding per tree that says what to
do (reinstall on the host), with the few files that run at every start (.pth, sitecustomize,
activate) named one by one. Which directories are trees: treeroots.py, by their tools' records.
"""

from __future__ import annotations

import re
from typing import TypeVar

from dejima.core.audit.caches import cache_mount_findings, changes_value, home_cache_findings
from dejima.core.audit.cargo_verify import build_output_findings, vendor_judgement
from dejima.core.audit.installs import TOOL_STATE, conda_tampering, npm_tampering, python_tampering, recorded
from dejima.core.audit.isolation import attempted, judged
from dejima.core.audit.model import Finding, View, finding, first_few
from dejima.core.audit.npm_verify import npm_judgement
from dejima.core.audit.pinned import TreeJudgement
from dejima.core.audit.python_verify import python_findings, rewritten_as_made
from dejima.core.audit.treeroots import (
    DEPENDENCY_KINDS,
    ENVIRONMENT_RECORDS,
    PYTHON_KINDS,
    Tree,
    changed_in_tree,
    in_tree,
    sort_changes,
)
from dejima.core.audit.yarn_verify import yarn_judgement
from dejima.core.snapshot import Change

_STARTUP = re.compile(r"(?:\.pth|/sitecustomize\.py|/usercustomize\.py|/_virtualenv\.py|/bin/activate[^/]*|"
                      r"/pyvenv\.cfg|/pip\.conf)\Z")
_PTH_CODE = re.compile(r"^\s*import[\s\t]", re.MULTILINE)
_PYC = re.compile(r"(?:^|/)__pycache__/[^/]+\.pyc\Z|\.pyc\Z")
_LISTED = 5
T = TypeVar("T")


def _summary(paths: list[str]) -> str:
    return first_few(paths, _LISTED)


# What _in_place can say is in place (no "added"): a set, asked of each of an install's 20k changes.
_IN_PLACE = frozenset({"mode", "owner", "link-target", "modified"})


def _in_place(change: Change, view: View) -> bool:
    """Modified where it lies rather than installed anew: a reinstall creates files, which changes
    their directory; a tamperer rewrites a file, or its mode or owner, and leaves its directory as it
    was. (Inode numbers cannot tell: the filesystem reuses a freed one at once.) A link's target is
    never changed in place, only by a new link: one whose target changed is judged as installed
    anew, by what it points to (npm_verify holds a .bin link to the bin the lockfile records)."""
    if change.what not in _IN_PLACE:
        return False
    parent = change.path.rpartition("/")[0]
    old, new = view.before.get(parent), view.after.get(parent)
    return old is not None and new is not None and (old.inode, old.ctime_ns) == (new.inode, new.ctime_ns)


def _group(view: View, kinds: tuple[str, ...]) -> dict[Tree, list[Change]]:
    """The changes inside each recognised tree of these kinds (each change in its innermost tree)."""
    return {tree: changes for tree, changes in tree_groups(view).items() if tree.kind in kinds}


def tree_groups(view: View) -> dict[Tree, list[Change]]:
    """The changes inside each recognised tree, grouped once per audit: the dependency, environment
    and build-output rules each take their kinds (one pass over an install's 20k changes, not three)."""
    groups: dict[Tree, list[Change]] | None = view.memo.get("tree-groups")  # type: ignore[assignment]
    if groups is None:
        groups = view.memo["tree-groups"] = sort_changes(view)
    return groups


def _build_output(view: View) -> list[Finding]:
    """Cargo rewrites its target directory in place at every build and hard-links its outputs: one
    finding per directory (cargo may run what is there without building it again: cargo_verify.py)."""
    return [f for (_, root), changes in _group(view, ("cargo",)).items()
            for f in build_output_findings(root, changes, in_home=view.kind == "home")]


# One part of a dependency tree's judgement, per tree root: what it gave, or (None) the failures
# that stand for it (isolation: a part that fails is a finding there, the other trees still judged).
Parts = dict[str, tuple[T | None, list[Finding]]]


def tree_judgements(view: View) -> Parts[TreeJudgement | None]:
    """Each dependency tree verified against its lockfile's pins (npm, yarn 1, cargo vendor), its
    finding waiting for ``tree_tampering``'s lines (None: a tree of no kind verified). The two
    parts of the tree rules' heaviest work: the rule stages run them on two processes."""
    return {root: attempted(view, "B07", root, _judgement, kind, root, changes, view)
            for (kind, root), changes in _group(view, DEPENDENCY_KINDS).items()}


def tree_tampering(view: View) -> Parts[list[str]]:
    """What each dependency tree's changes hold that no install makes, found beside the verification:
    files modified in place, and for npm what no install of any lockfile makes (installs.npm_tampering)."""
    return {root: attempted(view, "B07", root, _tampering, kind, root, changes, view)
            for (kind, root), changes in _group(view, DEPENDENCY_KINDS).items()}


def dependency_findings(view: View, judgements: Parts[TreeJudgement | None],
                        tampering: Parts[list[str]]) -> list[Finding]:
    """Each dependency tree's one finding, from its two parts; a tree whose part failed has the failure instead."""
    found: list[Finding] = []
    for (_, root), changes in _group(view, DEPENDENCY_KINDS).items():
        (judgement, failed), (tampered, failed_too) = judgements[root], tampering[root]
        if failed or failed_too or tampered is None:
            found.extend([*failed, *failed_too])
        elif judgement is not None:
            found.append(judgement.finding(tampered))
        elif tampered:
            found.append(finding("B07", "high", root, f"{len(tampered)} change(s) no install makes: "
                                 f"{_summary(tampered)}; delete {root} and reinstall on the host",
                                 changes_value(changes), remedy="reinstall"))
        else:
            found.append(finding("B07", "low", root, f"dependency tree rewritten ({len({c.path for c in changes})} "
                                 "entries, e.g. an install in the session); reinstall on the host to be sure",
                                 changes_value(changes), remedy="reinstall"))
    return found


def _dependencies(view: View) -> list[Finding]:
    """Each dependency tree judged on its own (isolation): one whose judgement fails is a finding there."""
    return dependency_findings(view, tree_judgements(view), tree_tampering(view))


def _tampering(kind: str, root: str, changes: list[Change], view: View) -> list[str]:
    in_place = [f"{c.path}: modified in place, not installed anew" for c in changes if c.what in _IN_PLACE
                and _in_place(c, view) and c.path[len(root) + 1:] not in TOOL_STATE]
    return in_place if kind == "cargo-vendor" else in_place + npm_tampering(root, changes, view)


def _judgement(kind: str, root: str, changes: list[Change], view: View) -> TreeJudgement | None:
    if kind == "cargo-vendor":  # held to Cargo.lock's checksums
        return vendor_judgement(root, changes, view)
    return npm_judgement(root, changes, view) or yarn_judgement(root, changes, view)  # held to its lockfile's pins


def _stray_node_modules(view: View) -> list[Finding]:
    """Node's require() looks in every directory named node_modules up from the requiring file, made
    by npm or not: code put in one that no package manager made (no record of it, see treeroots.py)
    shadows the project's packages for the code below it, and runs on the host's next `node` or
    `npm test`. One finding per such directory; the files in it get the ordinary rules too. A link
    called node_modules is one too: require() follows it into a directory of any name."""
    groups: dict[str, list[Change]] = {}
    links: list[Finding] = []
    known = changed_in_tree(view)
    for path, change in view.changed.items():
        if known.get(path):
            continue  # in a tree (told once per directory): neither rule below judges it
        if change.after is not None and change.after.kind == "symlink" and \
                path.rpartition("/")[2] == "node_modules" and not in_tree(path, view):
            links.append(finding("B07", "high", path, f"a link called node_modules, to {change.after.target}: "
                                 "require() below it loads what it points to, which no package manager made here; "
                                 "delete it", changes_value([change]), remedy="restore"))
        if "node_modules/" not in path or change.after is None or change.after.kind == "dir":
            continue
        head, below, _ = ("", "node_modules/", "") if path.startswith("node_modules/") else \
            path.partition("/node_modules/")
        if below and not in_tree(path, view):
            groups.setdefault(f"{head}/node_modules" if head else "node_modules", []).append(change)
    return [finding("B07", "high", root, f"{len(changes)} file(s) in a node_modules that no package manager made "
                    f"(no record of an install beside it: {_summary(sorted(c.path for c in changes))}): require() "
                    "below it loads them instead of the installed packages; delete it", changes_value(changes),
                    remedy="reinstall")
            for root, changes in groups.items()] + links


def _environments(view: View) -> list[Finding]:
    """Python environments and install targets: one finding each, and the start-up files changed in
    an environment that was there. In the workspace, each is held to the wheels its lockfile pinned
    (python_verify.py). Else what an installer writes, as its RECORDs say, is an install: low, since
    those RECORDs are written in the tree too. What no installer writes is high: a file no RECORD
    lists, a .pth with an import line that is none of the installers' own. In the session's home (the
    workflows put uv's and poetry's environments there) only sessions run them, inside the boundary:
    medium."""
    return [f for (kind, root), changes in _group(view, PYTHON_KINDS).items()
            for f in judged(view, "B10", root, _environment, kind, root, changes, view)]


def _environment(kind: str, root: str, changes: list[Change], view: View) -> list[Finding]:
    home = view.kind == "home"
    found = []
    tampered = (conda_tampering if kind == "conda" else python_tampering)(root, changes, view)
    record = ENVIRONMENT_RECORDS.get(kind)
    created = root not in view.before or record is not None and f"{root}/{record}" not in view.before
    rest = []
    for change in changes:
        new = change.after
        if created or new is None or new.kind != "file" or not _STARTUP.search(change.path) or \
                change.path.endswith(".pth") and not _PTH_CODE.search(view.text(change.path) or "") or \
                recorded(change.path, root, view, kind) or \
                kind == "python" and rewritten_as_made(root, change, view):  # part of its install, or as venv made it
            rest.append(change)
            continue
        found.append(finding("B10", "medium" if home else "critical", change.path, "runs at every start of "
                             f"this Python environment ({change.what})", new.sha256 or "", remedy="reinstall"))
    if (verified := python_findings(kind, root, changes, view, tampered)) is not None:  # held to uv.lock's pins
        return [*found, *verified]
    paths = sorted({c.path for c in rest})
    where = "" if home else " on the host"
    what = "install target" if kind == "python-target" else "environment"
    if tampered:
        found.append(finding("B10", "medium" if home else "high", root, f"{len(tampered)} change(s) no installer "
                             f"makes: {_summary(tampered)}; recreate the {what}{where}",
                             changes_value(changes), remedy="reinstall"))
    elif rest:
        done = "created in the session" if created else "changed"
        found.append(finding("B10", "low", root, f"a Python {what} {done} ({len(paths)} entries, e.g. "
                             f"{_summary(paths)}): each file matches a RECORD or is the {what}'s own; neither is "
                             f"held to the packages or to venv's templates yet: recreate it{where} to be sure",
                             changes_value(rest), remedy="reinstall"))
    return found


def _bytecode(view: View) -> list[Finding]:
    """Sessions run with PYTHONDONTWRITEBYTECODE, so Python itself writes no bytecode there: a .pyc
    written in a session was written on purpose, and Python trusts one whose header matches its
    source's mtime and size (research B11)."""
    written = [c for c in view.changes if c.path.endswith(".pyc") and c.what in ("added", "modified") and
               c.after is not None and c.after.kind == "file" and _PYC.search(c.path) and not in_tree(c.path, view)]
    if not written:
        return []
    paths = sorted(c.path for c in written)
    return [finding("B11", "high", paths[0], f"{len(paths)} bytecode file(s) written in the session "
                    f"({_summary(paths)}): Python may run them instead of the source; delete them",
                    changes_value(written), remedy="restore")]


def tree_findings(view: View, dependencies: bool = True) -> list[Finding]:
    """Each tree judged on its own (isolation), and each kind of tree: one that fails is a finding
    there. ``dependencies``: False when the caller judges the dependency trees itself, in two parts
    (``tree_judgements``, ``tree_tampering``, ``dependency_findings``)."""
    if view.kind == "cache":
        return judged(view, "M01", "", cache_mount_findings, view)
    if view.kind == "home":
        return [*judged(view, "M01", "", home_cache_findings, view), *_environments(view),
                *judged(view, "B07", "", _build_output, view)]
    return [*(_dependencies(view) if dependencies else []), *judged(view, "B07", "", _stray_node_modules, view),
            *_environments(view),
            *judged(view, "B07", "", _build_output, view), *judged(view, "B11", "", _bytecode, view)]
