"""Research C7: a lockfile whose checksum for one artifact changed while its package's version did
not is an artifact swap (the registry's bytes replaced by others), whatever the rest says.

Digests are compared per artifact and per algorithm, so a lockfile gaining a stronger hash
(sha1 -> sha512), more wheels, or upload times is not a swap.

X06: an npm lockfile edited to versions the installed tree beside it does not have. An install
writes both; an edit of the lockfile alone makes the host's next `npm ci` fetch what the session
chose, while the tree the session ran with looks like the old lockfile.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Callable, Iterator
from operator import methodcaller

from dejima.core.audit.isolation import judged
from dejima.core.audit.model import Finding, View, finding
from dejima.core.audit.treeroots import in_tree

Digests = dict[str, str]  # "package@version artifact algorithm" -> digest


def _sri(package: str, integrity: object) -> Iterator[tuple[str, str]]:
    for part in str(integrity).split():
        algorithm, _, digest = part.partition("-")
        yield f"{package} {algorithm}", digest


def _npm(text: str) -> Digests:
    """package-lock.json / npm-shrinkwrap.json (v1 dependencies and v2+ packages)."""
    document = json.loads(text)
    found: Digests = {}
    sections = [document.get("packages", {}), document.get("dependencies", {})] if isinstance(document, dict) else []
    for section in sections:
        for name, package in section.items() if isinstance(section, dict) else ():
            if isinstance(package, dict) and "integrity" in package:
                found.update(_sri(f"{name}@{package.get('version')}", package["integrity"]))
    return found


def _hashes(value: object, where: str) -> Iterator[tuple[str, str]]:
    """Every "hash"/"checksum" below a TOML package entry, keyed by its artifact (url/file)."""
    if isinstance(value, dict):
        artifact = str(value.get("url") or value.get("file") or value.get("path") or where)
        for key, item in value.items():
            if key in ("hash", "checksum") and isinstance(item, str):
                algorithm, _, digest = item.rpartition(":")
                yield f"{artifact} {algorithm or 'sha256'}", digest
            else:
                yield from _hashes(item, f"{where}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _hashes(item, f"{where}.{index}")


def _toml_packages(text: str) -> Digests:
    """Cargo.lock, uv.lock and poetry.lock: [[package]] entries with name and version."""
    found: Digests = {}
    for package in tomllib.loads(text).get("package", []):
        if isinstance(package, dict):
            found.update(_hashes(package, f"{package.get('name')}@{package.get('version')}"))
    return found


def _go_sum(text: str) -> Digests:
    found: Digests = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 3:
            algorithm, _, digest = parts[2].partition(":")
            found[f"{parts[0]}@{parts[1]} {algorithm}"] = digest
    return found


_NPM_LOCKFILE = re.compile(r"(?:^|/)(?:package-lock|npm-shrinkwrap)\.json\Z")
_READERS = ((_NPM_LOCKFILE, _npm),
            (re.compile(r"(?:^|/)(?:Cargo|uv|poetry)\.lock\Z"), _toml_packages),
            (re.compile(r"(?:^|/)go\.sum\Z"), _go_sum))
_ENDINGS = (".json", ".lock", "go.sum")


def _npm_versions(text: str) -> dict[str, str]:
    document = json.loads(text)
    packages = document.get("packages") if isinstance(document, dict) else None
    return {str(key): str(entry["version"]) for key, entry in (packages or {}).items()
            if key and isinstance(entry, dict) and "version" in entry and not entry.get("link")}


def _installed_version(view: View, project: str, key: str) -> str | None:
    document = view.json_object(f"{project}/{key}/package.json" if project else f"{key}/package.json")
    return str(document.get("version")) if document is not None else None


def _unmatched_versions(path: str, before: str, after: str, view: View) -> Finding | None:
    """X06: versions the lockfile changed to that the installed tree beside it does not have."""
    if not _NPM_LOCKFILE.search(path):
        return None
    project = path.rpartition("/")[0]
    if (f"{project}/node_modules" if project else "node_modules") not in view.after:
        return None  # nothing installed to compare with
    old, new = _npm_versions(before), _npm_versions(after)
    unmatched = []
    for key, version in sorted(new.items()):
        installed = _installed_version(view, project, key)
        if old.get(key) != version and installed is not None and installed != version:
            unmatched.append(f"{key} {version} (installed: {installed})")
    if not unmatched:
        return None
    return finding("X06", "high", path, f"the lockfile names versions the installed tree does not have: "
                   f"{', '.join(unmatched[:5])}{' ...' if len(unmatched) > 5 else ''}; the next install follows "
                   "the lockfile", "\n".join(unmatched), remedy="restore")


def _lockfile(path: str, reader: Callable[[str], Digests], view: View) -> list[Finding]:
    before, after = view.text(path, "before"), view.text(path)
    if before is None or after is None:
        return []
    try:
        old, new = reader(before), reader(after)
        unmatched = _unmatched_versions(path, before, after, view)
    except (ValueError, TypeError, AttributeError, RecursionError):
        return []  # a lockfile is data for its tool, which reports its own format errors
    found = [] if unmatched is None else [unmatched]
    swapped = sorted(artifact for artifact, digest in new.items() if artifact in old and old[artifact] != digest)
    if swapped:
        found.append(finding("X05", "high", path, f"checksum changed without a version change: "
                             f"{', '.join(swapped[:5])}{' ...' if len(swapped) > 5 else ''}",
                             "\n".join(f"{a}={new[a]}" for a in swapped), remedy="restore"))
    return found


def lockfile_findings(view: View) -> list[Finding]:
    """Each lockfile judged on its own (isolation): one that fails is a finding there."""
    found = []
    # What every reader's pattern ends with, picked in C: most paths are none.
    for path in filter(methodcaller("endswith", _ENDINGS), view.changed):
        reader = next((r for pattern, r in _READERS if pattern.search(path)), None)
        if reader is not None and not in_tree(path, view):
            found.extend(judged(view, "X05/X06", path, _lockfile, path, reader, view))
    return found
