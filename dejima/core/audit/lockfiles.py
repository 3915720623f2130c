"""Research C7: a lockfile whose checksum for a package changed while its version did not is an
artifact swap (the registry's bytes replaced by others), whatever the rest of the diff says."""

from __future__ import annotations

import re
import tomllib

from dejima.core.audit.model import Finding, View, finding
from dejima.core.configfiles import ConfigParseError, parse_config


def _npm(data: str) -> dict[str, str]:
    """package path@version -> integrity, from package-lock.json / npm-shrinkwrap.json."""
    pairs = parse_config("json", data.encode())
    found = {}
    for key, value in pairs.items():
        if key.endswith(".integrity"):
            package = key[: -len(".integrity")]
            found[f"{package}@{pairs.get(package + '.version', '?')}"] = value
    return found


def _toml_packages(data: str) -> dict[str, str]:
    """name@version -> checksum/hashes, from Cargo.lock, uv.lock and poetry.lock."""
    document = tomllib.loads(data)
    found = {}
    for package in document.get("package", []):
        if not isinstance(package, dict):
            continue
        digest = package.get("checksum") or package.get("sdist") or package.get("files") or package.get("wheels")
        if digest:
            found[f"{package.get('name')}@{package.get('version')}"] = repr(digest)
    return found


def _go_sum(data: str) -> dict[str, str]:
    found = {}
    for line in data.splitlines():
        parts = line.split()
        if len(parts) == 3:
            found[f"{parts[0]}@{parts[1]}"] = parts[2]
    return found


_READERS = ((re.compile(r"(?:^|/)(?:package-lock|npm-shrinkwrap)\.json$"), _npm),
            (re.compile(r"(?:^|/)(?:Cargo|uv|poetry)\.lock$"), _toml_packages),
            (re.compile(r"(?:^|/)go\.sum$"), _go_sum))


def lockfile_findings(view: View) -> list[Finding]:
    found = []
    for path in view.changed:
        reader = next((r for pattern, r in _READERS if pattern.search(path)), None)
        before, after = view.text(path, "before"), view.text(path)
        if reader is None or before is None or after is None or "node_modules/" in path:
            continue
        try:
            old, new = reader(before), reader(after)
        except (ConfigParseError, tomllib.TOMLDecodeError, ValueError):
            continue  # a lockfile is data for its tool; its format errors are the tool's to report
        swapped = sorted(package for package, digest in new.items() if package in old and old[package] != digest)
        if swapped:
            found.append(finding("X05", "high", path, f"checksum changed without a version change: "
                                 f"{', '.join(swapped[:5])}{' ...' if len(swapped) > 5 else ''}",
                                 "\n".join(f"{p}={new[p]}" for p in swapped), remedy="restore"))
    return found
