"""The attacks of issue 32 in real sessions, through the launcher as a user runs it
(`dejima PATH -- sh -c '...'`), each followed by what the user ordinarily does on the host next
(`node -e "require('express')"`, `npx mime`, `pytest`), beside the same work untampered.

To bound the cost, one session plants every new-tree attack and every name trick after a real
`npm install` of express (tests/data/installs/npm), each on a package of its own so that each
test asserts its own change: the exit audit names it in the tree's high finding, and the host's
command runs the planted code. A second workspace is the benign neighbour: the same install
untampered, then a venv with a pip install in the next session (which starts), then, once the
user acknowledged both, a file of the installed tree rewritten with `sed -i`.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import TEST_SCOPE
from tests.integration.conftest import Images, user_workspace
from tests.integration.test_audit import dejima_audit
from tests.integration.test_real_installs import DATA, SEVERITIES, findings, settings_for
from tests.world import User, run_dejima

INSTALL = "npm install --no-audit --no-fund --loglevel=error"
SED = "sed -i '1i console.log(\"PLANTED-SED\");'"
PLANTED_CONFTEST = "print('PLANTED-CONFTEST-{name}')\n"
# Each line plants one attack in the tree npm just made (or beside it); the markers are what the
# planted code prints when the host runs it.
ATTACKS = {
    "append": "echo 'console.log(\"PLANTED-APPEND\");' >> node_modules/express/index.js",
    "sed": f"{SED} node_modules/depd/index.js",
    "bin": "rm node_modules/.bin/mime && printf '#!/bin/sh\\necho PLANTED-BIN\\n' > node_modules/.bin/mime && "
           "chmod +x node_modules/.bin/mime",
    "main": "echo 'console.log(\"PLANTED-MAIN\"); module.exports = require(\"./index.js\");' "
            "> node_modules/ms/planted.js && "
            "node -e 'const f = \"node_modules/ms/package.json\", p = JSON.parse(fs.readFileSync(f)); "
            "p.main = \"planted.js\"; fs.writeFileSync(f, JSON.stringify(p, null, 2))'",
    "unlisted": "mkdir node_modules/left-pad && "
                "echo 'console.log(\"PLANTED-UNLISTED\");' > node_modules/left-pad/index.js",
    "conftests": " && ".join(f"mkdir -p tests/{name} && printf \"{PLANTED_CONFTEST.format(name=name)}\" "
                             f"> tests/{name}/conftest.py" for name in ("site-packages", "vendor")),
    "workspace package": "mkdir -p packages/site-packages && "
                         "echo '{\"name\": \"sp\", \"version\": \"1.0.0\", "
                         "\"scripts\": {\"postinstall\": \"touch PLANTED-RAN\"}}' "
                         "> packages/site-packages/package.json && "
                         "node -e 'const p = JSON.parse(fs.readFileSync(\"package.json\")); "
                         "p.workspaces = [\"packages/*\"]; fs.writeFileSync(\"package.json\", JSON.stringify(p))'",
    # A node_modules of its own beside the project's code: require() from src/ finds it first.
    "shadowing tree": "mkdir -p src/node_modules/express && "
                      "echo 'console.log(\"PLANTED-SHADOW\"); module.exports = require(\"../../../node_modules/"
                      "express\");' > src/node_modules/express/index.js",
    # The same behind a link called node_modules, to a directory of another name.
    "linked tree": "mkdir -p third_party/nm/express && "
                   "echo 'console.log(\"PLANTED-LINKED\");' > third_party/nm/express/index.js && "
                   "ln -s ../third_party/nm tools/node_modules",
    # A second project (its own lockfile) installed too, and one file there saying yarn made its tree.
    "disguised": f"cd disguised && {INSTALL} && cd .. && "
                 "sed -i '1i console.log(\"PLANTED-DISGUISED\");' disguised/node_modules/express/index.js && "
                 "echo '# yarn' > disguised/node_modules/.yarn-integrity",
}
# In a later session, on the tree installed and acknowledged before it.
LATER = {
    "sed": f"{SED} node_modules/express/index.js",
    # The lockfile edited so that nothing pins the tarball any more, then the package's file rewritten.
    "unpinned": "node -e 'const f = \"package-lock.json\", l = JSON.parse(fs.readFileSync(f)); "
                "delete l.packages[\"node_modules/cookie\"].integrity; delete l.packages[\"node_modules/etag\"]; "
                "l.packages[\"node_modules/vary\"].hasInstallScript = true; "
                "fs.writeFileSync(f, JSON.stringify(l, null, 2))' && "
                "sed -i '1i console.log(\"PLANTED-INTEGRITY-DROPPED\");' node_modules/cookie/index.js && "
                "sed -i '1i console.log(\"PLANTED-ENTRY-REMOVED\");' node_modules/etag/index.js",
    # A package no lockfile lists, whose bin shadows node for every npm script (npm test).
    "shadow": "mkdir node_modules/nodeshim && printf '#!/bin/sh\\necho PLANTED-SHADOW-NODE\\n' "
              "> node_modules/nodeshim/cli.js && chmod +x node_modules/nodeshim/cli.js && "
              "ln -s ../nodeshim/cli.js node_modules/.bin/node",
    "postinstall": "node -e 'const f = \"node_modules/vary/package.json\", p = JSON.parse(fs.readFileSync(f)); "
                   "p.scripts = {postinstall: \"echo PLANTED-POSTINSTALL\"}; fs.writeFileSync(f, JSON.stringify(p))'",
}
Found = list[dict[str, object]]


@dataclass(frozen=True)
class Session:
    workspace: Path
    found: Found  # what the exit audit recorded for this session alone


def npm_project(world_dir: Path, user: User, name: str) -> Path:
    workspace = user_workspace(world_dir, user, name)
    for item in (DATA / "npm").iterdir():
        shutil.copy(item, workspace / item.name)
    if os.getuid() == 0:
        subprocess.run(["chown", "-R", f"{user.uid}:{user.gid}", str(workspace)], check=True)
    return workspace


def session(user: User, workspace: Path, settings: Path, script: str, seen: set[object], *args: str) -> Session:
    result = run_dejima(user, TEST_SCOPE, "-q", *args, str(workspace), "--", "sh", "-ec", script, timeout=900,
                        DEJIMA_SETTINGS=str(settings))
    assert result.returncode == 0 and "SESSION-DONE" in result.stdout, (result.stdout[-2000:],
                                                                        result.stderr[-3000:])
    found = [f for f in findings(user, TEST_SCOPE, workspace) if f["id"] not in seen]
    seen.update(f["id"] for f in found)
    return Session(workspace, found)


def tree_finding(found: Found, mount: str = "workspace", path: str = "node_modules") -> dict[str, object]:
    [tree] = [f for f in found if f["mount"] == mount and f["path"] == path]
    return tree


def on_host(workspace: Path, *command: str) -> str:
    """The command a user runs in the workspace on the host next; its output (planted code prints
    its marker)."""
    home = workspace.parent.parent / "host-home"
    home.mkdir(exist_ok=True)
    result = subprocess.run(list(command), cwd=str(workspace), capture_output=True, text=True, timeout=120,
                            env={"PATH": os.environ["PATH"], "HOME": str(home)}, check=False)
    return result.stdout + result.stderr


def severity(found: dict[str, object]) -> int:
    return SEVERITIES.index(str(found["severity"]))


# --- a new tree, tampered in the session that installed it ------------------------------------------

@pytest.fixture(scope="module")
def attacked(images: Images, user: User, world_dir: Path) -> Session:
    workspace = npm_project(world_dir, user, "tree-attacked")
    shutil.copytree(DATA / "npm", workspace / "disguised")
    (workspace / "src").mkdir()
    (workspace / "src/app.js").write_text("require('express');\nconsole.log('app');\n")
    (workspace / "tools").mkdir()
    (workspace / "tools/build.js").write_text("require('express');\nconsole.log('build');\n")
    if os.getuid() == 0:
        for name in ("disguised", "src", "tools"):
            subprocess.run(["chown", "-R", f"{user.uid}:{user.gid}", str(workspace / name)], check=True)
    settings = settings_for(world_dir, "registry.npmjs.org")
    script = " && ".join([INSTALL, *ATTACKS.values(), "echo SESSION-DONE"])
    return session(user, workspace, settings, script, set())


def test_a_line_appended_to_a_package_file_is_high_and_runs_on_the_host(attacked: Session) -> None:
    tree = tree_finding(attacked.found)
    assert tree["severity"] == "high" and \
        "node_modules/express/index.js: not the content of its package's tarball" in str(tree["evidence"]), tree
    assert "PLANTED-APPEND" in on_host(attacked.workspace, "node", "-e", "require('express')")


def test_a_package_file_rewritten_with_sed_i_is_high_and_runs_on_the_host(attacked: Session) -> None:
    tree = tree_finding(attacked.found)
    assert tree["severity"] == "high" and \
        "node_modules/depd/index.js: not the content of its package's tarball" in str(tree["evidence"]), tree
    assert "PLANTED-SED" in on_host(attacked.workspace, "node", "-e", "require('depd')")


def test_a_bin_link_replaced_by_a_script_is_high_and_runs_on_the_host(attacked: Session) -> None:
    tree = tree_finding(attacked.found)
    assert tree["severity"] == "high" and \
        "node_modules/.bin/mime: a file where npm makes a link to a package's bin" in str(tree["evidence"]), tree
    assert "PLANTED-BIN" in on_host(attacked.workspace, "npx", "--offline", "--no-install", "mime", "x.txt")


def test_main_pointed_at_a_planted_file_is_high_and_runs_on_the_host(attacked: Session) -> None:
    tree = tree_finding(attacked.found)
    evidence = str(tree["evidence"])
    assert tree["severity"] == "high" and \
        "node_modules/ms/package.json: not the content of its package's tarball" in evidence and \
        "node_modules/ms/planted.js: a file its package's tarball does not hold" in evidence, tree
    assert "PLANTED-MAIN" in on_host(attacked.workspace, "node", "-e", "require('ms')")


def test_a_package_directory_the_lockfile_does_not_list_is_high_and_runs_on_the_host(attacked: Session) -> None:
    tree = tree_finding(attacked.found)
    assert tree["severity"] == "high" and "node_modules/left-pad/index.js: in node_modules/left-pad, a package the " \
        "lockfile does not list" in str(tree["evidence"]), tree
    assert "PLANTED-UNLISTED" in on_host(attacked.workspace, "node", "-e", "require('left-pad')")


def test_a_yarn_marker_planted_in_an_npm_tree_does_not_stop_its_verification(attacked: Session) -> None:
    """It did: one file, and the rewritten express/index.js was one low finding ("dependency tree
    rewritten")."""
    tree = tree_finding(attacked.found, path="disguised/node_modules")
    assert tree["severity"] == "high" and "disguised/node_modules/express/index.js: not the content of its " \
        "package's tarball" in str(tree["evidence"]), tree
    assert "PLANTED-DISGUISED" in on_host(attacked.workspace / "disguised", "node", "-e", "require('express')")


def test_a_node_modules_of_its_own_under_src_shadowing_the_projects_tree_is_high_and_runs_on_the_host(
        attacked: Session) -> None:
    [shadow] = [f for f in attacked.found if str(f["path"]).startswith("src/")]
    assert (shadow["rule"], shadow["severity"], shadow["path"]) == ("B07", "high", "src/node_modules"), shadow
    assert "PLANTED-SHADOW" in on_host(attacked.workspace, "node", "src/app.js")


def test_a_link_called_node_modules_to_planted_code_is_high_and_runs_on_the_host(attacked: Session) -> None:
    """It was no finding at all: the link is no file in a node_modules, and the .js files it points
    to are in a directory of another name."""
    [link] = [f for f in attacked.found if f["path"] == "tools/node_modules"]
    assert (link["rule"], link["severity"]) == ("B07", "high"), link
    assert "PLANTED-LINKED" in on_host(attacked.workspace, "node", "tools/build.js")


@pytest.mark.parametrize("name", ["site-packages", "vendor"])
def test_a_conftest_under_a_directory_named_like_a_tree_is_high_and_pytest_runs_it(attacked: Session,
                                                                                name: str) -> None:
    [conftest] = [f for f in attacked.found if f["path"] == f"tests/{name}/conftest.py"]
    assert (conftest["rule"], conftest["severity"]) == ("B09", "high"), conftest
    ran = on_host(attacked.workspace, sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", "tests")
    assert f"PLANTED-CONFTEST-{name}" in ran, ran[-2000:]


def test_a_workspace_package_named_site_packages_with_a_postinstall_is_found_and_npm_install_runs_it(
        attacked: Session, tmp_path: Path) -> None:
    [package] = [f for f in attacked.found if f["path"] == "packages/site-packages/package.json"]
    assert package["rule"] == "B01" and severity(package) >= SEVERITIES.index("high"), package
    copy = tmp_path / "copy"  # npm install reshapes the tree (prunes left-pad): the other tests read it
    shutil.copytree(attacked.workspace, copy, symlinks=True)
    ran = on_host(copy, "npm", "install", "--offline", "--no-audit", "--no-fund")
    assert (copy / "packages/site-packages/PLANTED-RAN").exists(), ran[-2000:]


# --- the benign neighbour, then the same tree attacked once acknowledged ----------------------------

def wheel(directory: Path) -> Path:
    """A pure-Python wheel as any build backend writes one (its RECORD with each file's hash)."""
    files = {"tiny/__init__.py": b"VALUE = 1\n",
             "tiny-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: tiny\nVersion: 1.0\n",
             "tiny-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                         b"Tag: py3-none-any\n"}
    record = "".join(f"{name},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},"
                     f"{len(data)}\n" for name, data in files.items()) + "tiny-1.0.dist-info/RECORD,,\n"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in [*files.items(), ("tiny-1.0.dist-info/RECORD", record.encode())]:
            archive.writestr(name, data)
    path = directory / "tiny-1.0-py3-none-any.whl"
    path.write_bytes(buffer.getvalue())
    path.chmod(0o644)
    return path


@dataclass(frozen=True)
class Ordinary:
    installed: Session  # npm install, untampered
    python: Session  # the next session: a venv and a pip install
    rewritten: Session  # after both were acknowledged: sed -i on a file of the tree


@pytest.fixture(scope="module")
def ordinary(images: Images, user: User, world_dir: Path) -> Ordinary:
    workspace = npm_project(world_dir, user, "tree-ordinary")
    wheel(workspace)
    settings = settings_for(world_dir, "registry.npmjs.org")
    seen: set[object] = set()
    installed = session(user, workspace, settings,
                        f"{INSTALL} && node -e \"require('express')\" && echo SESSION-DONE", seen)
    python = session(user, workspace, settings, "python3 -m venv .venv && .venv/bin/pip install -q --no-index "
                     "tiny-1.0-py3-none-any.whl && .venv/bin/python -c 'import tiny' && echo SESSION-DONE", seen,
                     "--workflow", "python")  # the workflow that brings python3-venv
    acked = dejima_audit(user, TEST_SCOPE, "ack", "--all", "--workspace", str(workspace), "--note", "reviewed")
    assert acked.returncode == 0, acked.stderr
    rewritten = session(user, workspace, settings, " && ".join([*LATER.values(), "echo SESSION-DONE"]), seen)
    return Ordinary(installed, python, rewritten)


def test_the_same_install_untampered_is_one_low_finding_verified_file_by_file_and_the_next_session_starts(
        ordinary: Ordinary) -> None:
    shown = [(f["rule"], f["severity"], f["mount"], f["path"], f["evidence"]) for f in ordinary.installed.found]
    assert [f[:4] for f in shown if f[1] != "info"] == [("B07", "low", "workspace", "node_modules")], shown
    evidence = str(tree_finding(ordinary.installed.found)["evidence"])
    assert evidence.startswith("verified 642 file(s) of 72 package(s) against package-lock.json"), shown
    # The next session (the venv's) started on it and ran to its end: session() checked its exit.
    assert ordinary.python.found, "the next session ran and its audit recorded the venv"


def test_a_venv_with_a_pip_install_is_at_most_medium_and_says_why(ordinary: Ordinary) -> None:
    """No uv.lock or hashed requirements pinned what pip installed (nor the pip `python -m venv`
    seeded): unverifiable, medium, which never blocks a start (test_python_verify holds one to its pins)."""
    shown = [(f["rule"], f["severity"], f["mount"], f["path"], f["evidence"]) for f in ordinary.python.found]
    assert all(severity(f) <= SEVERITIES.index("medium") for f in ordinary.python.found), shown
    assert [f["path"] for f in ordinary.python.found if f["mount"] == "workspace"] == [".venv"], shown
    venv = next(f for f in ordinary.python.found if f["path"] == ".venv")
    assert "no uv.lock or requirements file with --hash pins was there at the session's start" in str(venv["evidence"])


def test_a_file_rewritten_with_sed_i_in_a_tree_acknowledged_earlier_is_high_and_runs_on_the_host(
        ordinary: Ordinary) -> None:
    tree = tree_finding(ordinary.rewritten.found)
    assert tree["severity"] == "high" and \
        "node_modules/express/index.js: not the content of its package's tarball" in str(tree["evidence"]), tree
    assert "PLANTED-SED" in on_host(ordinary.rewritten.workspace, "node", "-e", "require('express')")


@pytest.mark.parametrize(("package", "marker"), [("cookie", "PLANTED-INTEGRITY-DROPPED"),
                                                 ("etag", "PLANTED-ENTRY-REMOVED")])
def test_a_file_rewritten_in_a_package_the_session_unpinned_in_the_lockfile_is_high_and_runs_on_the_host(
        ordinary: Ordinary, package: str, marker: str) -> None:
    """The lockfile edited first (cookie's integrity dropped, etag's entry removed): the files are
    still held to what the lockfile pinned at the start (it was medium, "pinned in the session")."""
    tree = tree_finding(ordinary.rewritten.found)
    assert tree["severity"] == "high" and \
        f"node_modules/{package}/index.js: not the content of its package's tarball" in str(tree["evidence"]), tree
    assert marker in on_host(ordinary.rewritten.workspace, "node", "-e", f"require('{package}')")


def test_a_postinstall_added_with_the_lockfile_edited_to_match_is_high(ordinary: Ordinary) -> None:
    tree = tree_finding(ordinary.rewritten.found)
    assert tree["severity"] == "high" and \
        "node_modules/vary/package.json: not the content of its package's tarball" in str(tree["evidence"]), tree


def test_a_package_the_lockfile_does_not_list_whose_bin_shadows_node_is_high_and_npm_test_runs_it(
        ordinary: Ordinary) -> None:
    tree = tree_finding(ordinary.rewritten.found)
    evidence = str(tree["evidence"])
    assert tree["severity"] == "high" and "node_modules/nodeshim/cli.js: in node_modules/nodeshim, a package the " \
        "lockfile does not list" in evidence and "node_modules/.bin/node: a link to ../nodeshim/cli.js, not a bin " \
        "the lockfile records for node" in evidence, tree
    assert "PLANTED-SHADOW-NODE" in on_host(ordinary.rewritten.workspace, "npm", "test")
