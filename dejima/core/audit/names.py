"""Name tricks (research §3.7 F08, G25, §4.3): names that another filesystem or a terminal reads
differently from how they look, and text with invisible characters.

A name that only matches a watched place after normalising (case folding, NFC, invisible code
points and trailing dots removed, NTFS 8.3 aliases) is what a case-insensitive host (macOS,
Windows, WSL on /mnt/c) will use as that place.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Callable
from functools import partial

from dejima.core.audit.configs import rules_for, rules_for_folded
from dejima.core.audit.isolation import judged
from dejima.core.audit.linear import PatternSet, encoded
from dejima.core.audit.model import Finding, View, finding
from dejima.core.audit.treeroots import changed_in_tree, in_tree
from dejima.core.snapshot import SnapshotEntry

# Bidi controls, zero-width and other default-ignorable code points, variation selectors, tags.
_INVISIBLE_RANGES = ((0x00AD, 0x00AD), (0x034F, 0x034F), (0x061C, 0x061C), (0x115F, 0x1160), (0x17B4, 0x17B5),
                     (0x180B, 0x180F), (0x200B, 0x200F), (0x202A, 0x202E), (0x2060, 0x206F), (0x3164, 0x3164),
                     (0xFE00, 0xFE0F), (0xFEFF, 0xFEFF), (0xFFA0, 0xFFA0), (0x1BCA0, 0x1BCA3), (0xE0000, 0xE0FFF))
INVISIBLE = re.compile("[" + "".join(f"{chr(low)}-{chr(high)}" for low, high in _INVISIBLE_RANGES) + "]")
BIDI = re.compile("[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
_WINDOWS_RESERVED = re.compile(r"(?i)^(con|prn|aux|nul|com[0-9]|lpt[0-9])(\..*)?\Z")
_GIT_NAMES = {".git": ".git", ".gitmodules": ".gitmodules", ".github": ".github"}
_SHORT_NAMES = ((re.compile(r"^git~\d+\Z"), ".git"), (re.compile(r"^gitmod~\d+\Z"), ".gitmodules"),
                (re.compile(r"^github~\d+\Z"), ".github"))
_INVISIBLE_CHARS = frozenset(chr(code) for low, high in _INVISIBLE_RANGES for code in range(low, high + 1))
# Emoji sequences join with U+200D and take U+FE0F; next to a pictograph they are not a trick. One
# that has no pictograph on either side is (searched with RE2: linear whatever the text).
_PICTOGRAPHS = "\u2190-\u2bff\U0001f000-\U0001faff"
_JOINERS = ("\u200d", "\ufe0f")
_LONE_JOINERS = PatternSet([f"(?:^|[^{_PICTOGRAPHS}]){joiner}(?:[^{_PICTOGRAPHS}]|$)" for joiner in _JOINERS])


def normalize(name: str) -> str:
    folded = unicodedata.normalize("NFC", INVISIBLE.sub("", name)).casefold().rstrip(" .")
    for pattern, long_name in _SHORT_NAMES:
        if pattern.match(folded):
            return long_name
    return folded


def invisible_in_text(text: str) -> list[str]:
    """Invisible or bidi code points in text (emoji joiners excepted), as U+XXXX."""
    if text.isascii():
        return []
    found = _INVISIBLE_CHARS.intersection(text)
    if found.intersection(_JOINERS):
        lone = {_JOINERS[index] for index in _LONE_JOINERS.matching(encoded(text))}
        found = found.difference(j for j in _JOINERS if j not in lone)
    return sorted(f"U+{ord(ch):04X}" for ch in found)


_DASH = "starts with '-' (read as an option by tools)"


def _odd_name(name: str) -> str | None:
    ascii_only = name.isascii()  # most names: no surrogate, no invisible code point, none looked for
    if not ascii_only and any("\udc80" <= ch <= "\udcff" for ch in name):
        return "is not valid UTF-8"
    if CONTROL.search(name):
        return "contains control characters"
    if not ascii_only and INVISIBLE.search(name):
        return "contains invisible or bidi characters"
    if name.startswith("-"):
        return _DASH
    if name != name.rstrip(" ."):
        return "ends with a dot or a space"
    if _WINDOWS_RESERVED.match(name) or ":" in name:
        return "is reserved or special on Windows"
    return None


# A directory's names, and how many have each case-folded and each NFC form (None: no two share one).
Forms = tuple[list[str], "Counter[str] | None", "Counter[str] | None"]

# Claude Code names each project's folder in its home after the project's path, '/' written '-'.
_DASHED_BY_ITS_TOOL = re.compile(r"\.claude/projects/-[A-Za-z0-9._-]*")


def _sibling_forms(parent: str, view: View) -> Forms:
    """A directory's names, and how many of them have each case-folded and each NFC form, counted
    once per directory (in C: a directory can hold many thousands). Most directories hold no two
    names of one form, found on their names joined: ASCII text is its own NFC form, and folded
    names all distinct share no folded form."""
    cached = view.memo.get(f"siblings:{parent}")
    if cached is None:
        siblings = view.siblings(parent)
        joined = "/".join(siblings)  # no name holds '/'
        folded = joined.casefold().split("/")
        cached = view.memo[f"siblings:{parent}"] = (
            siblings, Counter(folded) if len(set(folded)) != len(folded) else None,
            None if joined.isascii() else Counter(map(partial(unicodedata.normalize, "NFC"), siblings)))
    return cached  # type: ignore[return-value]


def _other(name: str, siblings: list[str], form: Callable[[str], str], counted: Counter[str] | None) -> str | None:
    """Another sibling with ``name``'s form (looked for only when the counts say there is one)."""
    if counted is None:
        return None
    target = form(name)
    if counted[target] <= (1 if name in siblings else 0):
        return None
    return next((s for s in siblings if s != name and form(s) == target), None)


def _collision(path: str, name: str, view: View) -> str | None:
    siblings, folded, composed = _sibling_forms(path.rpartition("/")[0], view)
    other = _other(name, siblings, str.casefold, folded)
    if other is not None:
        return f"differs only in case from {other!r}"
    other = _other(name, siblings, partial(unicodedata.normalize, "NFC"), composed)
    if other is not None:
        return f"is the same text as {other!r} in another Unicode normal form"
    return None


def _added_name(path: str, new: SnapshotEntry, view: View) -> list[Finding]:
    found = []
    name = path.rsplit("/", 1)[-1]
    value = new.sha256 or new.kind
    # An ASCII name without "git" in any case normalises to no git name: most names, not normalised.
    alias = name if _plain(name) else normalize(name)
    if alias in _GIT_NAMES and name != alias:
        found.append(finding("G25", "critical", path, f"{name!r} is {alias} on a case-insensitive or Windows "
                             "filesystem", value, remedy="restore"))
    if in_tree(path, view):
        return found  # a tree's or a cache's names are its tool's (uv's start with '-'); no tool reads config there
    reason = _odd_name(name) or _collision(path, name, view)
    if reason == _DASH and view.kind == "home" and _DASHED_BY_ITS_TOOL.fullmatch(path):
        reason = None
    normalized = "/".join(normalize(part) for part in path.split("/"))
    if normalized != path and new.kind == "file" and not rules_for(path, view.kind) and \
            rules_for_folded(normalized, view.kind):
        found.append(finding("F08", "critical", path, f"the name is {normalized!r} on a case-insensitive "
                             "filesystem, a place tools run code from", value, remedy="restore"))
    elif reason:
        found.append(finding("F08", "medium", path, f"the name {reason}", value, remedy="restore"))
    return found


def name_findings(view: View) -> list[Finding]:
    """Each new name judged on its own (isolation): one that fails is a finding there. A tree's
    name that cannot normalise to a git name is passed by: ``_added_name`` says nothing of it."""
    known = changed_in_tree(view)
    return [f for path, change in view.changed.items() if change.what == "added" and change.after is not None
            and not (known.get(path) and _plain(path.rpartition("/")[2]))
            for f in judged(view, "F08/G25", path, _added_name, path, change.after, view)]


def _plain(name: str) -> bool:
    """A name ``normalize`` is not asked of: no git name (an ASCII name without "git" in any case)."""
    return name.isascii() and "git" not in name.lower()
