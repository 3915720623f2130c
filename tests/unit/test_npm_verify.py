"""An npm tree held to what its lockfile pinned before the session (issue 32): a real `npm ci` of a
real tarball (packed here, installed offline from a local file, which npm records with its
integrity and puts in the cache), then each attack an agent makes in node_modules, each beside its
benign neighbour (the same install untouched), audited through the same code as after a session
(capture, then audit_mount with the session home's npm cache). Where a test says the host runs
the planted code, it runs node on the tree."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from dejima.adapters.npm_cache import tarballs
from dejima.core.audit import Finding
from dejima.orchestration.exit_audit import Mount, audit_mount, capture
from tests.pinned_trees import replace_file, runs_on_host, severities

pytestmark = pytest.mark.skipif(shutil.which("npm") is None or shutil.which("node") is None,
                                reason="needs npm and node")

_NPM_ENV = {"npm_config_audit": "false", "npm_config_fund": "false", "npm_config_update_notifier": "false",
            "npm_config_loglevel": "error", "npm_config_offline": "true"}


def npm(directory: Path, cache: Path, *args: str) -> None:
    env = {**os.environ, **_NPM_ENV, "npm_config_cache": str(cache)}
    subprocess.run(["npm", *args], cwd=directory, env=env, check=True, capture_output=True, timeout=120)


@pytest.fixture(scope="module")
def packed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny package with a main and a bin, packed as npm publishes it."""
    source = tmp_path_factory.mktemp("tinytool")
    (source / "package.json").write_text(json.dumps({"name": "tinytool", "version": "1.0.0", "main": "index.js",
                                                     "bin": {"tinytool": "cli.js"}}))
    (source / "index.js").write_text("module.exports = 'tiny';\n")
    (source / "lib").mkdir()
    (source / "lib/util.js").write_text("module.exports = 1;\n")
    (source / "cli.js").write_text("#!/usr/bin/env node\nconsole.log('tiny');\n")
    (source / "test/fixture/node_modules").mkdir(parents=True)  # a package's own files (resolve's tests)
    (source / "test/fixture/node_modules/foo.js").write_text("module.exports = 'fixture';\n")
    subprocess.run(["npm", "pack", "--silent"], cwd=source, check=True, capture_output=True, timeout=120,
                   env={**os.environ, **_NPM_ENV, "npm_config_cache": str(source.parent / "pack-cache")})
    return source / "tinytool-1.0.0.tgz"


@pytest.fixture(scope="module")
def packed_v2(packed: Path) -> Path:
    """tinytool 2.0.0, beside 1.0.0: one workspace package of a project needs it, not hoisted."""
    source = packed.parent
    manifest = json.loads((source / "package.json").read_text())
    (source / "package.json").write_text(json.dumps({**manifest, "version": "2.0.0"}))
    try:
        subprocess.run(["npm", "pack", "--silent"], cwd=source, check=True, capture_output=True, timeout=120,
                       env={**os.environ, **_NPM_ENV, "npm_config_cache": str(source.parent / "pack-cache-v2")})
    finally:
        (source / "package.json").write_text(json.dumps(manifest))
    return source / "tinytool-2.0.0.tgz"


@pytest.fixture(scope="module")
def bundling(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A package that bundles a dependency (its tarball holds node_modules/inner)."""
    source = tmp_path_factory.mktemp("bundler")
    (source / "node_modules/inner").mkdir(parents=True)
    (source / "package.json").write_text(json.dumps({"name": "bundler", "version": "1.0.0", "main": "index.js",
                                                     "dependencies": {"inner": "1.0.0"},
                                                     "bundleDependencies": ["inner"]}))
    (source / "index.js").write_text("module.exports = require('inner');\n")
    (source / "node_modules/inner/package.json").write_text('{"name": "inner", "version": "1.0.0"}')
    (source / "node_modules/inner/index.js").write_text("module.exports = 3;\n")
    subprocess.run(["npm", "pack", "--silent"], cwd=source, check=True, capture_output=True, timeout=120,
                   env={**os.environ, **_NPM_ENV, "npm_config_cache": str(source.parent / "pack-cache-bundler")})
    return source / "bundler-1.0.0.tgz"


@pytest.fixture(scope="module")
def scripted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A package whose postinstall writes a file into itself (as esbuild's and node-gyp's do)."""
    source = tmp_path_factory.mktemp("builds")
    (source / "package.json").write_text(json.dumps({
        "name": "builds", "version": "1.0.0", "main": "index.js",
        "scripts": {"postinstall": "node -e \"require('fs').writeFileSync('built.js', 'module.exports = 2;')\""}}))
    (source / "index.js").write_text("module.exports = require('./built.js');\n")
    subprocess.run(["npm", "pack", "--silent"], cwd=source, check=True, capture_output=True, timeout=120,
                   env={**os.environ, **_NPM_ENV, "npm_config_cache": str(source.parent / "pack-cache-builds")})
    return source / "builds-1.0.0.tgz"


def project(root: Path, packed: Path) -> tuple[Path, Path]:
    """A workspace whose lockfile pins tinytool (as committed: no node_modules) and a session home
    whose npm cache is empty; returns (workspace, home)."""
    workspace, home = root / "workspace", root / "home"
    workspace.mkdir(parents=True)
    home.mkdir()
    shutil.copy(packed, root / packed.name)
    (workspace / "package.json").write_text(json.dumps({"name": "ws", "version": "1.0.0"}))
    npm(workspace, root / "host-cache", "install", f"../{packed.name}")
    shutil.rmtree(workspace / "node_modules")
    return workspace, home


def session(workspace: Path, home: Path, change: object = None, installed: bool = False) -> list[Finding]:
    """The session: `npm ci` from the session home's cache (from the local tarball, offline), then
    ``change``; the tree's findings. ``installed``: the tree was there at the start already."""
    if installed:
        npm(workspace, home / ".npm", "ci")
    state = capture(Mount("workspace", workspace))
    if not installed:
        npm(workspace, home / ".npm", "ci")
    if callable(change):
        change(workspace)
    found, _ = audit_mount(state, npm_caches=[home / ".npm"])
    return [f for f in found if f.path.startswith("node_modules") or f.rule == "B07"]





def test_a_clean_install_is_verified_file_by_file(tmp_path: Path, packed: Path) -> None:
    found = session(*project(tmp_path, packed))
    assert severities(found) == [("node_modules", "low")]
    assert "verified 5 file(s) of 1 package(s) against package-lock.json" in found[0].evidence


def test_a_file_rewritten_by_renaming_a_new_one_over_it_is_high(tmp_path: Path, packed: Path) -> None:
    def tamper(root: Path) -> None:
        index = root / "node_modules/tinytool/index.js"
        replace_file(index, index.read_text() + "console.log('PLANTED');\n")

    workspace, home = project(tmp_path, packed)
    found = session(workspace, home, tamper)
    assert severities(found) == [("node_modules", "high")]
    assert "node_modules/tinytool/index.js: not the content of its package's tarball" in found[0].evidence
    assert "npm ci" in found[0].evidence
    assert "PLANTED" in runs_on_host(workspace, "require('tinytool')")


def test_a_new_file_required_from_a_package_is_high(tmp_path: Path, packed: Path) -> None:
    def tamper(root: Path) -> None:
        (root / "node_modules/tinytool/lib/evil.js").write_text("console.log('PLANTED');\n")
        replace_file(root / "node_modules/tinytool/index.js", "require('./lib/evil');\nmodule.exports = 'tiny';\n")

    workspace, home = project(tmp_path, packed)
    found = session(workspace, home, tamper)
    assert severities(found) == [("node_modules", "high")]
    assert "node_modules/tinytool/lib/evil.js: a file its package's tarball does not hold" in found[0].evidence
    assert "PLANTED" in runs_on_host(workspace, "require('tinytool')")


def test_a_bin_link_replaced_by_a_script_is_high(tmp_path: Path, packed: Path) -> None:
    def tamper(root: Path) -> None:
        link = root / "node_modules/.bin/tinytool"
        link.unlink()
        link.write_text("#!/bin/sh\necho PLANTED\n")
        link.chmod(0o755)

    found = session(*project(tmp_path, packed), change=tamper)
    assert severities(found) == [("node_modules", "high")]
    assert "node_modules/.bin/tinytool: a file where npm makes a link" in found[0].evidence


def test_a_bin_link_pointed_at_another_file_of_the_package_is_high(tmp_path: Path, packed: Path) -> None:
    def tamper(root: Path) -> None:
        link = root / "node_modules/.bin/tinytool"
        link.unlink()
        link.symlink_to("../tinytool/lib/util.js")

    found = session(*project(tmp_path, packed), change=tamper)
    assert severities(found) == [("node_modules", "high")]
    assert "not a bin the lockfile records for tinytool" in found[0].evidence


def test_the_bin_directory_replaced_by_a_link_is_high(tmp_path: Path, packed: Path) -> None:
    def tamper(root: Path) -> None:
        shutil.rmtree(root / "node_modules/.bin")
        (root / "node_modules/tinytool/lib/bin").mkdir()
        (root / "node_modules/.bin").symlink_to("tinytool/lib/bin")

    found = session(*project(tmp_path, packed), change=tamper)
    assert severities(found) == [("node_modules", "high")]
    assert "node_modules/.bin: a symlink where npm makes its .bin directory" in found[0].evidence


def test_main_pointed_at_a_planted_file_is_high(tmp_path: Path, packed: Path) -> None:
    def tamper(root: Path) -> None:
        manifest = root / "node_modules/tinytool/package.json"
        document = json.loads(manifest.read_text())
        (root / "node_modules/tinytool/planted.js").write_text("console.log('PLANTED');\n")
        replace_file(manifest, json.dumps({**document, "main": "planted.js"}))

    workspace, home = project(tmp_path, packed)
    found = session(workspace, home, tamper)
    assert severities(found) == [("node_modules", "high")]
    assert "tinytool/package.json: not the content" in found[0].evidence
    assert "PLANTED" in runs_on_host(workspace, "require('tinytool')")


def test_a_package_directory_the_lockfile_does_not_list_is_high(tmp_path: Path, packed: Path) -> None:
    def tamper(root: Path) -> None:
        (root / "node_modules/extra").mkdir()
        (root / "node_modules/extra/package.json").write_text('{"name": "extra", "version": "1.0.0"}')
        (root / "node_modules/extra/index.js").write_text("console.log('PLANTED');\n")

    workspace, home = project(tmp_path, packed)
    found = session(workspace, home, tamper)
    assert severities(found) == [("node_modules", "high")]
    assert "node_modules/extra/index.js: in node_modules/extra, a package the lockfile does not list" in \
        found[0].evidence
    assert "PLANTED" in runs_on_host(workspace, "require('extra')")


def test_a_package_planted_inside_another_is_high(tmp_path: Path, packed: Path) -> None:
    def tamper(root: Path) -> None:
        (root / "node_modules/tinytool/node_modules/evil").mkdir(parents=True)
        (root / "node_modules/tinytool/node_modules/evil/index.js").write_text("console.log('PLANTED');\n")

    found = session(*project(tmp_path, packed), change=tamper)
    assert severities(found) == [("node_modules", "high")]
    assert "tinytool/node_modules/evil/index.js: a file its package's tarball does not hold" in found[0].evidence


def test_a_postinstall_added_with_the_lockfile_edited_to_match_is_high(tmp_path: Path, packed: Path) -> None:
    def tamper(root: Path) -> None:
        manifest = root / "node_modules/tinytool/package.json"
        document = json.loads(manifest.read_text())
        replace_file(manifest, json.dumps({**document, "scripts": {"postinstall": "echo PLANTED"}}))
        lock = json.loads((root / "package-lock.json").read_text())
        lock["packages"]["node_modules/tinytool"]["hasInstallScript"] = True
        replace_file(root / "package-lock.json", json.dumps(lock, indent=2))

    found = session(*project(tmp_path, packed), change=tamper)
    assert severities(found) == [("node_modules", "high")]
    assert "tinytool/package.json: not the content of its package's tarball" in found[0].evidence


def test_a_file_rewritten_in_a_tree_installed_before_the_session_is_high(tmp_path: Path, packed: Path) -> None:
    def tamper(root: Path) -> None:
        index = root / "node_modules/tinytool/index.js"
        replace_file(index, index.read_text() + "console.log('PLANTED');\n")

    workspace, home = project(tmp_path, packed)
    assert severities(session(workspace, home, tamper, installed=True)) == [("node_modules", "high")]


def tamper_before(kind: str) -> Callable[[Path], None]:
    """What a session before this one did to the installed tree (reported then, acknowledged)."""
    def tamper(root: Path) -> None:
        if kind == "a bin link pointed elsewhere":
            link = root / "node_modules/.bin/tinytool"
            link.unlink()
            link.symlink_to("../tinytool/lib/util.js")
        else:  # a file's mode changed
            (root / "node_modules/tinytool/index.js").chmod(0o777)
    return tamper


BEFORE = ["a bin link pointed elsewhere", "a file's mode changed"]


@pytest.mark.parametrize("before", BEFORE)
def test_npm_ci_over_a_tree_tampered_before_the_session_is_verified_low(tmp_path: Path, packed: Path,
                                                                        before: str) -> None:
    """Found in use: `npm ci` in the session put npm's own link back (its target changed) and was
    reported high, "modified in place, not installed anew"; npm ci makes every directory anew."""
    workspace, home = project(tmp_path, packed)
    npm(workspace, home / ".npm", "ci")
    tamper_before(before)(workspace)
    found = session(workspace, home, lambda root: npm(root, home / ".npm", "ci"))
    assert severities(found) == [("node_modules", "low")], found[0].evidence
    assert "verified 5 file(s) of 1 package(s)" in found[0].evidence


@pytest.mark.parametrize("before", BEFORE)
def test_the_same_change_made_in_the_session_is_high(tmp_path: Path, packed: Path, before: str) -> None:
    """The neighbour: the same change made in place by the session, after its install."""
    workspace, home = project(tmp_path, packed)
    found = session(workspace, home, tamper_before(before), installed=True)
    assert severities(found) == [("node_modules", "high")]
    assert ("not a bin the lockfile records" if "link" in before else "index.js: modified in place") \
        in found[0].evidence


def test_the_hidden_lockfile_must_say_what_the_lockfile_says(tmp_path: Path, packed: Path) -> None:
    def tamper(root: Path) -> None:
        hidden = root / "node_modules/.package-lock.json"
        document = json.loads(hidden.read_text())
        document["packages"]["node_modules/tinytool"]["integrity"] = "sha512-" + "A" * 86 + "=="
        replace_file(hidden, json.dumps(document))

    found = session(*project(tmp_path, packed), change=tamper)
    assert severities(found) == [("node_modules", "high")]
    assert "its entry node_modules/tinytool is not the lockfile's" in found[0].evidence


def test_a_tree_without_its_tarball_in_any_cache_is_medium_and_says_so(tmp_path: Path, packed: Path) -> None:
    workspace, home = project(tmp_path, packed)
    state = capture(Mount("workspace", workspace))
    npm(workspace, home / ".npm", "ci")
    found, _ = audit_mount(state, npm_caches=[tmp_path / "elsewhere"])
    assert severities([f for f in found if f.rule == "B07"]) == [("node_modules", "medium")]
    tree = next(f for f in found if f.rule == "B07")
    assert "its tarball is not in the npm cache" in tree.evidence and "npm ci" in tree.evidence
    assert tree.evidence.startswith("no file verified; 1 not verifiable: ")  # counts only what it verified


def test_a_tarball_rewritten_in_the_cache_verifies_nothing(tmp_path: Path, packed: Path) -> None:
    """The session writes its cache: a tarball there counts only when it hashes to the pin."""
    workspace, home = project(tmp_path, packed)
    state = capture(Mount("workspace", workspace))
    npm(workspace, home / ".npm", "ci")
    entry = next(p for p in (home / ".npm/_cacache/content-v2").rglob("*") if p.is_file())
    entry.chmod(0o644)
    entry.write_bytes(entry.read_bytes() + b"\0")
    found, _ = audit_mount(state, npm_caches=[home / ".npm"])
    tree = next(f for f in found if f.rule == "B07")
    assert tree.severity == "medium" and "does not hash to the lockfile's integrity" in tree.evidence


def test_no_lockfile_at_the_start_is_medium(tmp_path: Path, packed: Path) -> None:
    workspace, home = project(tmp_path, packed)
    (workspace / "package-lock.json").unlink()
    state = capture(Mount("workspace", workspace))
    npm(workspace, home / ".npm", "install", f"../{packed.name}")
    found, _ = audit_mount(state, npm_caches=[home / ".npm"])
    tree = next(f for f in found if f.rule == "B07")
    assert tree.severity == "medium" and "package-lock.json was not there at the session's start" in tree.evidence
    assert "as the session's start had it" not in tree.evidence  # found in use: "verified 0 file(s) ... against" it


def test_the_tarball_reader_refuses_what_npm_would_not_unpack(tmp_path: Path) -> None:
    """Entries outside the package are left out; the reader says why a tarball cannot be had."""
    import hashlib
    import io
    import tarfile
    from base64 import b64encode

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, data in (("package/index.js", b"x\n"), ("package/../../escape.js", b"y\n")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    data = buffer.getvalue()
    digest = hashlib.sha512(data).digest()
    integrity = "sha512-" + b64encode(digest).decode()
    hexdigest = digest.hex()
    entry = tmp_path / f"_cacache/content-v2/sha512/{hexdigest[:2]}/{hexdigest[2:4]}/{hexdigest[4:]}"
    entry.parent.mkdir(parents=True)
    entry.write_bytes(data)
    got = tarballs([tmp_path])([integrity, "sha512-" + b64encode(b"\1" * 64).decode()])
    artifact = got[integrity]
    assert not isinstance(artifact, str) and artifact.files == {"index.js": hashlib.sha256(b"x\n").hexdigest()}
    assert "not in the npm cache" in str(got["sha512-" + b64encode(b"\1" * 64).decode()])


def test_what_a_recorded_install_script_writes_is_medium_not_high(tmp_path: Path, scripted: Path) -> None:
    """npm ci runs the package's postinstall, which writes in its directory: not the tarball's, not
    tampering either (the lockfile records the script): unverifiable, said so."""
    workspace, home = project(tmp_path, scripted)
    assert json.loads((workspace / "package-lock.json").read_text())["packages"]["node_modules/builds"][
        "hasInstallScript"]
    found = session(workspace, home)
    assert severities(found) == [("node_modules", "medium")]
    assert "1 file(s) of node_modules/builds that are not its tarball's, as its install script" in found[0].evidence


def test_the_exit_audit_reads_the_tarballs_from_the_session_homes_npm_cache(tmp_path: Path, packed: Path) -> None:
    """Through start and finish, as a session runs: the home mount's .npm is where the workflow's
    npm_config_cache points, and the workspace's tree is verified against what it holds."""
    import io

    from dejima.adapters.findings import FindingStore
    from dejima.orchestration import exit_audit
    from dejima.ui.console import UI, plain_console

    workspace, home = project(tmp_path, packed)
    states = exit_audit.start("npm-1", [Mount("workspace", workspace), Mount("home", home)])
    npm(workspace, home / ".npm", "ci")
    exit_audit.finish("npm-1", UI(plain_console(io.StringIO())), states=states)
    store = FindingStore()
    try:
        [tree] = [s.finding for s in store.findings(str(workspace)) if s.finding.path == "node_modules"]
    finally:
        store.close()
    assert tree.severity == "low" and tree.evidence.startswith("verified 5 file(s) of 1 package(s)")


def cached(cache: Path, data: bytes) -> str:
    """``data`` put in an npm cache at its address; its integrity."""
    import hashlib
    from base64 import b64encode

    digest = hashlib.sha512(data).digest()
    hexdigest = digest.hex()
    entry = cache / f"_cacache/content-v2/sha512/{hexdigest[:2]}/{hexdigest[2:4]}/{hexdigest[4:]}"
    entry.parent.mkdir(parents=True, exist_ok=True)
    entry.write_bytes(data)
    return "sha512-" + b64encode(digest).decode()


def test_the_tarball_reader_reads_long_names_as_tar_does_and_refuses_a_broken_header(tmp_path: Path) -> None:
    """GNU long names and pax paths (names past 100 bytes) read as Python's tarfile reads them; a
    header whose checksum is wrong makes the tarball unverifiable, not partly verified."""
    import gzip
    import hashlib
    import io
    import tarfile

    long = "package/" + "d" * 120 + "/" + "f" * 90 + ".js"
    archives = {}
    for name, form in (("gnu", tarfile.GNU_FORMAT), ("pax", tarfile.PAX_FORMAT)):
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w:gz", format=form) as archive:
            for path, data in ((long, b"long\n"), ("package/ü.js", b"u\n")):
                info = tarfile.TarInfo(path)
                info.size = len(data)
                archive.addfile(info, io.BytesIO(data))
        archives[name] = cached(tmp_path, buffer.getvalue())
    header = tarfile.TarInfo("package/x.js").tobuf()
    raw = bytearray(header) + b"\0" * 1024
    raw[0] ^= 1  # the name changed under its checksum
    broken = cached(tmp_path, gzip.compress(bytes(raw)))
    got = tarballs([tmp_path])([*archives.values(), broken])
    for integrity in archives.values():
        artifact = got[integrity]
        assert not isinstance(artifact, str)
        assert artifact.files == {long.partition("/")[2]: hashlib.sha256(b"long\n").hexdigest(),
                                  "ü.js": hashlib.sha256(b"u\n").hexdigest()}
    assert "checksum is wrong" in str(got[broken])


def test_a_session_home_whose_npm_cache_is_a_link_is_not_read_through_it(tmp_path: Path, packed: Path) -> None:
    """The session can replace its home's .npm with a link (to a cache of its choosing elsewhere):
    the audit opens no link on its way to a tarball."""
    workspace, home = project(tmp_path, packed)
    state = capture(Mount("workspace", workspace))
    npm(workspace, tmp_path / "elsewhere", "ci")
    (home / ".npm").symlink_to(tmp_path / "elsewhere")
    found, _ = audit_mount(state, npm_caches=[home / ".npm"])
    tree = next(f for f in found if f.rule == "B07")
    assert tree.severity == "medium" and "its tarball is not in the npm cache" in tree.evidence


def test_an_npm_workspace_packages_own_tree_is_verified_and_its_link_is_the_lockfiles(
        tmp_path: Path, packed: Path, packed_v2: Path) -> None:
    """An npm workspace: packages/a needs tinytool 2 while the root has 1, so npm installs it in
    packages/a/node_modules (keyed so in the root's lockfile) and links node_modules/a to the
    workspace package. Both trees verified; a file planted in the nested one is high."""
    def layout(root: Path) -> tuple[Path, Path]:
        workspace, home = root / "workspace", root / "home"
        (workspace / "packages/a").mkdir(parents=True)
        home.mkdir()
        for tarball in (packed, packed_v2):
            shutil.copy(tarball, root / tarball.name)
        (workspace / "package.json").write_text(json.dumps({
            "name": "ws", "version": "1.0.0", "workspaces": ["packages/a"],
            "dependencies": {"tinytool": f"file:../{packed.name}"}}))
        (workspace / "packages/a/package.json").write_text(json.dumps({
            "name": "a", "version": "1.0.0", "dependencies": {"tinytool": f"file:../../../{packed_v2.name}"}}))
        npm(workspace, root / "host-cache", "install")
        shutil.rmtree(workspace / "node_modules")
        shutil.rmtree(workspace / "packages/a/node_modules")
        return workspace, home

    found = session(*layout(tmp_path / "benign"))
    assert sorted(severities(found)) == [("node_modules", "low"), ("packages/a/node_modules", "low")]
    nested = next(f for f in found if f.path == "packages/a/node_modules")
    assert nested.evidence.startswith("verified ") and " file(s) of 1 package(s)" in nested.evidence

    def tamper(root: Path) -> None:
        (root / "packages/a/node_modules/tinytool/lib/evil.js").write_text("console.log('PLANTED');\n")

    found = session(*layout(tmp_path / "planted"), tamper)
    assert sorted(severities(found)) == [("node_modules", "low"), ("packages/a/node_modules", "high")]


def test_a_bundled_dependency_is_verified_against_the_tarball_that_bundles_it(tmp_path: Path, bundling: Path) -> None:
    workspace, home = project(tmp_path / "benign", bundling)
    found = session(workspace, home)
    assert severities(found) == [("node_modules", "low")]
    assert found[0].evidence.startswith("verified 4 file(s) of 1 package(s)")

    def tamper(root: Path) -> None:
        replace_file(root / "node_modules/bundler/node_modules/inner/index.js", "console.log('PLANTED');\n")

    found = session(*project(tmp_path / "planted", bundling), tamper)
    assert severities(found) == [("node_modules", "high")]
    assert "bundler/node_modules/inner/index.js: not the content of its package's tarball" in found[0].evidence


def test_a_package_pinned_in_the_session_is_medium_and_still_held_to_its_new_pin(
        tmp_path: Path, packed: Path, bundling: Path) -> None:
    """`npm install` of a new dependency in the session: the lockfile gains its pin, which the
    session chose (medium, said so); its files are still held to that pin's tarball (high when not)."""
    def installs(root: Path) -> None:
        npm(root, root.parent / "home/.npm", "install", f"../{bundling.name}")

    def installs_and_plants(root: Path) -> None:
        installs(root)
        (root / "node_modules/bundler/planted.js").write_text("console.log('PLANTED');\n")

    for name, change, severity in (("benign", installs, "medium"), ("planted", installs_and_plants, "high")):
        workspace, home = project(tmp_path / name, packed)
        shutil.copy(bundling, tmp_path / name / bundling.name)
        [tree] = session(workspace, home, change)
        assert (tree.path, tree.severity) == ("node_modules", severity)
        if severity == "medium":
            assert "node_modules/bundler: pinned in the session (its lockfile entry is new or changed)" in \
                tree.evidence
            assert tree.evidence.startswith("verified 9 file(s) of 2 package(s)")
        else:
            assert "node_modules/bundler/planted.js: a file its package's tarball does not hold" in tree.evidence


def unpin(edit: str) -> Callable[[Path], None]:
    """The session's lockfile no longer pins tinytool's tarball: its integrity dropped, its entry
    removed, moved to a git source or to another version, each without an integrity."""
    def change(root: Path) -> None:
        lock = json.loads((root / "package-lock.json").read_text())
        entry = lock["packages"]["node_modules/tinytool"]
        if edit == "entry removed":
            del lock["packages"]["node_modules/tinytool"]
        else:
            del entry["integrity"]
        if edit == "moved to git":
            entry["resolved"] = "git+ssh://git@github.com/x/tinytool.git#" + "0" * 40
        if edit == "another version":
            entry["version"] = "1.0.1"
        replace_file(root / "package-lock.json", json.dumps(lock, indent=2))
    return change


UNPINNED = ["integrity dropped", "entry removed", "moved to git", "another version"]


@pytest.mark.parametrize("edit", UNPINNED)
def test_a_package_unpinned_in_the_lockfile_and_tampered_is_still_held_to_its_start_pin(
        tmp_path: Path, packed: Path, edit: str) -> None:
    """A tree installed before the session (acknowledged then): the session edits the lockfile so
    that nothing pins tinytool's tarball any more, and rewrites its index.js. What the start pinned
    still holds the files (high), where the edit alone made it "pinned in the session" (medium)."""
    def tamper(root: Path) -> None:
        unpin(edit)(root)
        index = root / "node_modules/tinytool/index.js"
        replace_file(index, index.read_text() + "console.log('PLANTED');\n")

    workspace, home = project(tmp_path, packed)
    [tree] = session(workspace, home, tamper, installed=True)
    assert (tree.path, tree.severity) == ("node_modules", "high"), tree.evidence
    assert "node_modules/tinytool/index.js: not the content of its package's tarball" in tree.evidence
    assert "PLANTED" in runs_on_host(workspace, "require('tinytool')")


@pytest.mark.parametrize("edit", UNPINNED)
def test_a_package_unpinned_in_the_lockfile_with_its_files_untouched_is_medium_and_says_so(
        tmp_path: Path, packed: Path, edit: str) -> None:
    """The benign neighbour: the same lockfile edit, the tree reinstalled from the start's pin (its
    files written anew, as they were): verified against the start's pin, and the edit said so."""
    def reinstall(root: Path) -> None:
        index = root / "node_modules/tinytool/index.js"
        replace_file(index, index.read_text())
        unpin(edit)(root)

    workspace, home = project(tmp_path, packed)
    [tree] = session(workspace, home, reinstall, installed=True)
    assert (tree.path, tree.severity) == ("node_modules", "medium"), tree.evidence
    assert tree.evidence.startswith("verified 1 file(s) of 1 package(s)")
    assert "node_modules/tinytool: no longer pinned by the lockfile (" in tree.evidence


@pytest.mark.parametrize("marker", [".yarn-integrity", ".yarn-state.yml", ".modules.yaml", ".pnpm/lock.yaml"])
@pytest.mark.parametrize("installed", [False, True])
def test_another_managers_marker_planted_in_an_npm_tree_does_not_stop_its_verification(
        tmp_path: Path, packed: Path, marker: str, installed: bool) -> None:
    """One file saying "yarn made this" (or pnpm) in a tree package-lock.json pinned at the start,
    with no yarn.lock or pnpm-lock.yaml beside it: the tree is still npm's and held to its pins. It
    was one low finding ("dependency tree rewritten") with index.js rewritten."""
    def tamper(root: Path) -> None:
        index = root / "node_modules/tinytool/index.js"
        replace_file(index, index.read_text() + "console.log('PLANTED');\n")
        write_marker(root / "node_modules" / marker)

    workspace, home = project(tmp_path, packed)
    [tree] = session(workspace, home, tamper, installed=installed)
    assert (tree.path, tree.severity) == ("node_modules", "high"), tree.evidence
    assert "node_modules/tinytool/index.js: not the content of its package's tarball" in tree.evidence


def write_marker(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("# written by the package manager\n")


@pytest.mark.parametrize(("lockfile", "marker"), [("yarn.lock", ".yarn-integrity"),
                                                  ("pnpm-lock.yaml", ".modules.yaml")])
def test_a_tree_of_a_project_that_has_another_managers_lockfile_is_left_to_that_manager(
        tmp_path: Path, packed: Path, lockfile: str, marker: str) -> None:
    """The benign neighbour: the project had yarn.lock (or pnpm-lock.yaml) beside package-lock.json at
    the start, and the session's yarn (pnpm) left its marker: not held to package-lock.json's pins,
    judged by that manager's rules (pnpm's by installs.py: low; yarn's by yarn_verify, which cannot
    read this yarn.lock as yarn 1's: medium, saying so)."""
    workspace, home = project(tmp_path, packed)
    (workspace / lockfile).write_text("# the other manager's lockfile\n")
    [tree] = session(workspace, home, lambda root: write_marker(root / "node_modules" / marker))
    expected = "medium" if lockfile == "yarn.lock" else "low"
    assert (tree.path, tree.severity) == ("node_modules", expected), tree.evidence
    if lockfile == "yarn.lock":
        assert tree.evidence.startswith("yarn's tree:") and "is not yarn 1's" in tree.evidence, tree.evidence
    assert "package-lock.json" not in tree.evidence


@pytest.mark.parametrize("tampered", [False, True])
def test_a_second_sessions_pins_read_ahead_verify_as_the_tarball_does(tmp_path: Path, packed: Path,
                                                                     tampered: bool) -> None:
    """The home's cache holds the pinned tarball at the start (a second session): the start reads it
    ahead and keeps its manifest; the session then rewrites the cached tarball and a file of the
    package to match it. The end audit holds the file to what the pin names, not to the cache now."""
    import io

    from dejima.adapters import fork_workers, pinned_archives
    from dejima.adapters.findings import FindingStore
    from dejima.orchestration import exit_audit
    from dejima.ui.console import UI, plain_console

    workspace, home = project(tmp_path, packed)
    npm(workspace, home / ".npm", "ci")  # the first session's install filled the home's cache
    shutil.rmtree(workspace / "node_modules")
    states = exit_audit.start("ahead-1", [Mount("workspace", workspace), Mount("home", home)])
    fork_workers.finish_behind()  # the session runs meanwhile
    assert len(list((pinned_archives.manifests_dir() / "npm").iterdir())) == 1
    npm(workspace, home / ".npm", "ci")
    if tampered:
        index = workspace / "node_modules/tinytool/index.js"
        replace_file(index, index.read_text() + "console.log('PLANTED');\n")
        for cached in (home / ".npm/_cacache/content-v2").rglob("*"):  # the cache made to agree (it is the session's)
            if cached.is_file():
                cached.write_bytes(b"not the pinned tarball")
    exit_audit.finish("ahead-1", UI(plain_console(io.StringIO())), states=states)
    store = FindingStore()
    try:
        [tree] = [s.finding for s in store.findings(str(workspace)) if s.finding.path == "node_modules"]
    finally:
        store.close()
    if tampered:
        assert tree.severity == "high"
        assert "tinytool/index.js: not the content of its package's tarball" in tree.evidence
    else:
        assert tree.severity == "low" and tree.evidence.startswith("verified 5 file(s) of 1 package(s)")


def test_the_pins_read_ahead_say_which_only_optional_packages_pin() -> None:
    """What the start reads ahead, and which of it it waits for: an integrity that a package not
    marked optional pins (in any lockfile) is awaited; one only optional packages pin (another
    platform's build) is not; an entry without a string integrity pins nothing."""
    from dejima.core.audit.npm_verify import pinned_integrities

    lock = {"packages": {"": {"name": "ws"}, "node_modules/a": {"integrity": "sha512-A"},
                         "node_modules/@esbuild/win32-x64": {"integrity": "sha512-E", "optional": True},
                         "node_modules/b": {"integrity": "sha512-B", "optional": True},
                         "node_modules/c/node_modules/b": {"integrity": "sha512-B"},
                         "node_modules/d": {"version": "1.0.0"},
                         "node_modules/e": {"integrity": 3, "optional": True},
                         "node_modules/f": {"integrity": "sha512-F", "optional": "yes"}}}
    other = {"packages": {"node_modules/a": {"integrity": "sha512-A", "optional": True},
                          "node_modules/g": {"integrity": "sha512-G", "dev": True, "optional": True},
                          "node_modules/h": {"integrity": "sha512-H", "devOptional": True}}}
    assert pinned_integrities([json.dumps(lock), json.dumps(other), "not json", None]) == {
        "sha512-A": False, "sha512-E": True, "sha512-B": False, "sha512-F": False, "sha512-G": True,
        "sha512-H": False}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("tampered", [False, True])
def test_a_first_sessions_pins_read_ahead_as_its_install_fetches_them_verify_as_none_read_ahead(
        tmp_path: Path, packed: Path, tampered: bool) -> None:
    """A project's first session: the home's npm cache is empty at the start, the session's `npm
    ci` fetches the pinned tarball into it. The read ahead keeps its manifest before the end audit
    (finish_behind: what it does while the session runs), and the end audit's findings are those
    of the same session with nothing read ahead (stopped at once: the end audit inflates it)."""
    import io

    from dejima.adapters import fork_workers, pinned_archives
    from dejima.adapters.findings import FindingStore
    from dejima.orchestration import exit_audit
    from dejima.ui.console import UI, plain_console

    def first_session(root: Path, ahead: bool) -> list[tuple[str, str, str, str]]:
        kept = pinned_archives.manifests_dir() / "npm"
        shutil.rmtree(kept, ignore_errors=True)
        workspace, home = project(root, packed)
        states = exit_audit.start(f"first-{ahead}", [Mount("workspace", workspace), Mount("home", home)])
        assert exit_audit._reading_ahead  # nothing cached: it waits for the install
        if not ahead:  # a session that ended before anything was read
            fork_workers.stop_behind(exit_audit._reading_ahead.pop())
        npm(workspace, home / ".npm", "ci")
        if tampered:
            index = workspace / "node_modules/tinytool/index.js"
            replace_file(index, index.read_text() + "console.log('PLANTED');\n")
        fork_workers.finish_behind()
        assert len(list(kept.iterdir()) if kept.exists() else []) == (1 if ahead else 0)
        exit_audit.finish(f"first-{ahead}", UI(plain_console(io.StringIO())), states=states)
        store = FindingStore()
        try:
            return sorted((s.finding.rule, s.finding.severity, s.finding.path, s.finding.evidence)
                          for s in store.findings(str(workspace)))
        finally:
            store.close()

    read_ahead, none_read = first_session(tmp_path / "ahead", True), first_session(tmp_path / "none", False)
    assert read_ahead == none_read
    [tree] = [finding for finding in read_ahead if finding[2] == "node_modules"]
    assert tree[1] == ("high" if tampered else "low"), tree
