"""Resolution: detection, defaults, conflicts, provenance, and the repository's narrowing."""

import pytest

from dejima.core.manifest import Manifest, ManifestError, parse_manifest
from dejima.core.resolve import RepoPolicy, Resolved, WorkspaceFacts, resolve


def manifest(kind: str, name: str, body: str) -> Manifest:
    return parse_manifest(f'schema = 1\ndescription = "{name}"\n{body}', kind, name, f"/shipped/{kind}/{name}.toml")


CATALOG = {(m.kind, m.name): m for m in (
    manifest("harnesses", "shell", '[harness]\ncommand = ["bash", "-l"]\napis = []\n'),
    manifest("harnesses", "claude-code", '[network]\nallow = ["statsig.example:443"]\n[env]\nDISABLE_TELEMETRY = "1"\n'
             '[harness]\ncommand = ["claude"]\napis = ["anthropic", "bedrock"]\ndefault_backend = "anthropic"\n'),
    manifest("backends", "anthropic", '[network]\nallow = ["api.anthropic.com:443"]\n[backend]\napi = "anthropic"\n'),
    manifest("backends", "openai", '[network]\nallow = ["api.openai.com:443"]\n[backend]\napi = "openai"\n'),
    manifest("workflows", "rust", '[detect]\nfiles = ["Cargo.toml"]\n'
             '[network]\nallow = ["crates.io", "static.crates.io"]\n[env]\nCARGO_HOME = "/home/dejima/.cargo"\n'),
    manifest("workflows", "node", '[detect]\nfiles = ["package.json"]\n[network]\nallow = ["registry.npmjs.org"]\n'),
    manifest("workflows", "python", '[detect]\nfiles = ["pyproject.toml", "*.py"]\n[network]\nallow = ["pypi.org"]\n'),
    manifest("forges", "github", '[detect]\nremote_hosts = ["github.com"]\n[network]\nallow = ["github.com"]\n'
             'deny = ["gist.github.com"]\ndeny_reasons = { "gist.github.com" = "no pastes" }\n'),
)}


def refs(resolved: Resolved) -> list[str]:
    return [f"{c.manifest.ref} ({c.why})" for c in resolved.choices]


def test_a_monorepo_with_markers_only_in_subfolders_picks_each_workflow_naming_the_file() -> None:
    facts = WorkspaceFacts(frozenset({"backend", "frontend", "README.md"}),
                           sub_files=frozenset({"backend/pyproject.toml", "frontend/package.json", "docs/index.md"}))
    assert refs(resolve(CATALOG, facts, "shell")) == [
        "harnesses/shell (default)", "workflows/node (detected: frontend/package.json)",
        "workflows/python (detected: backend/pyproject.toml)"]
    # A marker at the root speaks for the project: what lies below it is not listed.
    root = WorkspaceFacts(frozenset({"pyproject.toml"}), sub_files=frozenset({"tools/pyproject.toml"}))
    assert "workflows/python (detected: pyproject.toml)" in refs(resolve(CATALOG, root, "shell"))


def test_detection_from_markers_and_remotes() -> None:
    facts = WorkspaceFacts(frozenset({"Cargo.toml", "package.json", "setup.py"}), frozenset({"github.com"}))
    assert refs(resolve(CATALOG, facts, "shell")) == [
        "harnesses/shell (default)", "workflows/node (detected: package.json)",
        "workflows/python (detected: setup.py)", "workflows/rust (detected: Cargo.toml)",
        "forges/github (detected: git remote github.com)",
    ]


def test_harness_brings_its_default_backend_and_flags_add_more() -> None:
    resolved = resolve(CATALOG, WorkspaceFacts(), "claude-code", workflows=("rust",))
    assert refs(resolved) == ["harnesses/claude-code (--harness)", "backends/anthropic (default of claude-code)",
                              "workflows/rust (--workflow)"]


def test_every_allowed_entry_keeps_the_manifest_that_asked() -> None:
    resolved = resolve(CATALOG, WorkspaceFacts(frozenset({"Cargo.toml"})), "claude-code")
    assert ("api.anthropic.com:443", "/shipped/backends/anthropic.toml network.allow") in resolved.allow()
    assert ("crates.io", "/shipped/workflows/rust.toml network.allow") in resolved.allow()
    assert resolved.environment() == {"DISABLE_TELEMETRY": "1", "CARGO_HOME": "/home/dejima/.cargo"}


def test_backend_the_harness_cannot_speak_is_refused() -> None:
    with pytest.raises(ManifestError) as caught:
        resolve(CATALOG, WorkspaceFacts(), "claude-code", backend="openai")
    assert caught.value.message == "harness claude-code speaks anthropic, bedrock, but backend openai speaks openai"


def test_unknown_names_list_the_known_ones() -> None:
    with pytest.raises(ManifestError) as caught:
        resolve(CATALOG, WorkspaceFacts(), "cursor")
    assert caught.value.message == "--harness cursor: no such harness"
    assert caught.value.hint == "known harnesses: claude-code, shell"


def test_repository_deny_entries_join_and_carry_their_origin() -> None:
    repo = RepoPolicy(deny=("crates.io",), deny_reasons={"crates.io": "this project vendors its crates"})
    resolved = resolve(CATALOG, WorkspaceFacts(frozenset({"Cargo.toml"}), frozenset({"github.com"})), "shell",
                       repo=repo)
    assert ("gist.github.com", "no pastes", "/shipped/forges/github.toml network.deny") in resolved.deny()
    assert ("crates.io", "this project vendors its crates", ".dejima.toml network.deny (repository)") in resolved.deny()


def test_conflicting_environment_is_an_error() -> None:
    other = manifest("workflows", "rust2", '[detect]\nfiles = ["Cargo.toml"]\n[env]\nCARGO_HOME = "/elsewhere"\n')
    catalog = {**CATALOG, ("workflows", "rust2"): other}
    expected = "env.CARGO_HOME = '/elsewhere' conflicts with /shipped/workflows/rust.toml"
    with pytest.raises(ManifestError, match=expected):
        resolve(catalog, WorkspaceFacts(frozenset({"Cargo.toml"})), "shell").environment()
