"""Finds and reads manifests: the shipped ones, then the user's, which override by name.

Shipped manifests live in the repository's forges/, workflows/, harnesses/ and backends/
(installed as package data); the user's in ``$XDG_CONFIG_HOME/dejima/<kind>/<name>.toml``.
Every manifest keeps the path it came from, so the plan can say who asked for what. Each file
is checked on its own: a broken one stops only the sessions that would use it.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from pathlib import Path

from dejima.adapters import host
from dejima.adapters.packaged import PACKAGE_ROOT
from dejima.core.manifest import (
    KINDS,
    BrokenManifest,
    Manifest,
    ManifestError,
    detection_of,
    parse_manifest,
    singular,
)
from dejima.core.schema import did_you_mean


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
    # Files that failed their checks, each on its own: one bad file never hides the others, and
    # a broken override is not replaced by the shipped manifest behind the user's back.
    broken: dict[tuple[str, str], BrokenManifest] = field(default_factory=dict)

    def get(self, kind: str, name: str) -> Manifest:
        if (kind, name) in self.broken:
            raise self.broken[(kind, name)].error
        try:
            return self.manifests[(kind, name)]
        except KeyError:
            names = sorted(n for k, n in self.manifests if k == kind)
            raise ManifestError(
                f"no {singular(kind)} named {name!r}",
                hint=f"{did_you_mean(name, names)}known {kind}: {', '.join(names) or 'none'}; add your own as "
                     f"{user_dir(kind) / (name + '.toml')}",
                reference="unknown-manifest",
            ) from None


def _read(kind: str, path: Path, shipped: Manifest | None) -> Manifest | BrokenManifest:
    text = None
    try:
        text = path.read_text(encoding="utf-8")
        return parse_manifest(text, kind, path.stem, str(path))
    except (OSError, UnicodeDecodeError) as exc:
        error = ManifestError(f"{path}: cannot read the manifest: {exc}", hint="fix or remove the file")
    except ManifestError as exc:
        error = exc
    detection = detection_of(text) if text is not None else None
    if detection is None and shipped is not None:  # an override: it would be used where the shipped one is
        detection = (shipped.marker_files, shipped.remote_hosts)
    markers, hosts = detection if detection is not None else (None, None)
    return BrokenManifest(kind, path.stem, str(path), error, markers, hosts)


def _read_dir(kind: str, directory: Path, shipped: dict[str, Manifest]) -> dict[str, Manifest | BrokenManifest]:
    if not directory.is_dir():
        return {}
    return {path.stem: _read(kind, path, shipped.get(path.stem)) for path in sorted(directory.glob("*.toml"))}


def load_catalog(include_user: bool = True) -> Catalog:
    """Every manifest, the user's overriding the shipped ones by name; files that fail their
    checks are kept apart in ``broken`` (resolution raises their error when a session needs one)."""
    catalog = Catalog({}, {}, {})
    for kind in KINDS:
        shipped = _read_dir(kind, shipped_dir(kind), {})
        found = dict(shipped)
        if include_user:
            good = {name: m for name, m in shipped.items() if isinstance(m, Manifest)}
            for name, manifest in _read_dir(kind, user_dir(kind), good).items():
                if name in shipped:
                    catalog.overridden[(kind, name)] = shipped[name].source
                found[name] = manifest
        for name, manifest in found.items():
            if isinstance(manifest, BrokenManifest):
                catalog.broken[(kind, name)] = manifest
            else:
                catalog.manifests[(kind, name)] = manifest
    return catalog
