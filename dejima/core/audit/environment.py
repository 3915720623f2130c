"""What a shell or an interpreter loads from the tree without being asked (research E02, E10):
files an already-allowed .envrc sources, and Python modules that shadow the standard library."""

from __future__ import annotations

import re
import shlex

from dejima.core.audit.isolation import judged
from dejima.core.audit.model import Finding, View, finding, resolve

# direnv stdlib functions that read another file; `use flake`/`use nix` read these by default.
_LOADERS = {"dotenv": ".env", "dotenv_if_exists": ".env", "source_env": ".envrc", "source_env_if_exists": ".envrc",
            "watch_file": None, "source_up": None, "source_up_if_exists": None}
_NIX = {"flake": ("flake.nix", "flake.lock"), "nix": ("shell.nix", "default.nix")}
# Names Python resolves from the script's directory before the standard library.
SHADOWED = frozenset(("json", "random", "typing", "site", "pytest", "setuptools", "unittest", "os", "sys", "re",
                      "subprocess", "socket", "ssl", "http", "urllib", "logging", "enum", "abc", "types",
                      "string", "io", "pathlib", "shutil", "tempfile", "base64", "hashlib", "inspect", "pip",
                      "sitecustomize", "usercustomize", "encodings", "codecs", "collections", "functools",
                      "asyncio", "email", "copy", "time", "datetime", "argparse", "glob"))


def envrc_sources(envrc: str, text: str) -> list[str]:
    """Mount-relative files an .envrc loads (direnv hashes only the .envrc itself)."""
    base = envrc.rpartition("/")[0]
    found: list[str] = []
    for line in text.splitlines():
        try:
            words = shlex.split(line, comments=True)
        except ValueError:
            continue
        if not words:
            continue
        if words[0] in _LOADERS:
            default = _LOADERS[words[0]]
            names = words[1:] or ([default] if default else [])
        elif words[0] == "use" and len(words) > 1 and words[1] in _NIX:
            names = list(_NIX[words[1]])
        else:
            continue
        found.extend(t for t in (resolve(base, n) for n in names if not n.startswith("-")) if t)
    return found


def _envrcs(view: View) -> list[str]:
    """The .envrc files (at the start) of the directories above each changed path: the ones that
    can load it (they mostly load files beside or below them). Each directory is asked once."""
    found: dict[str, None] = {}
    seen: set[str] = set()
    for path in view.changed:
        directory = path.rpartition("/")[0]
        while directory not in seen:
            seen.add(directory)
            envrc = f"{directory}/.envrc" if directory else ".envrc"
            entry = view.before.get(envrc)
            if entry is not None and entry.kind == "file":
                found[envrc] = None
            if not directory:
                break
            directory = directory.rpartition("/")[0]
    return list(found)


def _loaded(path: str, view: View) -> list[Finding]:
    found = []
    for source in envrc_sources(path, view.text(path, "before") or ""):
        change = view.changed.get(source)
        if change is not None and change.after is not None:
            found.append(finding("E02", "high", source, f"loaded by the already-allowed {path}, which direnv "
                                 "does not re-check when this file changes", change.after.sha256 or "",
                                 remedy="restore"))
    return found


def _direnv(view: View) -> list[Finding]:
    """Each .envrc judged on its own (isolation): one that fails is a finding there."""
    return [f for path in _envrcs(view) for f in judged(view, "E02", path, _loaded, path, view)]


_TOP_MODULE = re.compile(r"(?:src/)?[^/]+\.py")  # where `python x.py` or src/ layouts import from


def _shadowing(view: View) -> list[Finding]:
    found = []
    for path, change in view.changed.items():
        if change.what != "added" or not path.endswith(".py") or not _TOP_MODULE.fullmatch(path):
            continue
        module = path.rsplit("/", 1)[-1][:-3]
        if module in SHADOWED:
            found.append(finding("E10", "medium", path, f"a module named {module!r}: Python imports it instead of "
                                 "the standard one when run from here", change.after.sha256 or "" if change.after
                                 else "", remedy="restore"))
    return found


def environment_findings(view: View) -> list[Finding]:
    if view.kind != "workspace":
        return []
    return [*_direnv(view), *judged(view, "E10", "", _shadowing, view)]
