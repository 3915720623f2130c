"""Correlations and content signals (research §4.5-4.6): they raise what other rules found, and
name the files behind it; they never make a finding out of content alone.

C3  a hiding primitive (git excludes, .gitignore, showUntrackedFiles=no, index flags)
    covers a flagged path: the flagged finding goes up a level, the hider is reported high.
C4  a config value points at a file this session wrote: up a level, and that file is listed.
C8  an agent instruction file's new text names another flagged file: that file goes up a level.
Content signals (dejima.core.audit.signals) raise a finding whose new text holds one.
"""

from __future__ import annotations

from collections.abc import Callable
from fnmatch import fnmatchcase
from operator import methodcaller

from dejima.core.audit.git import index_hidden
from dejima.core.audit.isolation import correlated
from dejima.core.audit.model import Finding, View, finding, rank
from dejima.core.audit.signals import content_signals
from dejima.core.audit.values import referenced_changes

_INSTRUCTIONS = ("A06",)
_NOT_HIDDEN = ("G20", "B07", "B10", "B11", "M01")


def _signals(item: Finding, view: View) -> Finding:
    entry = view.entry(item.path)
    if item.key:
        text = item.value
    elif entry is not None and entry.kind == "file":
        text = "\n".join(view.new_lines(item.path))
    else:
        return item
    signals = content_signals(text)
    return item.raise_by("content: " + ", ".join(signals)) if signals else item


def _referenced(item: Finding, view: View) -> list[Finding]:
    """C4: a config value that names a file written in this session: the finding raised, and that file."""
    if not item.key:
        return [item]
    targets = [t for t in referenced_changes(item.value, view, item.path.rpartition("/")[0]) if t != item.path]
    if not targets:
        return [item]
    raised = item.raise_by(f"points at {', '.join(targets)}, written in this session")
    extra = []
    for target in targets:
        entry = view.entry(target)
        extra.append(finding(item.rule, raised.severity, target, f"run through {item.path} ({item.key})",
                             entry.sha256 or "" if entry else "", remedy="restore"))
    return [raised, *extra]


def _each(view: View, found: list[Finding], correlate_one: Callable[[Finding, View], list[Finding]]) -> list[Finding]:
    """A correlation of one finding at a time, on each on its own (isolation: one that fails leaves
    its finding as it was, and says so): the findings as raised, then what it added."""
    kept, added = [], []
    for item in found:
        head, *rest = correlated(view, item.rule, [item], lambda items: correlate_one(items[0], view), item.path)
        kept.append(head)
        added.extend(rest)
    return kept + added


def _hide_patterns(view: View) -> list[tuple[str, str, str]]:
    """(hiding file, its directory, pattern) for every hiding line added in this session."""
    patterns = []
    for path in filter(methodcaller("endswith", (".gitignore", "/info/exclude")), view.changed):  # in C: most are not
        name = path.rsplit("/", 1)[-1]
        if name == ".gitignore" or path.endswith("/info/exclude"):
            base = "" if "/info/exclude" in f"/{path}" else path.rpartition("/")[0]
            for line in view.new_lines(path):
                line = line.strip()
                if line and not line.startswith(("#", "!")):
                    patterns.append((path, base, line))
    return patterns


def _hidden(pattern: str, base: str, path: str) -> bool:
    relative = path[len(base) + 1:] if base else path
    if base and not path.startswith(base + "/"):
        return False
    pattern = pattern.rstrip("/")
    anchored = "/" in pattern
    pattern = pattern.lstrip("/").replace("**/", "*")
    parts = relative.split("/")
    candidates = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)] if anchored else parts
    return any(fnmatchcase(candidate, pattern) for candidate in candidates)


def _hiders(found: list[Finding], view: View) -> list[Finding]:
    """C3: a new ignore pattern or setting that hides a flagged path from `git status`."""
    patterns = _hide_patterns(view)
    flagged_in_index = index_hidden(view)
    hide_all = next((f.path for f in found if f.key == "status.showuntrackedfiles"
                     and f.value.strip().lower() in ("no", "false", "off", "0")), None)
    out: list[Finding] = []
    hiders: dict[tuple[str, str], list[str]] = {}
    for item in found:
        cover = next(((p, line) for p, base, line in patterns if _hidden(line, base, item.path)), None)
        if cover is None and item.path in flagged_in_index:
            cover = (flagged_in_index[item.path], "index-flags")
        # Dependency trees are ignored by design (node_modules/, .venv/): that hides nothing.
        if item.rule not in _NOT_HIDDEN and rank(item.severity) >= rank("low") and (cover or hide_all):
            hider, line = cover or (hide_all or "", "status.showuntrackedfiles")
            out.append(item.raise_by(f"hidden from git status by {hider} ({line})"))
            hiders.setdefault((hider, line), []).append(item.path)
        else:
            out.append(item)
    for (hider, line), paths in hiders.items():
        out.append(finding("G20", "high", hider, f"hides {', '.join(sorted(set(paths)))} from git status ({line})",
                           line, line, "restore"))
    return out


def _instructions(found: list[Finding], view: View) -> list[Finding]:
    """C8: new instruction text that tells the next agent to run a file flagged here."""
    mentioned: dict[str, str] = {}
    for item in found:
        if item.rule in _INSTRUCTIONS:
            text = "\n".join(view.new_lines(item.path))
            for target in referenced_changes(text, view, ""):
                mentioned.setdefault(target, item.path)
    return [item.raise_by(f"named by {mentioned[item.path]}") if item.path in mentioned and
            item.rule not in _INSTRUCTIONS else item for item in found]


def correlate(found: list[Finding], view: View) -> list[Finding]:
    found = _each(view, found, _referenced)
    found = correlated(view, "A06", found, lambda found: _instructions(found, view))
    found = _each(view, found, lambda item, view: [_signals(item, view)])
    # Only a workspace is looked at with `git status` (a tool's cache writes a .gitignore of its own).
    return correlated(view, "G20", found, lambda found: _hiders(found, view)) if view.kind == "workspace" else found
