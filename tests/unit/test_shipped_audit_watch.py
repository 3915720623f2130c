"""Each shipped manifest's [audit] watch entry, and what reports a change there: the catalogue's own
rule (finer: keys, greps), or X07, the blanket rule for paths no rule knows. A directory entry is
probed with a file under it that the catalogue does not name. An entry that moves from one column
to the other is a decision: X07 reports every change, so it must not watch what ordinary installs
and builds rewrite."""

from __future__ import annotations

import pytest

from dejima.adapters.manifest_files import load_catalog
from dejima.core.audit.manifest_watch import Watch, catalogue_knows, watch_of
from dejima.core.audit.rules import audit
from dejima.core.snapshot import SnapshotEntry

COVERAGE = {
    "harnesses/aider.toml": {".aider.conf.yml": "catalogue", ".env": "catalogue",
                             ".aider.model.settings.yml": "X07"},  # aider only reads it
    "harnesses/claude-code.toml": {".mcp.json": "catalogue",
                                   # settings, commands, agents, skills, hooks: the catalogue's (A01, A05);
                                   # the rest (rules, agent memory) is read by the next agent
                                   ".claude/": "X07"},
    "harnesses/codex.toml": {".codex/": "catalogue"},
    # settings, commands, extensions and .env: the catalogue's (A09, E03); system.md and the rest, X07
    "harnesses/gemini-cli.toml": {".gemini/": "X07"},
    "harnesses/opencode.toml": {"opencode.json": "catalogue", "opencode.jsonc": "catalogue", ".opencode/": "catalogue"},
    "workflows/go.toml": {"go.mod": "catalogue", "go.work": "catalogue"},
    "workflows/java.toml": {"pom.xml": "catalogue", "mvnw": "catalogue", "build.gradle": "catalogue",
                            "build.gradle.kts": "catalogue", "settings.gradle": "catalogue",
                            "settings.gradle.kts": "catalogue", "gradle.properties": "catalogue",
                            "gradlew": "catalogue", "buildSrc/": "catalogue",
                            # extensions.xml, jvm.config, maven.config, wrapper/: B15; settings.xml and the like, X07
                            ".mvn/": "X07",
                            "gradle/wrapper/": "X07"},  # its jar and properties: B14
    "workflows/node.toml": {"package.json": "catalogue", ".npmrc": "catalogue", ".yarnrc": "catalogue",
                            ".yarnrc.yml": "catalogue", ".yarn/releases/": "catalogue", ".yarn/plugins/": "catalogue",
                            ".yarn/patches/": "X07", ".yarn/sdks/": "X07",  # not .yarn/: installs rewrite its cache
                            ".pnpmfile.cjs": "catalogue", "pnpm-workspace.yaml": "catalogue", ".husky/": "catalogue"},
    "workflows/python.toml": {name: "catalogue" for name in (
        "pyproject.toml", "setup.py", "setup.cfg", "conftest.py", "pytest.ini", "tox.ini", "noxfile.py", "Pipfile",
        "uv.toml", "poetry.toml", ".pre-commit-config.yaml")},
    "workflows/ruby.toml": {name: "catalogue" for name in ("Gemfile", ".bundle/config", "Rakefile", ".rspec")},
    "workflows/rust.toml": {name: "catalogue" for name in (
        "Cargo.toml", "build.rs", ".cargo/config.toml", ".cargo/config", "rust-toolchain.toml", "rust-toolchain")},
}


def shipped_watch() -> dict[str, tuple[Watch, ...]]:
    catalog = load_catalog(include_user=False).manifests
    return {f"{m.kind}/{m.name}.toml": watch_of([m]) for m in catalog.values() if m.audit_watch}


def probe(entry: Watch) -> str:
    return entry.path + "new-file" if entry.prefix is not None else entry.path


def test_every_shipped_watch_entry_is_listed_with_who_reports_it() -> None:
    shown = {name: {w.path: "catalogue" if catalogue_knows(probe(w)) else "X07" for w in watch}
             for name, watch in shipped_watch().items()}
    assert shown == COVERAGE


@pytest.mark.parametrize(("manifest", "entry"), [(m, e) for m, entries in COVERAGE.items() for e in entries])
def test_a_file_created_at_a_watched_place_is_reported_by_the_listed_rule(manifest: str, entry: str) -> None:
    watch = shipped_watch()[manifest]
    path = probe(next(w for w in watch if w.path == entry))
    parents = ["/".join(path.split("/")[:depth]) for depth in range(1, path.count("/") + 1)]
    before = {p: SnapshotEntry(p, "dir", 0o755, 1000, 1000, 0, 2, depth, 1, 1) for depth, p in enumerate(parents)}
    after = {**before, path: SnapshotEntry(path, "file", 0o644, 1000, 1000, 2, 1, 99, 2, 2, sha256="0" * 64)}
    rules = {f.rule for f in audit(before, after, lambda side, p: b"x\n" if side == "after" else None, watch=watch)}
    assert ("X07" in rules) == (COVERAGE[manifest][entry] == "X07")
