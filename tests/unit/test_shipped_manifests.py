"""Every shipped manifest loads, validates and resolves (the role of firewalld's check.sh)."""

from pathlib import Path

import pytest

from dejima.core.manifest import KINDS, parse_manifest
from dejima.core.resolve import WorkspaceFacts, resolve
from dejima.manifests import load_catalog

ROOT = Path(__file__).parents[2]
FILES = sorted(p for kind in KINDS for p in (ROOT / kind).glob("*.toml"))


@pytest.mark.parametrize("path", FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_manifest_validates(path: Path) -> None:
    parse_manifest(path.read_text(), path.parent.name, path.stem, str(path))


def test_every_harness_resolves_with_its_default_backend() -> None:
    catalog = load_catalog(include_user=False).manifests
    harnesses = [name for kind, name in catalog if kind == "harnesses"]
    assert "shell" in harnesses
    for name in harnesses:
        resolved = resolve(catalog, WorkspaceFacts(), name)
        resolved.environment()  # no conflicting variables
        assert resolved.harness.command


def test_every_workflow_and_forge_resolves_together() -> None:
    catalog = load_catalog(include_user=False).manifests
    workflows = tuple(name for kind, name in catalog if kind == "workflows")
    forges = tuple(name for kind, name in catalog if kind == "forges")
    resolved = resolve(catalog, WorkspaceFacts(), "shell", workflows=workflows, forges=forges)
    resolved.environment()
    assert len(resolved.choices) == 1 + len(workflows) + len(forges)
