"""Generic rules (research §4.10) for what the catalogue does not name yet: lists rot, so a new
file in an unlisted dot-directory or a new root config-as-code file is still shown for review."""

from __future__ import annotations

import re

from dejima.core.audit.catalogue import INERT_DIRS
from dejima.core.audit.configs import rules_for
from dejima.core.audit.model import Finding, View, finding
from dejima.core.audit.trees import in_tree

_CONFIG_AS_CODE = re.compile(r"^[^/]*(rc|rc\.[^/]+|\.config\.(js|cjs|mjs|ts)|config\.(py|rb))\Z")


def _in_dot_directory(path: str) -> bool:
    return any(part.startswith(".") and part not in (".", "..") for part in path.split("/")[:-1])


_INERT = re.compile("(?:^|/)(?:" + "|".join(re.escape(directory) for directory in INERT_DIRS) + ")")


def _inert(path: str) -> bool:
    return _INERT.search(path) is not None


def fallback_findings(view: View, found: list[Finding]) -> list[Finding]:
    if view.kind != "workspace":
        return []
    flagged = {f.path for f in found}
    out = []
    for path, change in view.changed.items():
        new = change.after
        if new is None or new.kind == "dir" or path in flagged or ".git" in path.split("/") or \
                _inert(path) or in_tree(path, view) or rules_for(path):
            continue  # the catalogue judged it (a quiet key change is a verdict too)
        value = new.sha256 or new.target or new.kind
        if _in_dot_directory(path):
            out.append(finding("X01", "low", path, f"{change.what} in a dot-directory that tools may read as "
                               "configuration", value, remedy="restore"))
        elif change.what == "added" and _CONFIG_AS_CODE.match(path):
            out.append(finding("X02", "medium", path, "a new configuration file at the root that may be code",
                               value, remedy="restore"))
    return out
