"""Every shipped manifest loads, validates and resolves (the role of firewalld's check.sh)."""

from pathlib import Path

import pytest

from dejima.adapters.manifest_files import load_catalog
from dejima.core.manifest import KINDS, parse_manifest
from dejima.core.resolve import WorkspaceFacts, resolve

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
    from dejima.adapters.repo import workspace_facts

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


def own_manifest(root: Path, ref: str, text: str) -> Path:
    path = root / "dejima" / f"{ref}.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def facts(*files: str) -> WorkspaceFacts:
    return WorkspaceFacts(root_files=frozenset(files))


BROKEN_HARNESS = 'schema = 1\ndescription = "x"\n[harness]\ncommand = ["x"]\napis = []\nextra = 1\n'


def test_a_broken_user_manifest_stops_only_the_sessions_that_use_it(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from dejima.core.manifest import ManifestError

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    own = own_manifest(tmp_path, "harnesses/mine", BROKEN_HARNESS)
    catalog = load_catalog()  # used to raise here, for every session
    assert catalog.broken[("harnesses", "mine")].source == str(own)
    resolved = resolve(catalog.manifests, facts(), "shell", broken=catalog.broken)
    assert [b.ref for b in resolved.skipped] == ["harnesses/mine"]
    with pytest.raises(ManifestError, match=f"{own}: 'harness.extra' is not a known key") as caught:
        resolve(catalog.manifests, facts(), "mine", broken=catalog.broken)
    assert caught.value.context == "this session needs harnesses/mine (--harness mine)"
    with pytest.raises(ManifestError, match="is not a known key"):
        catalog.get("harnesses", "mine")


@pytest.mark.parametrize("text", [
    'schema = 1\ndescription = "my rust"\n[detect]\nfiles = ["Cargo.toml"]\n[network]\nallow = ["*.com"]\n',
    'schema = 1\n[detect\nfiles = ["Cargo.toml"]\n',  # not TOML: detected where the shipped rust would be
])
def test_a_broken_override_is_reported_where_it_would_be_detected_and_never_replaced_by_the_shipped_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    from dejima.core.manifest import ManifestError

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    own = own_manifest(tmp_path, "workflows/rust", text)
    catalog = load_catalog()
    assert ("workflows", "rust") not in catalog.manifests  # the shipped rust does not stand in for it
    assert catalog.overridden[("workflows", "rust")].endswith("workflows/rust.toml")
    python = resolve(catalog.manifests, facts("pyproject.toml"), "shell", broken=catalog.broken)
    assert {c.manifest.ref for c in python.choices} == {"harnesses/shell", "workflows/python"}
    for files, flags, why in ((("Cargo.toml",), (), "detected: Cargo.toml"), ((), ("rust",), "--workflow rust")):
        with pytest.raises(ManifestError) as caught:
            resolve(catalog.manifests, facts(*files), "shell", workflows=flags, broken=catalog.broken)
        assert caught.value.message.startswith(str(own)) and caught.value.context == (
            f"this session needs workflows/rust ({why})")


def test_a_broken_workflow_whose_detection_cannot_be_read_stops_every_session(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail closed: it may add deny entries or audit watches to any workspace; dejima cannot
    tell which, so it does not start without it."""
    from dejima.core.manifest import ManifestError

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    own_manifest(tmp_path, "workflows/corp-guard", 'schema = 1\n[detect\n')
    catalog = load_catalog()
    with pytest.raises(ManifestError, match="not valid TOML") as caught:
        resolve(catalog.manifests, facts(), "shell", broken=catalog.broken)
    assert "whether it applies here cannot be told" in (caught.value.context or "")


def test_a_broken_default_backend_stops_its_harness_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from dejima.core.manifest import ManifestError

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    own_manifest(tmp_path, "backends/anthropic", 'schema = 1\ndescription = "x"\n[backend]\napi = "claude"\n')
    catalog = load_catalog()
    assert resolve(catalog.manifests, facts(), "shell", broken=catalog.broken).harness.name == "shell"
    with pytest.raises(ManifestError, match="'backend.api' must be one of") as caught:
        resolve(catalog.manifests, facts(), "claude-code", broken=catalog.broken)
    assert caught.value.context == "this session needs backends/anthropic (the default backend of harness claude-code)"


def test_session_image_composition_is_deterministic() -> None:
    from dejima.adapters import packaged
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
