"""A yarn 1 tree held to what yarn.lock pinned before the session (issue 32): a real package (packed
by `npm pack`) served by an npm registry on loopback, a real `yarn install --frozen-lockfile` into
the workspace with the session home's yarn cache, then each attack an agent makes in
node_modules, each beside its benign neighbour (the same install untouched), audited through the
same code as after a session. Where a test says the host runs the planted code, it runs node."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from dejima.core.audit import Finding
from dejima.orchestration.exit_audit import Mount, audit_mount, capture
from tests.pinned_trees import replace_file, runs_on_host, served, severities

YARN = shutil.which("yarn")
pytestmark = pytest.mark.skipif(YARN is None or shutil.which("npm") is None or shutil.which("node") is None,
                                reason="needs yarn 1, npm and node")



@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """tinytool 1.0.0 (a main and a bin), packed by npm and served as an npm registry on loopback."""
    source = tmp_path_factory.mktemp("tinytool")
    manifest = {"name": "tinytool", "version": "1.0.0", "main": "index.js", "bin": {"tinytool": "cli.js"}}
    (source / "package.json").write_text(json.dumps(manifest))
    (source / "index.js").write_text("module.exports = 'tiny';\n")
    (source / "cli.js").write_text("#!/usr/bin/env node\nconsole.log('tiny');\n")
    subprocess.run(["npm", "pack", "--silent"], cwd=source, check=True, capture_output=True, timeout=120,
                   env={**os.environ, "npm_config_cache": str(source.parent / "yarn-pack-cache")})
    directory = tmp_path_factory.mktemp("registry")
    data = (source / "tinytool-1.0.0.tgz").read_bytes()
    (directory / "tinytool-1.0.0.tgz").write_bytes(data)
    integrity = "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()
    with served(directory) as url:
        (directory / "tinytool").write_text(json.dumps({"name": "tinytool", "dist-tags": {"latest": "1.0.0"},
                                                        "versions": {"1.0.0": {**manifest, "dist": {
                                                            "tarball": f"{url}/tinytool-1.0.0.tgz",
                                                            "integrity": integrity,
                                                            "shasum": hashlib.sha1(data).hexdigest()}}}}))
        yield url


def yarn(directory: Path, cache: Path, registry: str, *args: str) -> None:
    assert YARN is not None
    env = {**os.environ, "HOME": str(cache.parent), "YARN_CACHE_FOLDER": str(cache)}
    subprocess.run([YARN, *args, "--registry", registry, "--non-interactive", "--silent", "--no-progress"],
                   cwd=directory, env=env, check=True, capture_output=True, timeout=120)


def project(root: Path, registry: str) -> tuple[Path, Path]:
    """A workspace whose yarn.lock pins tinytool (as committed: no node_modules), and the session
    home's empty yarn cache; returns (workspace, cache)."""
    workspace, cache = root / "workspace", root / "home/.cache/yarn"
    workspace.mkdir(parents=True)
    (workspace / "package.json").write_text(json.dumps({"name": "ws", "version": "1.0.0",
                                                        "dependencies": {"tinytool": "1.0.0"}}))
    yarn(workspace, root / "host/.cache/yarn", registry, "install")
    shutil.rmtree(workspace / "node_modules")
    return workspace, cache


def session(workspace: Path, cache: Path, registry: str, change: object = None) -> list[Finding]:
    """The session: `yarn install --frozen-lockfile` with the session home's cache, then ``change``."""
    state = capture(Mount("workspace", workspace))
    yarn(workspace, cache, registry, "install", "--frozen-lockfile")
    if callable(change):
        change(workspace)
    found, _ = audit_mount(state, npm_caches=[], yarn_caches=[cache])
    return [f for f in found if f.path.startswith("node_modules") or f.rule == "B07"]





def test_a_clean_install_is_verified_file_by_file(tmp_path: Path, registry: str) -> None:
    found = session(*project(tmp_path, registry), registry)
    assert severities(found) == [("node_modules", "low")]
    assert found[0].evidence == ("yarn's tree: verified 3 file(s) of 1 package(s) against yarn.lock as the session's "
                                 "start had it")


def test_a_file_rewritten_by_renaming_a_new_one_over_it_is_high_and_runs_on_the_host(
        tmp_path: Path, registry: str) -> None:
    def tamper(root: Path) -> None:
        index = root / "node_modules/tinytool/index.js"
        replace_file(index, index.read_text() + "console.log('PLANTED');\n")

    workspace, cache = project(tmp_path, registry)
    found = session(workspace, cache, registry, tamper)
    assert severities(found) == [("node_modules", "high")]
    assert "node_modules/tinytool/index.js: not the content of its package's tarball" in found[0].evidence
    assert "rm -r node_modules && yarn install --frozen-lockfile" in found[0].evidence
    assert "PLANTED" in runs_on_host(workspace, "require('tinytool')")


def test_a_new_file_and_a_package_yarn_lock_does_not_list_are_high(tmp_path: Path, registry: str) -> None:
    def tamper(root: Path) -> None:
        (root / "node_modules/tinytool/evil.js").write_text("console.log('PLANTED');\n")
        (root / "node_modules/shadow").mkdir()
        (root / "node_modules/shadow/package.json").write_text('{"name": "shadow", "version": "1.0.0"}')
        (root / "node_modules/shadow/index.js").write_text("console.log('PLANTED');\n")

    workspace, cache = project(tmp_path, registry)
    found = session(workspace, cache, registry, tamper)
    assert severities(found) == [("node_modules", "high")]
    assert "node_modules/tinytool/evil.js: a file its package's tarball does not hold" in found[0].evidence
    assert "in node_modules/shadow, shadow@1.0.0, a package yarn.lock does not list" in found[0].evidence
    assert "PLANTED" in runs_on_host(workspace, "require('shadow')")


def test_a_version_rewritten_to_pick_another_pin_is_high(tmp_path: Path, registry: str) -> None:
    def tamper(root: Path) -> None:
        manifest = root / "node_modules/tinytool/package.json"
        replace_file(manifest, manifest.read_text().replace('"1.0.0"', '"1.0.1"'))

    found = session(*project(tmp_path, registry), registry, tamper)
    assert severities(found) == [("node_modules", "high")]
    assert "tinytool@1.0.1, a package yarn.lock does not list" in found[0].evidence


def test_bin_entries_that_are_not_links_to_a_declared_bin_are_high(tmp_path: Path, registry: str) -> None:
    def tamper(root: Path) -> None:
        link = root / "node_modules/.bin/tinytool"
        link.unlink()
        link.write_text("#!/bin/sh\necho PLANTED\n")
        (root / "node_modules/.bin/other").symlink_to("../tinytool/index.js")

    found = session(*project(tmp_path, registry), registry, tamper)
    assert severities(found) == [("node_modules", "high")]
    assert "node_modules/.bin/tinytool: a file where yarn makes a link" in found[0].evidence
    assert "node_modules/.bin/other: a link to ../tinytool/index.js, not a bin" in found[0].evidence


def test_what_cannot_be_verified_is_medium_and_says_why(tmp_path: Path, registry: str) -> None:
    workspace, cache = project(tmp_path / "a", registry)
    state = capture(Mount("workspace", workspace))
    yarn(workspace, cache, registry, "install", "--frozen-lockfile")
    [found] = audit_mount(state, npm_caches=[], yarn_caches=[tmp_path / "elsewhere"])[0]
    assert found.severity == "medium" and "its tarball is in no yarn or npm cache" in found.evidence

    def poison(root: Path) -> None:
        [tarball] = cache.glob("v*/npm-tinytool-*/node_modules/tinytool/.yarn-tarball.tgz")
        tarball.write_bytes(tarball.read_bytes() + b"\0")

    workspace, cache = project(tmp_path / "b", registry)
    [found] = session(workspace, cache, registry, poison)
    assert found.severity == "medium" and "does not hash to yarn.lock's integrity" in found.evidence

    workspace, cache = project(tmp_path / "c", registry)
    (workspace / "yarn.lock").unlink()  # no lockfile at the start: the session makes one
    state = capture(Mount("workspace", workspace))
    yarn(workspace, cache, registry, "install")
    [found] = audit_mount(state, npm_caches=[], yarn_caches=[cache])[0]
    assert found.severity == "medium" and "yarn.lock was not there at the session's start" in found.evidence


def test_a_workspace_install_links_its_packages_and_a_link_elsewhere_is_high(tmp_path: Path, registry: str) -> None:
    """yarn workspaces: node_modules/@me/lib and its bin are links into packages/lib, the project's own."""
    def workspaces(root: Path) -> tuple[Path, Path]:
        workspace, cache = root / "workspace", root / "home/.cache/yarn"
        (workspace / "packages/lib").mkdir(parents=True)
        (workspace / "package.json").write_text(json.dumps({"name": "ws", "private": True,
                                                            "workspaces": ["packages/*"]}))
        (workspace / "packages/lib/package.json").write_text(json.dumps({
            "name": "@me/lib", "version": "1.0.0", "bin": {"mylib": "cli.js"}, "dependencies": {"tinytool": "1.0.0"}}))
        (workspace / "packages/lib/cli.js").write_text("#!/usr/bin/env node\n")
        yarn(workspace, root / "host/.cache/yarn", registry, "install")
        shutil.rmtree(workspace / "node_modules")
        return workspace, cache

    found = session(*workspaces(tmp_path / "a"), registry)
    assert severities(found) == [("node_modules", "low")] and "verified 3 file(s)" in found[0].evidence

    def repoint(root: Path) -> None:
        (root / "elsewhere").mkdir()
        (root / "elsewhere/package.json").write_text('{"name": "@me/lib", "version": "1.0.0"}')
        (root / "node_modules/@me/lib").unlink()
        (root / "node_modules/@me/lib").symlink_to("../../elsewhere")

    found = session(*workspaces(tmp_path / "b"), registry, repoint)
    assert severities(found) == [("node_modules", "high")]
    assert "node_modules/@me/lib: a link where yarn puts a package, not to the workspace package" in found[0].evidence
