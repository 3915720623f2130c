"""Pattern searches over what a session wrote, in time linear in its length, whatever it holds.

Python's ``re`` backtracks: ``curl\\b[^\\n]*\\|\\s*sh`` tries, at every ``curl`` of a line, every end
of the rest of that line, and ``.*dependencies\\..*\\.registry.*`` every split of a key; text made
for it costs the square of its length or worse, and an audit a crafted file holds for hours is a
review that never happens. RE2 (Google's regular expressions, a DFA) reads each byte a bounded
number of times, so the audit searches the session's text and keys with it: a set of patterns in
one pass over the bytes (``PatternSet``), and the same for the keys of a config file.

RE2 reads UTF-8 bytes: text decoded with surrogateescape (undecodable bytes kept) is encoded back
with those bytes as ``?``, which no pattern here names. Its syntax is Python's for everything used
here (no lookaround, no backreference); ``\\b``, ``\\s`` and ``\\d`` are ASCII.
"""

from __future__ import annotations

from collections.abc import Sequence

import re2  # type: ignore[import-untyped]  # google-re2 ships no type information

_MAX_MEMORY = 64 << 20  # per compiled set: RE2 falls back to a slower, still linear, engine past it


def encoded(text: str) -> bytes:
    """``text`` as the UTF-8 bytes RE2 reads (an undecodable byte kept by surrogateescape: ``?``)."""
    return text.encode("utf-8", "replace")


def _options(ignore_case: bool = False) -> object:
    options = re2.Options()
    options.never_capture = True
    options.max_mem = _MAX_MEMORY
    options.case_sensitive = not ignore_case
    return options


class PatternSet:
    """Patterns searched together: ``matching`` gives the indices of those found in the text, in
    one pass. ``anchored``: a pattern must match the whole text (a key), not appear in it."""

    def __init__(self, patterns: Sequence[str], anchored: bool = False, ignore_case: bool = False) -> None:
        kind = re2.Set.FullMatchSet if anchored else re2.Set.SearchSet
        self._set = kind(_options(ignore_case))
        for index, pattern in enumerate(patterns):
            added = self._set.Add(pattern.encode("utf-8"))
            if added != index:
                raise ValueError(f"RE2 does not take the pattern {pattern!r}")
        self._set.Compile()
        self.size = len(patterns)

    def matching(self, data: bytes) -> list[int]:
        found = self._set.Match(data) if self.size else None
        return sorted(found) if found else []
