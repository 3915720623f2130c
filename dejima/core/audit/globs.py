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


def _last_literal(glob: str) -> tuple[str, str] | None:
    """How to pre-select paths for a glob: ("name", n) if its last component is a literal name,
    ("suffix", s) if it is '*' + a literal suffix, ("top", d) if it starts with a literal
    directory, else None (always tried)."""
    last = glob.rsplit("/", 1)[-1]
    if not any(ch in last for ch in "*?{"):
        return ("name", last)
    if last.startswith("*") and not any(ch in last[1:] for ch in "*?{"):
        return ("suffix", last[1:])
    first = glob.split("/", 1)[0]
    if "/" in glob and not any(ch in first for ch in "*?{"):
        return ("top", first)
    return None


class GlobIndex:
    """Which of many (glob, value) pairs match a path, without trying every glob on every path."""

    def __init__(self, pairs: Iterable[tuple[str, object]]) -> None:
        self.names: dict[str, list[tuple[re.Pattern[str], object]]] = {}
        self.suffixes: dict[str, list[tuple[re.Pattern[str], object]]] = {}
        self.tops: dict[str, list[tuple[re.Pattern[str], object]]] = {}
        self.always: list[tuple[re.Pattern[str], object]] = []
        for glob, value in pairs:
            for alternative in _expand(glob):
                item = (compile_glob(alternative), value)
                how = _last_literal(alternative)
                if how is None:
                    self.always.append(item)
                else:
                    table = {"name": self.names, "suffix": self.suffixes, "top": self.tops}[how[0]]
                    table.setdefault(how[1], []).append(item)
        self.suffix_lengths = sorted({len(s) for s in self.suffixes}, reverse=True)

    def candidates(self, path: str) -> list[tuple[re.Pattern[str], object]]:
        name = path.rsplit("/", 1)[-1]
        found = list(self.names.get(name, ()))
        for length in self.suffix_lengths:
            if len(name) >= length:
                found.extend(self.suffixes.get(name[-length:], ()))
        found.extend(self.tops.get(path.split("/", 1)[0], ()))
        found.extend(self.always)
        return found

    def lookup(self, path: str) -> list[object]:
        """Every value whose glob matches, in no particular order, without duplicates."""
        seen: list[object] = []
        for pattern, value in self.candidates(path):
            if pattern.match(path) is not None and value not in seen:
                seen.append(value)
        return seen

    def any(self, path: str) -> bool:
        return any(pattern.match(path) is not None for pattern, _ in self.candidates(path))


def _expand(glob: str) -> list[str]:
    """Braces at the top level become separate globs, so each can be pre-selected on its own."""
    start = glob.find("{")
    if start < 0:
        return [glob]
    end = glob.index("}", start)
    return [expanded for part in glob[start + 1:end].split(",")
            for expanded in _expand(glob[:start] + part + glob[end + 1:])]
