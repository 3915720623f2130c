"""Finds and reads manifests: the shipped ones, then the user's, which override by name.

Shipped manifests live in the repository's forges/, workflows/, harnesses/ and backends/
(installed as package data); the user's in ``$XDG_CONFIG_HOME/dejima/<kind>/<name>.toml``.
Every manifest keeps the path it came from, so the plan can say who asked for what.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

from dejima import host
from dejima.core.manifest import KINDS, Manifest, ManifestError, parse_manifest
from dejima.packaged import PACKAGE_ROOT


def shipped_dir(kind: str) -> Path:
    """Where the shipped manifests of ``kind`` are: installed package data, or the checkout."""
    try:
        spec = importlib.util.find_spec(f"dejima.assets.{kind}")
    except ModuleNotFoundError:
        spec = None
    if spec is not None and spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations)))
    return PACKAGE_ROOT.parent / kind  # a source checkout that is not installed


def user_dir(kind: str) -> Path:
    return host.config_dir() / kind


@dataclass(frozen=True, slots=True)
class Catalog:
    manifests: dict[tuple[str, str], Manifest]
    overridden: dict[tuple[str, str], str]  # (kind, name) -> the shipped file a user file replaced

    def get(self, kind: str, name: str) -> Manifest:
        try:
            return self.manifests[(kind, name)]
        except KeyError:
            known = ", ".join(sorted(n for k, n in self.manifests if k == kind)) or "none"
            raise ManifestError(
                f"no {kind[:-1] if kind != 'harnesses' else 'harness'} named {name!r}",
                hint=f"known {kind}: {known}; add your own as {user_dir(kind) / (name + '.toml')}",
                reference="unknown-manifest",
            ) from None

    def of_kind(self, kind: str) -> list[Manifest]:
        return [m for (k, _), m in sorted(self.manifests.items()) if k == kind]


def _read_dir(kind: str, directory: Path) -> dict[str, Manifest]:
    found: dict[str, Manifest] = {}
    if not directory.is_dir():
        return found
    for path in sorted(directory.glob("*.toml")):
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ManifestError(f"{path}: cannot read the manifest: {exc}", hint="fix or remove the file") from exc
        found[path.stem] = parse_manifest(text, kind, path.stem, str(path))
    return found


def load_catalog(include_user: bool = True) -> Catalog:
    manifests: dict[tuple[str, str], Manifest] = {}
    overridden: dict[tuple[str, str], str] = {}
    for kind in KINDS:
        for name, manifest in _read_dir(kind, shipped_dir(kind)).items():
            manifests[(kind, name)] = manifest
        if include_user:
            for name, manifest in _read_dir(kind, user_dir(kind)).items():
                if (kind, name) in manifests:
                    overridden[(kind, name)] = manifests[(kind, name)].source
                manifests[(kind, name)] = manifest
    return Catalog(manifests, overridden)
