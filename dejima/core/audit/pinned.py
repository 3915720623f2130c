"""What a dependency tree's verification against its lockfile found, and the one finding that says
it (issue 32): shared by the verifiers of each tool's trees (npm_verify.py, cargo_verify.py).

Each verifier gathers the files the session wrote in a package (``Wanted``), keyed by the pinned
artifact that must hold them; ``hold`` asks the artifacts' reader for them all at once and compares
each file with the artifact's entry of its path. ``tree_finding`` then says it: what differs, each
named (high); what could not be held to a pin, and why (medium, with what would verify it);
else the files verified (low).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from operator import attrgetter, itemgetter
from typing import NamedTuple

from dejima.core.audit.caches import changes_value
from dejima.core.audit.model import Artifact, Finding, View, finding, first_few
from dejima.core.snapshot import Change

_LISTED = 10
_PATH, _HASH, _PACKAGE = attrgetter("path"), attrgetter("after.sha256"), attrgetter("package")  # got in C
_ABSENT = object()  # what an artifact holds at a path it does not hold (equal to no file's hash)


@dataclass
class TreeVerdict:
    lockfile: str
    problems: list[str] = field(default_factory=list)  # what no install from the lockfile makes
    unverified: list[str] = field(default_factory=list)  # what cannot be held to a pin, and why
    files: int = 0
    packages: set[str] = field(default_factory=set)
    pinned: bool = True  # ``lockfile`` pinned the tree at the start; else it names what the files were held to
    also: str = ""  # said after the count: what of it was held to something else (a venv's seeds)


class Wanted(NamedTuple):
    """A file the session wrote in a package, to be compared with its pinned artifact's entry."""

    path: str  # mount-relative
    inside: str  # its path inside the package (the artifact's entry)
    sha256: str | None
    package: str  # the package whose artifact holds it, as the findings name it
    excused: bool = False  # its package's own install script may write it (npm's hasInstallScript)


class Held(NamedTuple):
    """Files a verifier took together (a package's, from a run of its directories), each wanted as
    ``Wanted(path, path[cut:], its hash, package, excused)``: compared in C, made one by one only
    where its artifact differs (an install's 20k files would otherwise cost a tuple each)."""

    changes: list[Change]  # each a file added or modified (its ``after`` a file's entry)
    cut: int  # where a path's part inside the package begins
    package: str
    excused: bool = False

    def each(self) -> list[Wanted]:
        cut, package, excused = self.cut, self.package, self.excused
        return [Wanted(c.path, c.path[cut:], _HASH(c), package, excused) for c in self.changes]


def lockfile_above(tree: str, view: View, names: tuple[str, ...]) -> str | None:
    """The lockfile that governs a tree: beside it, or in a directory above (a workspace's member
    follows the root's lockfile); at the start or the end."""
    directory = tree.rpartition("/")[0]
    while True:
        for name in names:
            path = f"{directory}/{name}" if directory else name
            if path in view.before or path in view.after:
                return path
        if not directory:
            return None
        directory = directory.rpartition("/")[0]


def hold(verdict: TreeVerdict, wanted: Mapping[str, Sequence[Wanted | Held]], view: View,
         artifact_name: str) -> None:
    """Each wanted file against its artifact (``wanted``: artifact key -> its files)."""
    reader = view.artifacts
    got: dict[str, Artifact | str] = reader(sorted(wanted)) if reader is not None and wanted else {}
    for key, files in wanted.items():
        artifact = got.get(key, f"no cache to read its {artifact_name} from")
        if isinstance(artifact, str):
            verdict.unverified.append(f"{_count(files)} file(s) of {files[0].package}: {artifact}")
            continue
        entries, packages = artifact.files, verdict.packages
        if _all_held(files, entries):
            verdict.files += _count(files)  # every file its artifact's (an install's are)
            packages.update(map(_PACKAGE, files))
            continue
        built: dict[str, int] = {}
        verified = 0
        for path, inside, sha256, package, excused in _each(files):  # unpacked at once: read per file
            expected = entries.get(inside)
            if expected is not None and sha256 == expected:
                verified += 1
                packages.add(package)
            elif excused:
                built[package] = built.get(package, 0) + 1
            elif expected is None:
                verdict.problems.append(f"{path}: a file its package's {artifact_name} does not hold")
            else:
                verdict.problems.append(f"{path}: not the content of its package's {artifact_name}")
        verdict.files += verified
        verdict.unverified.extend(f"{count} file(s) of {package} that are not its {artifact_name}'s, as its install "
                                  "script (the lockfile records one) may write them"
                                  for package, count in sorted(built.items()))


def _all_held(files: Sequence[Wanted | Held], entries: dict[str, str]) -> bool:
    """Whether each file is its artifact's entry of its path, the files of a Held compared in C
    (their paths cut, looked up and let go one by one)."""
    hashes: list[str | None] = []
    expected: list[object] = []
    for item in files:
        if isinstance(item, Held):
            hashes.extend(map(_HASH, item.changes))
            expected.extend(map(entries.get, map(itemgetter(slice(item.cut, None)), map(_PATH, item.changes)),
                                repeat(_ABSENT)))
        else:
            hashes.append(item.sha256)
            expected.append(entries.get(item.inside, _ABSENT))
    return None not in hashes and expected == hashes


def _each(files: Sequence[Wanted | Held]) -> list[Wanted]:
    return [one for item in files for one in (item.each() if isinstance(item, Held) else (item,))]


def _count(files: Sequence[Wanted | Held]) -> int:
    return sum(len(item.changes) if isinstance(item, Held) else 1 for item in files)


def listed(items: list[str]) -> str:
    return first_few(items, _LISTED, "; ", "; and ")


@dataclass(frozen=True)
class TreeJudgement:
    """A tree's verdict and how its one finding says it, before the lines of the checks beside
    the verification are known (``finding``): the rule stages may run those on another process."""

    tree: str
    verdict: TreeVerdict
    value: str  # changes_value of the tree's changes
    remedy: str
    unit: str = "package"
    idle: str | None = None
    lead: str = ""
    rule: str = "B07"

    def finding(self, tampered: list[str]) -> Finding:
        """The tree's one finding: high with what differs (``tampered``: what other checks found
        too), medium with what could not be verified, else low with what was."""
        verdict, tree, rule, lead = self.verdict, self.tree, self.rule, self.lead
        problems = [*tampered, *verdict.problems]
        as_pinned = " as the session's start had it" if verdict.pinned else ""
        verified = f"verified {verdict.files} file(s) of {len(verdict.packages)} {self.unit}(s) against " \
            f"{verdict.lockfile}{as_pinned}{verdict.also}"
        if problems:
            source = f" from {verdict.lockfile}" if verdict.pinned else ""  # nothing pinned: not the seeds' doing
            return finding(rule, "high", tree, f"{lead}{len(problems)} change(s) no install{source} "
                           f"makes: {listed(problems)}; {self.remedy}", self.value, remedy="reinstall")
        if verdict.unverified:
            # Nothing verified: no lockfile to name (it may not have been there at the start), only why.
            done = verified if verdict.files else "no file verified"
            return finding(rule, "medium", tree, f"{lead}{done}; {len(verdict.unverified)} not verifiable: "
                           f"{listed(verdict.unverified)}; to be sure, {self.remedy}", self.value, remedy="reinstall")
        return finding(rule, "low", tree, lead + (self.idle if self.idle is not None and not verdict.files
                                                  else verified), self.value, remedy="reinstall")


def tree_finding(tree: str, verdict: TreeVerdict, changes: list[Change], tampered: list[str], remedy: str,
                 unit: str = "package", idle: str | None = None, lead: str = "", rule: str = "B07") -> Finding:
    """The tree's one finding (TreeJudgement.finding). ``idle``: what to say instead when nothing
    was verified and nothing needed to be (the tool only rewrote its own records); ``lead``: the
    words the evidence begins with; ``rule``: B07, B10 for a Python environment."""
    return TreeJudgement(tree, verdict, changes_value(changes), remedy, unit, idle, lead, rule).finding(tampered)
