"""Path patterns of the catalogue, and a matcher fast enough to ask about every file of a large
workspace at session start.

Syntax (paths relative to a mount's root, '/'-separated): ``*`` and ``?`` stay inside one
component, ``**/`` is any number of directories (none included), ``/**`` at the end is
everything below, ``{a,b}`` is either. Matching is case-sensitive: case tricks are the name
rules' business (names.py), which match again after normalising.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache


def _translate(glob: str) -> str:
    out, i = [], 0
    while i < len(glob):
        if glob.startswith("**/", i):
            out.append("(?:[^/]*/)*")
            i += 3
        elif glob.startswith("/**", i) and i + 3 == len(glob):
            out.append("/.*")
            i += 3
        elif glob[i] == "*":
            out.append("[^/]*")
            i += 1
        elif glob[i] == "?":
            out.append("[^/]")
            i += 1
        elif glob[i] == "{":
            end = glob.index("}", i)
            out.append("(?:" + "|".join(_translate(part) for part in glob[i + 1:end].split(",")) + ")")
            i = end + 1
        else:
            out.append(re.escape(glob[i]))
            i += 1
    return "".join(out)


@lru_cache(maxsize=None)
def compile_glob(glob: str) -> re.Pattern[str]:
    return re.compile(_translate(glob) + r"\Z", re.DOTALL)


def matches(glob: str, path: str) -> bool:
    return compile_glob(glob).match(path) is not None


_WILD = re.compile(r"[*?{]")


def _selector(glob: str) -> tuple[str, str] | None:
    """How to pre-select the paths a glob can match, most selective first: ("name", n) when its
    last component is literal, ("prefix", p) for the literal start of a wild last component,
    ("dir", d) for a literal directory (at any depth), ("suffix", s) for the literal end of the
    last component; None: try it on every path."""
    parts = glob.split("/")
    last = parts[-1]
    wild = [m.start() for m in _WILD.finditer(last)]
    if not wild:
        return ("name", last)
    if wild[0] >= 2:
        return ("prefix", last[:wild[0]])
    literal_dirs = [part for part in parts[:-1] if not _WILD.search(part)]
    if literal_dirs:
        return ("dir", literal_dirs[-1])
    tail = last[wild[-1] + 1:]
    return ("suffix", tail) if len(tail) >= 2 and not last.endswith("**") else None


Item = tuple[re.Pattern[str], object]


class GlobIndex:
    """Which of many (glob, value) pairs match a path, without trying every glob on every path."""

    def __init__(self, pairs: Iterable[tuple[str, object]]) -> None:
        self.tables: dict[str, dict[str, list[Item]]] = {k: {} for k in ("name", "prefix", "suffix", "dir")}
        self.always: list[Item] = []
        for glob, value in pairs:
            for alternative in _expand(glob):
                item = (compile_glob(alternative), value)
                how = _selector(alternative)
                if how is None:
                    self.always.append(item)
                else:
                    self.tables[how[0]].setdefault(how[1], []).append(item)
        self.prefix_lengths = sorted({len(p) for p in self.tables["prefix"]})
        self.suffix_lengths = sorted({len(p) for p in self.tables["suffix"]})
        # A negative test for most paths in a few C calls: no glob selected by the file name, and no
        # directory of the path selects one.
        self.names = frozenset(self.tables["name"])
        self.prefixes = tuple(self.tables["prefix"])
        self.suffixes = tuple(self.tables["suffix"])
        self.directories = frozenset(self.tables["dir"])

    def may_match(self, path: str) -> bool:
        """False only when no glob can match ``path`` (a fast test before ``lookup``)."""
        if self.always:
            return True
        directories, _, name = path.rpartition("/")
        if name in self.names or name.startswith(self.prefixes) or name.endswith(self.suffixes):
            return True
        return bool(directories) and not self.directories.isdisjoint(directories.split("/"))

    def candidates(self, path: str) -> list[Item]:
        *directories, name = path.split("/")
        names, prefixes, suffixes = self.tables["name"], self.tables["prefix"], self.tables["suffix"]
        found = list(names.get(name, ()))
        for length in self.prefix_lengths:
            found += prefixes.get(name[:length], ())
        for length in self.suffix_lengths:
            found += suffixes.get(name[-length:], ())
        if directories:
            dirs = self.tables["dir"]
            for directory in directories:
                found += dirs.get(directory, ())
        return found + self.always

    def lookup(self, path: str) -> list[object]:
        """Every value whose glob matches, in no particular order, without duplicates."""
        seen: list[object] = []
        for pattern, value in self.candidates(path):
            if value not in seen and pattern.match(path) is not None:
                seen.append(value)
        return seen


def _expand(glob: str) -> list[str]:
    """Braces at the top level become separate globs, so each can be pre-selected on its own."""
    start = glob.find("{")
    if start < 0:
        return [glob]
    end = glob.index("}", start)
    return [expanded for part in glob[start + 1:end].split(",")
            for expanded in _expand(glob[:start] + part + glob[end + 1:])]
