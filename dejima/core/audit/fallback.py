"""Generic rules (research §4.10) for what the catalogue does not name yet: lists rot, so a new
file in an unlisted dot-directory or a new root config-as-code file is still shown for review; and
a change to a path a session's manifest asks to watch (X07) that no rule judges."""

from __future__ import annotations

import re
from itertools import chain, filterfalse
from operator import attrgetter

from dejima.core.audit.catalogue import INERT_DIRS
from dejima.core.audit.configs import rules_for
from dejima.core.audit.isolation import judged
from dejima.core.audit.manifest_watch import Watch, asked, asked_by, catalogue_knows
from dejima.core.audit.model import Finding, View, finding
from dejima.core.audit.treeroots import in_tree
from dejima.core.audit.trees import tree_groups
from dejima.core.snapshot import Change

_CONFIG_AS_CODE = re.compile(r"^[^/]*(rc|rc\.[^/]+|\.config\.(js|cjs|mjs|ts)|config\.(py|rb))\Z")


def _in_dot_directory(path: str) -> bool:
    return any(part.startswith(".") and part not in (".", "..") for part in path.split("/")[:-1])


_INERT = re.compile("(?:^|/)(?:" + "|".join(re.escape(directory) for directory in INERT_DIRS) + ")")


def _inert(path: str) -> bool:
    return _INERT.search(path) is not None


def _unlisted(path: str, change: Change, view: View) -> list[Finding]:
    new = change.after
    if new is None or new.kind == "dir" or in_tree(path, view) or ".git" in path.split("/") or _inert(path) or \
            rules_for(path):
        return []  # the catalogue judged it (a quiet key change is a verdict too)
    value = new.sha256 or new.target or new.kind
    if _in_dot_directory(path):
        return [finding("X01", "low", path, f"{change.what} in a dot-directory that tools may read as "
                        "configuration", value, remedy="restore")]
    if change.what == "added" and _CONFIG_AS_CODE.match(path):
        return [finding("X02", "medium", path, "a new configuration file at the root that may be code", value,
                        remedy="restore")]
    return []


def fallback_findings(view: View, found: list[Finding]) -> list[Finding]:
    """Each path no rule flagged judged on its own (isolation): one that fails is a finding there."""
    if view.kind != "workspace":
        return []
    flagged = {f.path for f in found}
    # A path in a recognised tree is judged by the tree rules (``_unlisted`` says nothing of it):
    # those the tree rules grouped are passed by here, not asked one by one (20k in an install).
    try:
        flagged.update(map(attrgetter("path"), chain.from_iterable(tree_groups(view).values())))
    except Exception:  # noqa: S110 - each path is then asked, and a failure judged there
        pass
    changed = view.changed
    return [f for path in filterfalse(flagged.__contains__, changed)  # picked in C: an install's 20k passed by
            for f in judged(view, "X01/X02", path, _unlisted, path, changed[path], view)]


def _watched_change(change: Change) -> tuple[str, str] | None:
    """(what happened, the value its fingerprint binds) for a change of content or existence; None
    for the rest (a new executable bit is F05's, an owner F06's, wherever the file is)."""
    old, new = change.before, change.after
    if change.what == "removed" and old is not None and old.kind != "dir":
        return "deleted", f"removed:{old.sha256 or old.target or old.kind}"
    if new is None or new.kind == "dir" or change.what not in ("added", "modified", "type", "link-target"):
        return None
    what = {"added": "created", "modified": "modified", "type": f"now a {new.kind}"}.get(
        change.what, f"now a link to {new.target}")
    return what, new.sha256 or new.target or new.kind


def watch_findings(view: View, found: list[Finding], watch: tuple[Watch, ...]) -> list[Finding]:
    """X07: a path a session's manifest watches, changed, where no rule found anything and none
    knows the path (the catalogue's rules are finer: their silence is a verdict)."""
    if view.kind != "workspace" or not watch:
        return []
    flagged, covered = {f.path for f in found}, asked(watch, start=False)
    seen: dict[str, list[tuple[str, str]]] = {}
    for change in view.changes:
        path = change.path
        if path in flagged or not covered(path) or catalogue_knows(path) or in_tree(path, view):
            continue
        if (change_seen := _watched_change(change)) is not None:
            seen.setdefault(path, []).append(change_seen)
    out = []
    for path, changes in seen.items():
        entry = asked_by(path, watch)
        assert entry is not None
        what = ", ".join(dict.fromkeys(w for w, _ in changes))
        out.append(finding("X07", "medium", path, f"{what}; watched by {entry.source}'s [audit] watch",
                           "\0".join(v for _, v in changes), remedy="restore"))
    return out
