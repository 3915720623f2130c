"""The rules' shortcuts answer what the long way answers: a question asked once per directory or
per package (the npm verification's package keys and pins, the trees' grouping, the bare
repositories) gives, for every path, what asking it of that path gives; a name that cannot
normalise to a git name is not normalised; a RECORD's paths joined plainly are what normpath makes, its
lines what csv reads. Generated paths and names (hypothesis), and a real
verification of a tree whose packages are each governed otherwise."""

from __future__ import annotations

import base64
import binascii
import csv
import json
import posixpath
from collections.abc import Callable

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from dejima.core.audit import files
from dejima.core.audit.git import split_git
from dejima.core.audit.installs import _hex, _package_directory, joined, record_entries
from dejima.core.audit.model import Artifact, View
from dejima.core.audit.names import _GIT_NAMES, _added_name, normalize
from dejima.core.audit.npm_verify import _Check, first_package, package_key, verify
from dejima.core.audit.pinned import TreeVerdict, _each
from dejima.core.audit.treeroots import DEPENDENCY_KINDS, PYTHON_KINDS, changed_in_tree, tree_of
from dejima.core.audit.trees import _group
from dejima.core.snapshot import Change, Snapshot, SnapshotEntry, diff

# Path components that steer package_key: node_modules, scopes, .bin, dot-directories, and plain names.
_PARTS = st.sampled_from(["node_modules", "@s", "@t", "a", "b", ".bin", ".cache", "lib", "x", "package.json"])


def _entry(path: str, kind: str = "file", digest: str = "0" * 64, target: str | None = None) -> SnapshotEntry:
    return SnapshotEntry(path, kind, 0o644, 1000, 1000, 1, 1, 1, 1, 1, digest if kind == "file" else None, target)


@settings(max_examples=400, deadline=None)
@given(st.lists(_PARTS, min_size=1, max_size=9), st.sets(st.lists(_PARTS, min_size=2, max_size=6).map("/".join)))
@example(["node_modules", "@s"], set())
@example(["node_modules", "a", "node_modules", "b", "x"], {"node_modules/a/node_modules/b"})
def test_a_package_key_asked_per_directory_is_the_one_asked_per_path(parts: list[str], listed: set[str]) -> None:
    relative = "/".join(parts)
    check = _Check(TreeVerdict("package-lock.json"), "node_modules", "", {k: {} for k in listed}, {}, View({}, {}, [],
                                                                                                            _none))
    parent = relative.rpartition("/")[0]
    assert check.key_of(relative, parent, link=False) == package_key(relative, check.listed)
    assert check.key_of(relative, parent, link=True) == package_key(relative + "/x", check.listed)
    if parent:  # npm_tampering's package of a file, asked once per directory
        assert _package_directory(f"{parent}/x") == _package_directory(relative)


@settings(max_examples=400, deadline=None)
@given(st.sets(st.lists(_PARTS, min_size=1, max_size=8).map("/".join), max_size=6),
       st.sets(st.lists(_PARTS, min_size=2, max_size=6).map("/".join)))
@example({"node_modules/a/lib/node_modules/b/c/x"}, {"node_modules/a/lib/node_modules/b"})
@example({"node_modules/a/node_modules/b/x/y"}, {"node_modules/a/node_modules/b"})
def test_a_directory_keyed_as_its_parent_is_keyed_as_asked(paths: set[str], listed: set[str]) -> None:
    check = _Check(TreeVerdict("package-lock.json"), "node_modules", "", {k: {} for k in listed}, {}, View({}, {}, [],
                                                                                                            _none))
    directories = sorted({"/".join(p.split("/")[:i]) for p in paths for i in range(1, p.count("/") + 1)})
    for directory in directories:  # each after its parent, as the sorted changes ask them
        assert check.key_of(f"{directory}/x", directory, link=False) == package_key(f"{directory}/x", check.listed)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(["", "@s", "@", "a", "node_modules", "x"]), min_size=1, max_size=5))
def test_a_package_cut_by_its_slashes_is_the_one_split_into_parts(parts: list[str]) -> None:
    relative = "/".join(["node_modules", *parts])
    split = relative.split("/")
    size = 3 if split[1].startswith("@") else 2
    long_way = (None, "") if len(split) <= size else ("/".join(split[:size]), "/".join(split[size:]))
    assert first_package(relative) == long_way


@settings(max_examples=400, deadline=None)
@given(st.text(min_size=1, max_size=12))
@example("GIT~1")
@example(".GIT.")
@example(".Github")
@example("gitmod~3")
def test_a_name_left_unnormalised_is_no_git_name(name: str) -> None:
    shortcut = normalize(name) if not name.isascii() or "git" in name.lower() else name
    assert (shortcut in _GIT_NAMES and name != shortcut) == (normalize(name) in _GIT_NAMES and name != normalize(name))
    if "/" not in name:  # the rule itself, on an added file of that name: G25 exactly when the long way says
        view = View({}, {name: _entry(name)}, [], _none)
        g25 = any(f.rule == "G25" for f in _added_name(name, _entry(name), view))
        assert g25 == (normalize(name) in _GIT_NAMES and name != normalize(name))


def _none(side: str, path: str) -> bytes | None:
    return None


def test_a_directory_like_a_bare_repository_inside_dot_git_hides_no_path_outside_it() -> None:
    """A .git directory holds HEAD, objects and refs as a bare repository does: no path outside it is
    in it; a real bare repository elsewhere still holds its paths."""
    after = {p: _entry(p, "dir" if p.count("/") < 1 else "file") for p in (
        ".git", ".git/HEAD", ".git/objects", ".git/refs", "src", "src/main.c")}
    bare = {**after, **{p: _entry(p) for p in ("vendor/r/HEAD", "vendor/r/objects", "vendor/r/refs",
                                               "vendor/r/hooks/post-checkout")}}
    for changed in (False, True):  # few changes: each path's directories asked; many: one look at all entries
        view = View({}, after, diff({}, after) if changed else [], _none)
        assert split_git("src/main.c", view) is None
        where = split_git("vendor/r/hooks/post-checkout", View({}, bare, diff({}, bare) if changed else [], _none))
        assert where is not None and (where.gitdir, where.inner) == ("vendor/r", "hooks/post-checkout")


def _npm_tree() -> tuple[Snapshot, Snapshot, dict[str, bytes]]:
    """A project whose lockfile pins four packages, each governed otherwise at the end: kept, pinned
    anew, dropped from the lockfile, and pinned without an integrity; plus one it does not list."""
    start = {"packages": {"": {"name": "p"},
                          "node_modules/kept": {"version": "1.0.0", "integrity": "sha512-kept"},
                          "node_modules/@s/anew": {"version": "1.0.0", "integrity": "sha512-old"},
                          "node_modules/dropped": {"version": "1.0.0", "integrity": "sha512-dropped"},
                          "node_modules/loose": {"version": "1.0.0", "resolved": "git+ssh://x"}}}
    end = json.loads(json.dumps(start))
    end["packages"]["node_modules/@s/anew"] = {"version": "2.0.0", "integrity": "sha512-new"}
    del end["packages"]["node_modules/dropped"]
    texts = {"before": json.dumps(start).encode(), "after": json.dumps(end).encode()}
    before = {"package.json": _entry("package.json"), "package-lock.json": _entry("package-lock.json", digest="1")}
    after = {**before, "package-lock.json": _entry("package-lock.json", digest="2"),
             "node_modules": _entry("node_modules", "dir"),
             "node_modules/.package-lock.json": _entry("node_modules/.package-lock.json")}
    for package in ("kept", "@s/anew", "dropped", "loose", "unlisted"):
        for name in ("index.js", "lib/a.js", "lib/b.js", "package.json"):
            path = f"node_modules/{package}/{name}"
            after[path] = _entry(path, digest=("f" if name == "lib/b.js" else "a") * 64)
    after["node_modules/kept/lib/link"] = _entry("node_modules/kept/lib/link", "symlink", target="../index.js")
    return before, after, texts


def test_an_npm_tree_verified_with_per_package_answers_says_what_per_path_answers_say() -> None:
    before, after, texts = _npm_tree()

    def contents(side: str, path: str) -> bytes | None:
        return texts[side] if path == "package-lock.json" else b'{"packages": {}}' if side == "after" else None

    def artifacts(keys: list[str]) -> dict[str, Artifact | str]:
        return {k: Artifact({"index.js": "a" * 64, "lib/a.js": "a" * 64, "lib/b.js": "a" * 64,
                             "package.json": "a" * 64}) for k in keys}

    view = View(before, after, diff(before, after), contents, artifacts=artifacts)
    tree = "node_modules"
    changes = [c for c in view.changes if c.path.startswith("node_modules/")]
    verdict = verify(tree, changes, view)
    assert verdict is not None
    # What the verification said when it asked each path (main before the shortcuts), in its order.
    assert (verdict.files, sorted(verdict.packages)) == (9, ["node_modules/@s/anew", "node_modules/dropped",
                                                             "node_modules/kept"])
    assert verdict.problems == [
        "node_modules/kept/lib/link: a symlink, where npm writes the tarball's files only",
        *(f"node_modules/unlisted/{n}: in node_modules/unlisted, a package the lockfile does not list"
          for n in ("index.js", "lib/a.js", "lib/b.js", "package.json")),
        *(f"node_modules/{p}/lib/b.js: not the content of its package's tarball" for p in ("@s/anew", "dropped",
                                                                                           "kept"))]
    assert verdict.unverified == [
        "node_modules/@s/anew: pinned in the session (its lockfile entry is new or changed)",
        "node_modules/dropped: no longer pinned by the lockfile (its entry removed in the session); its files "
        "are held to the start's pin",
        "node_modules/loose: pinned without an integrity (resolved: git+ssh://x)"]


@pytest.mark.parametrize("version", ['"1.0.0"', "NaN"])
def test_a_lockfile_left_as_it_was_parsed_once_verifies_as_parsed_twice(version: str) -> None:
    lock = '{"packages": {"node_modules/a": {"version": %s, "integrity": "sha512-a"}}}' % version
    before = {"package-lock.json": _entry("package-lock.json")}
    after = {**before, "node_modules": _entry("node_modules", "dir"), "node_modules/a": _entry("node_modules/a", "dir"),
             "node_modules/a/index.js": _entry("node_modules/a/index.js")}

    def verified(end: str) -> TreeVerdict:
        texts = {"before": lock, "after": end}
        view = View(before, after, diff(before, after),
                    lambda side, path: texts[side].encode() if path == "package-lock.json" else None,
                    artifacts=lambda keys: {k: Artifact({"index.js": "0" * 64}) for k in keys})
        verdict = verify("node_modules", [c for c in view.changes if c.path.startswith("node_modules/")], view)
        assert verdict is not None
        return verdict

    # The same text, and another with the same pins (a NaN: json reads one object for every NaN).
    once, twice = verified(lock), verified(lock + "\n")
    assert once == twice and once.files == 1 and not once.unverified


def test_the_files_of_a_package_taken_together_are_judged_in_their_order() -> None:
    """A file changed otherwise (a link become a file) in a run of files added to a package held to
    its pin is wanted from the same tarball on its own: what differs is named in the paths' order."""
    lock = b'{"packages": {"node_modules/a": {"version": "1.0.0", "integrity": "sha512-a"}}}'
    before = {"package-lock.json": _entry("package-lock.json"), "node_modules": _entry("node_modules", "dir"),
              "node_modules/a": _entry("node_modules/a", "dir"),
              "node_modules/a/b.js": _entry("node_modules/a/b.js", "symlink", target="c.js")}
    after = {**before, **{f"node_modules/a/{n}.js": _entry(f"node_modules/a/{n}.js") for n in "abc"}}
    view = View(before, after, diff(before, after), lambda side, path: lock if path == "package-lock.json" else None,
                artifacts=lambda keys: {k: Artifact({f"{n}.js": "f" * 64 for n in "abc"}) for k in keys})
    verdict = verify("node_modules", [c for c in view.changes if c.path.startswith("node_modules/")], view)
    assert verdict is not None and [c.what for c in view.changes] == ["added", "type", "added"]
    assert verdict.problems == [f"node_modules/a/{n}.js: not the content of its package's tarball" for n in "abc"]


def test_the_trees_grouped_once_are_those_each_kind_groups() -> None:
    before, after, _ = _npm_tree()
    after.update({p: _entry(p) for p in (".venv/pyvenv.cfg", ".venv/lib/python3.11/site-packages/a.py")})
    view = View(before, after, diff(before, after), _none)
    for kinds in (DEPENDENCY_KINDS, PYTHON_KINDS, ("cargo",)):
        expected: dict[object, list[object]] = {}
        for change in view.changes:
            tree = tree_of(change.path, view)
            if tree is not None and tree.kind in kinds:
                expected.setdefault(tree, []).append(change)
        assert _group(view, kinds) == expected
    assert {t.kind for t in _group(view, DEPENDENCY_KINDS + PYTHON_KINDS)} == {"npm", "python"}


# Path components that steer normpath: dots, empty parts (doubled slashes), and plain names with a dot in them.
_PATH_PARTS = st.sampled_from(["", ".", "..", "...", ".a", "a.", "a", "b", "a.b", "..a", "__pycache__", "x,y", '"q'])


@settings(max_examples=500, deadline=None)
@given(st.lists(_PATH_PARTS, max_size=6).map("/".join), st.sampled_from(["", "lib/site", ".venv/lib/python3.11/site"]))
@example("", "site")
@example("/abs/x", "site")
@example("a/", "site")
@example("../../bin/x", ".venv/lib/python3.11/site")
def test_a_path_joined_plainly_is_the_one_normpath_makes(relative: str, directory: str) -> None:
    assert joined(directory, relative) == posixpath.normpath(posixpath.join(directory, relative))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.lists(_PATH_PARTS, min_size=1, max_size=4).map("/".join),
                          st.sampled_from(["sha256=AAAA", "", "md5=x"]), st.sampled_from(["12", ""])), max_size=5),
       st.booleans())
def test_a_record_s_lines_are_what_csv_reads_joined_as_normpath_joins_them(
        rows: list[tuple[str, str, str]], target: bool) -> None:
    """Each RECORD line, as pip and uv write it (csv, a path with a comma or quote in it quoted), read
    plainly where it can be: the path and hash csv reads, joined below the site."""
    site = ".venv/lib/python3.11/site-packages"
    tree = site if target else ".venv"
    lines = []
    for row in rows:
        written = _csv_line(row)
        lines.append(written)
    view = View({}, {f"{site}/x-1.dist-info/RECORD": _entry(f"{site}/x-1.dist-info/RECORD")}, [],
                lambda side, path: "".join(line + "\n" for line in lines).encode())
    expected = []
    for path, digest, _ in rows:
        path = path[len("../../"):] if site == tree and path.startswith("../../") else path
        expected.append((posixpath.normpath(posixpath.join(site, path)), digest))
    assert record_entries(f"{site}/x-1.dist-info/RECORD", site, tree, view) == expected


def _csv_line(row: tuple[str, str, str]) -> str:
    import io

    out = io.StringIO()
    csv.writer(out, lineterminator="").writerow(row)
    return out.getvalue()


def test_the_fallback_passing_by_the_trees_paths_finds_what_asking_each_path_finds() -> None:
    from dejima.core.audit.fallback import _unlisted, fallback_findings
    from dejima.core.audit.isolation import judged

    before, after, _ = _npm_tree()
    after.update({p: _entry(p) for p in (".tool/settings.txt", "zz.config.mjs", "src/a.js",
                                         "node_modules/kept/.hidden/x.txt", "lib/node_modules/x/.cfg/y")})
    view = View(before, after, diff(before, after), _none)
    found = fallback_findings(view, [])
    # The long way: every changed path asked (main before the shortcut).
    assert found == [f for path, change in view.changed.items()
                     for f in judged(view, "X01/X02", path, _unlisted, path, change, view)]
    assert {(f.rule, f.path) for f in found} == {("X01", ".tool/settings.txt"), ("X02", "zz.config.mjs"),
                                                ("X01", "lib/node_modules/x/.cfg/y")}


class _EachFileAsked(_Check):
    """The verification asking each file on its own (main before the per-directory shortcut)."""

    def held_in_full(self, directory: str) -> None:
        return None


_PATHS = st.lists(_PARTS, min_size=1, max_size=7).map(lambda parts: "node_modules/" + "/".join(parts))
_KEYS = st.lists(_PARTS, min_size=1, max_size=5).map(lambda parts: "node_modules/" + "/".join(parts))


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(["", "app"]), st.sets(_PATHS, max_size=25), st.dictionaries(_KEYS, st.sampled_from(
    ["sha512-a", "sha512-b", "", "link", "bundled", "scripted"]), max_size=8),
    st.dictionaries(_KEYS, st.sampled_from(["sha512-a", "sha512-c", ""]), max_size=3), st.booleans())
@example("", {"node_modules/a/lib/x", "node_modules/a/x", "node_modules/.bin/a", "node_modules/x"},
         {"node_modules/a": "sha512-a"}, {}, False)
@example("app", {"node_modules/a/x", "node_modules/a/node_modules/b/y"}, {"node_modules/a": "sha512-a"},
         {"node_modules/a": ""}, True)  # the session's lockfile pins no tarball for it: held to the start's, said so
def test_an_npm_tree_verified_a_directory_at_a_time_says_what_asking_each_file_says(
        base: str, paths: set[str], start: dict[str, str], anew: dict[str, str], modified: bool) -> None:
    def entry(pin: str) -> dict[str, object]:
        return {"version": "1", **({"integrity": pin} if pin.startswith("sha512") else {}),
                **({"link": True, "resolved": "x"} if pin == "link" else {}), **({"inBundle": True} if pin == "bundled"
                                                                               else {}),
                **({"integrity": "sha512-s", "hasInstallScript": True} if pin == "scripted" else {})}

    lock: dict[str, dict[str, object]] = {"": {"name": "p"}, **{key: entry(pin) for key, pin in start.items()}}
    end: dict[str, dict[str, object]] = {**lock, **{key: entry(pin) for key, pin in anew.items()}}
    prefix = f"{base}/" if base else ""
    tree = f"{prefix}node_modules"
    before = {f"{prefix}package-lock.json": _entry(f"{prefix}package-lock.json", digest="1")}
    files = {f"{prefix}{p}": _entry(f"{prefix}{p}", digest="a" * 64) for p in paths}
    after = {**before, f"{prefix}package-lock.json": _entry(f"{prefix}package-lock.json", digest="2"), **files}
    if modified:  # the same files there at the start, with other content
        before.update({p: _entry(p, digest="b" * 64) for p in files})
    texts = {"before": json.dumps({"packages": lock}).encode(), "after": json.dumps({"packages": end}).encode()}

    def contents(side: str, path: str) -> bytes | None:
        return texts[side] if path == f"{prefix}package-lock.json" else None

    view = View(before, after, diff(before, after), contents)
    changes = [c for c in view.changes if c.path.startswith(tree + "/")]
    verdicts = []
    for kind in (_Check, _EachFileAsked):
        verdict = TreeVerdict("package-lock.json")
        check = kind(verdict, tree, base, lock, end, view)
        check.run(changes)
        verdicts.append((verdict, {k: _each(files) for k, files in check.wanted.items()}, check.unpinned))
    assert verdicts[0] == verdicts[1]


_NAME_PARTS = st.sampled_from(["RECORD", "xRECORD", "RECORD.bak", "HEAD", "a", "x.dist-info", "é", "\udcff"])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(_NAME_PARTS, min_size=1, max_size=4).map("/".join), unique=True),
       st.lists(st.sampled_from(["RECORD", "HEAD", "a", "RECORD.bak"]), min_size=1, max_size=3).map(tuple))
@example(["RECORD", "a/RECORD", "xRECORD", "a/xRECORD/RECORD"], ("RECORD",))
@example(["HEAD", "a/RECORD", "RECORD/HEAD"], ("RECORD", "HEAD", "RECORD"))
def test_paths_named_found_in_the_joined_paths_are_those_each_path_tested_gives(
        paths: list[str], names: tuple[str, ...]) -> None:
    # model.View.named searches one text of every path in C: the paths, sorted, of a test of each.
    snapshot = {path: _entry(path) for path in paths}
    view = View(dict(reversed(snapshot.items())), snapshot, [], _none)
    for side, entries in (("after", snapshot), ("before", view.before)):
        suffixes = tuple(f"/{n}" for n in names)
        assert view.named(*names, side=side) == sorted(p for p in entries if p.endswith(suffixes) or p in names)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(_NAME_PARTS, min_size=1, max_size=3).map("/".join), unique=True),
       st.lists(st.lists(_NAME_PARTS, min_size=1, max_size=3).map("/".join), unique=True),
       st.lists(st.sampled_from(["RECORD", "HEAD", "a", "RECORD.bak"]), min_size=1, max_size=3).map(tuple),
       st.booleans())
@example(["a/RECORD", "RECORD"], ["RECORD", "b/RECORD"], ("RECORD",), True)
def test_paths_named_at_the_end_from_the_starts_and_the_changes_are_those_of_the_end_itself(
        start: list[str], end: list[str], names: tuple[str, ...], ahead: bool) -> None:
    # What the end names, from what the start named less the removed plus the added (the diff is
    # complete: rules.audit makes it), and from the start's paths joined while the session ran.
    from dejima.core.snapshot import joined_paths
    before = {path: _entry(path) for path in start}
    after = {path: _entry(path, digest="1" * 64) for path in end}
    derived = View(before, after, diff(before, after), _none, complete=True,
                   before_paths=joined_paths(before) if ahead else None)
    long_way = View(before, after, diff(before, after), _none)
    for side in ("after", "before"):
        assert derived.named(*names, side=side) == long_way.named(*names, side=side)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["node_modules/a/x.js", "node_modules/a/y.js", ".git/hooks/pre-commit",
                                 ".vscode/tasks.json", "src/x.py", ".envrc"]), unique=True),
       st.sampled_from(["node_modules/a/x.js", ".venv/lib/x.py"]), st.integers(1, 4))
def test_a_tree_file_whose_other_names_are_outside_the_mount_is_what_the_long_way_finds(
        others: list[str], path: str, nlink: int) -> None:
    # files._hard_link returns at once for a tree's file no other name of which is in the mount (a
    # hard link from uv's cache): what the rest of it finds then is nothing either.
    entries = {p: SnapshotEntry(p, "file", 0o644, 1000, 1000, 1, nlink + len(others), 7 if p in others or p == path
                                else 8, 1, 1, "0" * 64) for p in {*others, path}}
    view = View({}, entries, [], _none)
    found = files._hard_link(path, entries[path], view, in_a_tree=True)
    if not [p for p in others if p != path]:
        assert found == []
    watched = [p for p in others if p != path and files.watched_place(p, view)]
    assert bool(found) == bool(watched)


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.binary(min_size=32, max_size=32).map(lambda b: base64.urlsafe_b64encode(b).decode().rstrip("=")),
                 st.text(alphabet="AZaz09-_+/=é \n", max_size=48)),
       st.sampled_from(["sha256=", "sha512=", "", "sha256"]))
@example("47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU", "sha256=")
@example("=00", "sha256")
def test_a_record_hash_read_in_hex_is_what_urlsafe_b64decode_reads(value: str, algorithm: str) -> None:
    # installs._hex decodes with binascii directly: base64's wrappers cost more than the decoding.
    digest = algorithm + value
    named, _, encoded = digest.partition("=")
    try:
        expected = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).hex() \
            if named == "sha256" and encoded else ""
    except (binascii.Error, ValueError):
        expected = ""
    assert _hex(digest) == expected


# Files that make a directory a tree (or would, beside its manifest), names the rules single out
# (a conftest.py, git names, a name that normalises, a lockfile, a .pyc, a config), and plain ones.
_TREE_FILES = ["package.json", "node_modules/.package-lock.json", ".venv/pyvenv.cfg", "vendor/modules.txt", "go.mod",
               "Cargo.toml", "target/.rustc_info.json", ".npm/_cacache/index", ".cache/pip/x"]
_SPOT_PARTS = st.sampled_from(["node_modules", ".venv", "vendor", "target", ".npm", ".cache", "pip", "a", "lib",
                               "conftest.py", ".GIT", "Gité", "é.py", "x.js", "package-lock.json", "y.pyc",
                               ".vscode", "settings.json", "-rf", "A.js", ".git", "hooks", "pre-commit"])
_ENTRIES = st.tuples(st.sampled_from(["file", "file", "file", "dir", "symlink", "fifo"]),
                     st.sampled_from([0o644, 0o755, 0o4755, 0o666]), st.sampled_from([1, 2]), st.booleans())


def _spot(path: str, shape: tuple[str, int, int, bool], inode: int) -> SnapshotEntry:
    kind, mode, nlink, caps = shape
    return SnapshotEntry(path, kind, mode, 1000, 1000, 10, nlink if kind == "file" else 1, inode, 1, 1,
                         ("b" * 64 if kind == "file" else None), "../a" if kind == "symlink" else None,
                         caps if kind == "file" else None)


@settings(max_examples=250, deadline=None)
@given(st.sets(st.sampled_from(_TREE_FILES)), st.sets(st.sampled_from(_TREE_FILES)),
       st.dictionaries(st.lists(_SPOT_PARTS, min_size=1, max_size=5).map("/".join), _ENTRIES, max_size=14),
       st.sampled_from(["workspace", "home", "cache"]))
@example({"package.json", "node_modules/.package-lock.json"}, set(),
         {"node_modules/a/conftest.py": ("file", 0o644, 1, False), "vendor/Gité": ("file", 0o4755, 2, True),
          "node_modules/a/.GIT": ("file", 0o644, 1, False)}, "workspace")
@example({"vendor/modules.txt", "go.mod"}, set(), {"vendor/a/conftest.py": ("file", 0o644, 1, False)}, "workspace")
def test_the_rules_told_each_changed_path_s_tree_once_find_what_asking_each_path_finds(
        start: set[str], end: set[str], spots: dict[str, tuple[str, int, int, bool]], kind: str) -> None:
    """Every rule stage, and the fallback, on a mount whose changed paths' trees are told once per
    directory (treeroots.changed_in_tree) and passed by where a rule says nothing of a tree's path,
    finds what it finds when each path is asked on its own (none told: every rule the long way)."""
    before = {p: _spot(p, ("file", 0o644, 1, False), 1) for p in start}
    after = {p: _spot(p, ("file", 0o644, 1, False), 1) for p in end | start}
    for index, (path, shape) in enumerate(sorted(spots.items())):
        after[path] = _spot(path, shape, 100 + index % 3)
    for snapshot in (before, after):  # every directory above an entry is one
        for path in list(snapshot):
            parts = path.split("/")
            for cut in range(1, len(parts)):
                directory = "/".join(parts[:cut])
                if snapshot.get(directory, _spot("", ("dir", 0, 0, False), 0)).kind == "dir":
                    snapshot[directory] = _spot(directory, ("dir", 0o755, 1, False), 2)

    def contents(side: str, path: str) -> bytes | None:
        return b'{"packages": {"": {}}}' if path.endswith(".json") else b"x = 1\n# vim: set makeprg=x:\n"

    _each_stage_as_asked_path_by_path(before, after, contents, kind)


def _each_stage_as_asked_path_by_path(before: Snapshot, after: Snapshot, contents: Callable[[str, str], bytes | None],
                                      kind: str) -> None:
    from dejima.core.audit.configs import config_findings
    from dejima.core.audit.environment import environment_findings
    from dejima.core.audit.fallback import fallback_findings
    from dejima.core.audit.files import file_findings
    from dejima.core.audit.git import git_findings
    from dejima.core.audit.isolation import judged
    from dejima.core.audit.lockfiles import lockfile_findings
    from dejima.core.audit.modelines import modeline_findings
    from dejima.core.audit.names import name_findings
    from dejima.core.audit.trees import tree_findings

    for stage in (config_findings, file_findings, name_findings, tree_findings, environment_findings, git_findings,
                  lockfile_findings, modeline_findings, lambda view: fallback_findings(view, [])):
        told = View(before, after, diff(before, after), contents, kind)
        each = View(before, after, diff(before, after), contents, kind, memo={"in-tree": {}})  # none told
        assert judged(told, "stage", "", stage, told) == judged(each, "stage", "", stage, each)
        assert each.memo["in-tree"] == {}


def test_a_directory_whose_tree_cannot_be_told_fails_where_asking_each_path_fails() -> None:
    """A workspace package's node_modules whose project's npm record cannot be read (its reader
    fails): its paths are asked on their own, each rule failing where it fails the long way; the
    other directories' paths are told as ever."""
    paths = ["package.json", "node_modules/.package-lock.json", "node_modules/a/index.js",
             "packages/p/node_modules/x/conftest.py", "packages/p/node_modules/x/.GIT", "src/conftest.py"]
    after = {p: _entry(p) for p in paths}
    for path in ("node_modules", "node_modules/a", "packages", "packages/p", "packages/p/node_modules",
                 "packages/p/node_modules/x", "src"):
        after[path] = _entry(path, "dir")

    def contents(side: str, path: str) -> bytes | None:
        if path == "node_modules/.package-lock.json":
            raise OSError("unreadable")
        return b"{}"

    view = View({}, after, diff({}, after), contents)
    assert changed_in_tree(view).get("node_modules/a/index.js") is True
    assert "packages/p/node_modules/x/conftest.py" not in changed_in_tree(view)
    _each_stage_as_asked_path_by_path({}, after, contents, "workspace")
    # The trees are not grouped without it: the tree rules fail with what failed (judged as a stage's failure).
    from dejima.core.audit.trees import tree_findings

    with pytest.raises(OSError, match="unreadable"):
        tree_findings(view)


@settings(max_examples=300, deadline=None)
@given(_ENTRIES, st.sampled_from(["file", "dir", "symlink", "fifo", "socket", "char", "block"]),
       st.sampled_from(["added", "modified", "mode", "type", "owner"]), st.booleans())
def test_an_entry_passed_by_as_unprivileged_is_one_the_privilege_rules_find_nothing_in(
        shape: tuple[str, int, int, bool], kind: str, what: str, before: bool) -> None:
    from dejima.core.audit.files import _privilege, may_be_privileged

    new = _spot("x", (kind, *shape[1:]), 1)._replace(caps=shape[3] if kind == "file" else None)
    old = _spot("x", ("file", 0o644, 1, False), 1) if before else None
    assert may_be_privileged(new) or _privilege("x", Change("x", what, old, new)) == []


_GIT_PARTS = st.sampled_from([".git", "a.git", ".gitmodules", "modules", "worktrees", "hooks", "HEAD", "objects",
                              "refs", "config", "packed-refs", "index", "a", "x"])


@settings(max_examples=400, deadline=None)
@given(st.lists(_GIT_PARTS, min_size=1, max_size=6).map("/".join),
       st.sets(st.lists(_GIT_PARTS, min_size=1, max_size=4).map("/".join), max_size=6),
       st.sampled_from([None, "", "hooks", "a/hooks"]), st.integers(0, 40))
@example("a/x", {"a/HEAD", "a/objects", "a/refs"}, None, 0)
@example("hooks/x", set(), "hooks", 0)
def test_a_path_the_git_rules_pass_by_is_in_no_git_directory_and_under_no_hooks_path(
        path: str, others: set[str], hooks: str | None, padding: int) -> None:
    """git_findings passes by a path without ".git" (when the mount may hold no bare repository
    and no hooks path is set), the configs' and other loops each path without ".git": split_git
    finds no git directory for any such path, and the hooks rule has none to judge."""
    from dejima.core.audit.git import _TOP_CONFIGS, _is_config, _passed_by

    after = {p: _entry(p) for p in {path, *others, *(f"pad/{n}" for n in range(padding))}}
    view = View({}, after, diff({}, after), _none)
    if _passed_by(path, view, hooks):
        assert split_git(path, view) is None and not (hooks and path.startswith(hooks + "/"))
    if ".git" not in path:
        assert split_git(path) is None and _is_config(path) == (path in _TOP_CONFIGS)
    assert path.endswith("/.git") == (path.rsplit("/", 1)[-1] == ".git" and path != ".git")


@given(st.sampled_from(["added", "removed", "modified", "mode", "type", "link-target", "owner", "nlink"]),
       st.booleans(), st.booleans())
def test_a_change_the_tree_rules_do_not_ask_is_none_in_place(what: str, same_parent: bool, before: bool) -> None:
    """_dependency_tree asks _in_place only of what it can call in place (_IN_PLACE): any other
    change is never in place, whatever its directory did."""
    from dejima.core.audit.trees import _IN_PLACE, _in_place

    parent = _entry("d", "dir")
    after = {"d": parent if same_parent else parent._replace(ctime_ns=2), "d/x": _entry("d/x")}
    view = View({"d": parent, **({"d/x": _entry("d/x")} if before else {})}, after, [], _none)
    change = Change("d/x", what, _entry("d/x") if before else None, _entry("d/x"))
    assert what in _IN_PLACE or not _in_place(change, view)
