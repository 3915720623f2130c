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


@pytest.mark.parametrize(("files", "remote", "expected"), [
    ({"Cargo.toml": ""}, None, {"workflows/rust"}),
    ({"package.json": "{}", "pnpm-lock.yaml": ""}, None, {"workflows/node"}),
    ({"pyproject.toml": "", "uv.lock": ""}, None, {"workflows/python"}),
    ({"go.mod": "module x"}, None, {"workflows/go"}),
    ({"pom.xml": ""}, None, {"workflows/java"}),
    ({"Gemfile": ""}, None, {"workflows/ruby"}),
    ({}, "git@github.com:me/p.git", {"forges/github"}),
    ({}, "https://gitlab.com/group/p.git", {"forges/gitlab"}),
    ({}, "https://codeberg.org/me/p.git", {"forges/codeberg"}),
    ({}, "git@bitbucket.org:team/p.git", {"forges/bitbucket"}),
])
def test_detection_on_real_world_layouts(tmp_path: Path, files: dict[str, str], remote: str | None,
                                         expected: set[str]) -> None:
    from dejima.repo import workspace_facts

    for name, text in files.items():
        (tmp_path / name).write_text(text)
    if remote:
        (tmp_path / ".git").mkdir()
        (tmp_path / ".git" / "config").write_text(f'[remote "origin"]\n\turl = {remote}\n')
    catalog = load_catalog(include_user=False).manifests
    resolved = resolve(catalog, workspace_facts(tmp_path), "shell")
    detected = {c.manifest.ref for c in resolved.choices if c.why.startswith("detected")}
    assert detected == expected


def test_user_manifests_override_shipped_ones_by_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    own = tmp_path / "dejima" / "workflows" / "rust.toml"
    own.parent.mkdir(parents=True)
    own.write_text('schema = 1\ndescription = "my rust"\n[detect]\nfiles = ["Cargo.toml"]\n'
                   '[network]\nallow = ["crates.internal.example:443"]\n')
    catalog = load_catalog()
    assert catalog.get("workflows", "rust").source == str(own)
    assert catalog.overridden[("workflows", "rust")].endswith("workflows/rust.toml")
    assert load_catalog(include_user=False).get("workflows", "rust").source != str(own)


def test_a_broken_user_manifest_stops_everything_with_its_path(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from dejima.core.manifest import ManifestError

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    own = tmp_path / "dejima" / "harnesses" / "mine.toml"
    own.parent.mkdir(parents=True)
    own.write_text('schema = 1\ndescription = "x"\n[harness]\ncommand = ["x"]\napis = []\nextra = 1\n')
    with pytest.raises(ManifestError, match=f"{own}: 'harness.extra' is not a known key"):
        load_catalog()


def test_session_image_composition_is_deterministic() -> None:
    from dejima import packaged
    from dejima.core.images import build_session_recipe

    catalog = load_catalog(include_user=False).manifests

    def tag(*workflows: str) -> str:
        layers = resolve(catalog, WorkspaceFacts(), "claude-code", workflows=workflows).image_layers()
        return build_session_recipe(packaged.docker_template("session"), "base", "sha256:1", {}, 1000, 1000,
                                    "u", layers).tag

    assert tag("rust", "node") == tag("rust", "node")
    assert tag("rust") != tag("node")
    layers = resolve(catalog, WorkspaceFacts(), "claude-code").image_layers()
    assert any("@anthropic-ai/claude-code" in step.command for step in layers.install)
    assert "nodejs" in layers.packages
