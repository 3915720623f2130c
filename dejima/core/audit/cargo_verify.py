"""Cargo's trees in a workspace held to what Cargo.lock pinned before the session (issue 32).

``cargo vendor`` copies each crate's files, as its ``.crate`` archive holds them, into
``vendor/NAME`` (``NAME-VERSION`` when two versions are vendored) and writes a
``.cargo-checksum.json`` there: each file's SHA-256 and, as ``package``, the archive's own, which
Cargo.lock pins as ``checksum``. A build reads the vendored files and checks them against that
record only, which is written in the tree too: an agent that edits a vendored file and rewrites
the record to match is built from on the host. So every file the session wrote in a vendored
crate is compared with the entry of that path in the crate's archive, one from a registry cache
whose bytes hash to Cargo.lock's checksum (the adapter, dejima/adapters/cargo_cache.py, checks):

- a file that is not the archive's, a file the archive does not hold, a link, a crate directory
  whose record is missing or names no checksum Cargo.lock pins, a file outside any crate: each
  named (high);
- what cannot be verified: no Cargo.lock at the start, a crate pinned in the session, a git
  dependency (nothing pins its content), a crate in no cache: said so (medium), with what would
  verify it (``cargo vendor`` again on the host).

The build output (``target/``) cannot be verified at all: compiled code is no archive's content.
Cargo reuses an output whose fingerprint matches without building it again, and runs it: a build
script's binary, a proc-macro's shared object (loaded into rustc), a test or the program itself.
What the session wrote there is said so (medium), with what makes it safe (``cargo clean``).

What it proves: every file the session wrote in a vendored crate is, byte for byte, the content of
the crate Cargo.lock pinned before the session. What it cannot: files the session did not change
are as they were at the start (the audit judges the session, not the tree's past); the build
output is whatever the session made it.
"""

from __future__ import annotations

import tomllib

from dejima.core.audit.caches import changes_value
from dejima.core.audit.model import Finding, View, finding
from dejima.core.audit.pinned import TreeJudgement, TreeVerdict, Wanted, hold, lockfile_above
from dejima.core.snapshot import Change

LOCKFILE = "Cargo.lock"
CHECKSUMS = ".cargo-checksum.json"
CRATE_PREFIX = "crate "
# The evidence of cargo's tree findings begins with these words (restore names the command by them).
VENDOR_EVIDENCE = "vendored crates: "
BUILD_EVIDENCE = "cargo's build output: "
HOME_BUILD_EVIDENCE = "cargo's build output, in the home: "  # the next session's cargo builds it again
_CONTENT = ("added", "modified", "type", "link-target")
_LOCK_LIMIT = 4 << 20  # the start keeps no more of a lockfile


def crate_key(name: str, version: str, checksum: str) -> str:
    """The key the artifacts' reader is asked for a crate by (model.Artifacts)."""
    return f"{CRATE_PREFIX}{name} {version} {checksum}"


def crate_of_key(key: str) -> tuple[str, str, str]:
    """(name, version, checksum) of a crate key."""
    name, version, checksum = key[len(CRATE_PREFIX):].split(" ")
    return name, version, checksum


class _Pins:
    """A Cargo.lock's packages: by checksum, and by (name, version) with their source."""

    def __init__(self, text: str) -> None:
        document = tomllib.loads(text)
        packages = document.get("package", [])
        metadata = document.get("metadata", {})
        if not isinstance(packages, list) or not isinstance(metadata, dict):
            raise ValueError("no [[package]] list")
        self.by_checksum: dict[str, tuple[str, str]] = {}
        self.sources: dict[tuple[str, str], tuple[str, str | None]] = {}  # (name, version) -> (source, checksum)
        for entry in packages:
            if not isinstance(entry, dict):
                continue
            name, version = str(entry.get("name", "")), str(entry.get("version", ""))
            checksum = entry.get("checksum")
            if isinstance(checksum, str) and len(checksum) == 64:
                self.by_checksum[checksum] = (name, version)
            self.sources[(name, version)] = (str(entry.get("source", "")), checksum if isinstance(checksum, str)
                                             else None)
        for key, value in metadata.items():  # lockfile version 1: "checksum NAME VERSION (SOURCE)" = "hex"
            parts = str(key).split(" ")
            if len(parts) >= 3 and parts[0] == "checksum" and isinstance(value, str) and len(value) == 64:
                self.by_checksum[value] = (parts[1], parts[2])
                source = self.sources.get((parts[1], parts[2]), ("", None))[0]
                self.sources[(parts[1], parts[2])] = (source, value)


def _pins(view: View, lockfile: str, side: str) -> _Pins | str:
    text = view.text(lockfile, side)
    if text is None:
        entry = view.entry(lockfile, side)
        return f"{lockfile} was not there at the session's start" if entry is None else \
            f"{lockfile} at the session's start was not kept (over {_LOCK_LIMIT >> 20} MiB, or not a file)"
    try:
        return _Pins(text)
    except (ValueError, RecursionError) as error:  # tomllib's errors are ValueErrors
        return f"{lockfile} is not a lockfile cargo reads ({error})"


def _written(change: Change) -> bool:
    return change.after is not None and change.what in _CONTENT and change.after.kind != "dir"


def verify_vendor(tree: str, changes: list[Change], view: View) -> TreeVerdict:
    """The session's changes in a ``cargo vendor`` directory held to Cargo.lock at the start."""
    lockfile = lockfile_above(tree, view, (LOCKFILE,)) or LOCKFILE
    verdict = TreeVerdict(lockfile)
    start = _pins(view, lockfile, "before")
    if isinstance(start, str):
        if any(_written(change) for change in changes):
            verdict.unverified.append(start)
        return verdict
    end = _pins(view, lockfile, "after") if lockfile in view.after else None
    crates: dict[str, list[Change]] = {}
    for change in changes:
        inside = change.path[len(tree) + 1:]
        directory, slash, _ = inside.partition("/")
        if slash:
            crates.setdefault(directory, []).append(change)
        elif _written(change):
            verdict.problems.append(f"{change.path}: in {tree}, where cargo vendor puts no file")
    wanted: dict[str, list[Wanted]] = {}
    for directory, written in sorted(crates.items()):
        files = [change for change in written if _written(change)]
        if files:
            _crate(verdict, f"{tree}/{directory}", files, view, start, end if isinstance(end, _Pins) else None,
                   wanted)
    hold(verdict, wanted, view, ".crate")
    return verdict


def _crate(verdict: TreeVerdict, crate: str, files: list[Change], view: View, start: _Pins, end: _Pins | None,
           wanted: dict[str, list[Wanted]]) -> None:
    """One vendored crate's written files, to be compared with the archive its record names."""
    record = view.json_object(f"{crate}/{CHECKSUMS}")
    package = record.get("package") if record is not None else None
    if record is None:
        verdict.problems.append(f"{crate}: no {CHECKSUMS} cargo reads, so not a crate cargo vendor made "
                                f"({len(files)} file(s) written in it)")
        return
    if not isinstance(package, str):  # a git dependency: nothing pins its content
        name, version = _manifest(view, crate)
        source, checksum = start.sources.get((name, version), ("", None))
        if checksum is not None or not source.startswith("git+"):
            verdict.problems.append(f"{crate}: its {CHECKSUMS} names no checksum, and Cargo.lock pins no git "
                                    f"source for {name} {version} (it pins {source or 'nothing'})")
        else:
            verdict.unverified.append(f"{crate}: a git dependency ({source}): no checksum pins its content")
        return
    pinned = start.by_checksum.get(package)
    if pinned is None and end is not None and package in end.by_checksum:
        pinned = end.by_checksum[package]
        verdict.unverified.append(f"{crate}: {pinned[0]} {pinned[1]} pinned in the session (its Cargo.lock entry "
                                  "is new or changed)")
    if pinned is None:
        verdict.problems.append(f"{crate}: a crate Cargo.lock does not pin (its {CHECKSUMS} names {package[:16]}…)")
        return
    key = crate_key(*pinned, package)
    for change in files:
        new = change.after
        assert new is not None
        inside = change.path[len(crate) + 1:]
        if inside == CHECKSUMS:
            continue  # cargo vendor's own record: what it pins was checked above
        if new.kind != "file":
            verdict.problems.append(f"{change.path}: a {new.kind}, where cargo vendor writes the crate's files only")
        else:
            wanted.setdefault(key, []).append(Wanted(change.path, inside, new.sha256, crate))


def _manifest(view: View, crate: str) -> tuple[str, str]:
    """(name, version) a vendored crate's Cargo.toml declares."""
    try:
        document = tomllib.loads(view.text(f"{crate}/Cargo.toml") or "")
    except ValueError:
        return "", ""
    package = document.get("package")
    if not isinstance(package, dict):
        return "", ""
    return str(package.get("name", "")), str(package.get("version", ""))


def _revendor(tree: str) -> str:
    project = tree.rpartition("/")[0]
    return f"on the host: rm -r {tree} && cargo vendor" + (f" (in {project})" if project else "")


def vendor_judgement(tree: str, changes: list[Change], view: View) -> TreeJudgement:
    """A ``cargo vendor`` directory verified against Cargo.lock, its one finding waiting for what the
    other checks find (``TreeJudgement.finding``)."""
    verdict = verify_vendor(tree, changes, view)
    idle = None if any(_written(change) for change in changes) else \
        f"the tree changed ({len({c.path for c in changes})} entries) with no file written: nothing to verify"
    return TreeJudgement(tree, verdict, changes_value(changes), _revendor(tree), unit="crate", idle=idle,
                         lead=VENDOR_EVIDENCE)


def build_output_findings(tree: str, changes: list[Change], in_home: bool = False) -> list[Finding]:
    """What the session wrote in cargo's build output: never verifiable (medium); in the session's
    home, where the rust workflow has cargo build, only later sessions run it, inside the boundary
    (low), and the host's cargo builds its own."""
    written = len({change.path for change in changes if _written(change)})
    if in_home and written:
        return [finding("B07", "low", tree, f"{HOME_BUILD_EVIDENCE}{written} file(s) built in the session's home "
                        "(CARGO_TARGET_DIR): only later sessions run them, inside the boundary; the host's cargo "
                        "builds its own", changes_value(changes), remedy="reinstall")]
    if not written:
        return [finding("B07", "low", tree, f"{BUILD_EVIDENCE}{len({c.path for c in changes})} entries removed or "
                        "changed in mode only, nothing written", changes_value(changes), remedy="reinstall")]
    return [finding("B07", "medium", tree, f"{BUILD_EVIDENCE}{written} file(s) built in the session, which no "
                    "lockfile can verify: cargo reuses an output whose fingerprint matches and runs it (build "
                    "scripts, proc-macros, tests, the program); `cargo clean` on the host before building, "
                    "testing or running", changes_value(changes), remedy="reinstall")]


def reinstaller(tree: str, evidence: str) -> str | None:
    """The command that makes a cargo tree again (restore offers it), by what its finding says."""
    if evidence.startswith(BUILD_EVIDENCE):
        return "cargo clean"
    if evidence.startswith(VENDOR_EVIDENCE):
        return "cargo vendor"
    return None
