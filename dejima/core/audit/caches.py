"""Package caches (research M01): a cache gains entries legitimately, but an entry that was there at
the start and changed is a poisoned package. Cargo builds extracted registry sources without
checking them again, uv links unpacked wheels into environments, Go trusts its module directories:
whatever was planted there runs at the next build that uses it.

Every shipped workflow keeps its caches under the session's home (a per-project directory that only
sessions mount), so what runs there runs in this project's next sessions, inside the boundary:
medium. A cache the host shared with sessions would run it on the host (critical); dejima mounts
none.
"""

from __future__ import annotations

import hashlib
import re

from dejima.core.audit.model import Finding, View, finding, first_few
from dejima.core.snapshot import Change

# (entry pattern under the home; whether files added inside an existing entry count; what uses it).
# An entry is what a tool writes once and then only reads: an extracted crate, a module version, a
# wheel. Indexes, HTTP caches and lock files are rewritten by the tools themselves: not listed.
HOME_CACHES = (
    (r"\.cargo/registry/src/[^/]+/[^/]+", True, "cargo builds it, build script included"),
    (r"\.cargo/registry/cache/[^/]+/[^/]+\.crate", False, "cargo unpacks it when the source is missing"),
    (r"\.cargo/git/checkouts/[^/]+/[^/]+", True, "cargo builds it, build script included"),
    (r"\.cache/pip/wheels/.+\.whl", False, "pip installs it instead of building the package again"),
    (r"\.cache/uv/archive-v\d+/[^/]+", True, "uv links it into every environment that needs the package"),
    (r"\.cache/uv/(?:wheels|built-wheels|sdists)-v\d+/.+\.(?:whl|tar\.gz|zip|msgpack|rkyv)", False,
     "uv installs it"),
    (r"\.cache/pypoetry/artifacts/.+\.(?:whl|tar\.gz|zip)", False, "poetry installs it"),
    (r"\.npm/_cacache/content-v2/.+", False, "npm installs it (the next install that needs it)"),
    (r"\.cache/yarn/v\d+/[^/]+", True, "yarn copies it into node_modules"),
    (r"\.yarn/berry/cache/[^/]+\.zip", False, "yarn installs it"),
    (r"go/pkg/mod/(?!cache/)[^@]+@[^/]+", True, "go builds it"),
    (r"go/pkg/mod/cache/download/.+\.(?:zip|mod)", False, "go extracts it"),
    (r"\.m2/repository/.+\.(?:jar|pom)", False, "maven puts it on the class path"),
    (r"\.m2/wrapper/.+\.(?:jar|zip)", False, "the maven wrapper runs it"),
    (r"\.gradle/caches/modules-2/files-2\.1/.+\.(?:jar|pom|module|aar)", False, "gradle puts it on the class path"),
    (r"\.gradle/wrapper/dists/[^/]+/[^/]+", True, "the gradle wrapper runs it"),
    (r"\.gem/gems/[^/]+", True, "ruby loads it"),
    (r"\.gem/cache/[^/]+\.gem", False, "gem installs it"),
    (r"\.bundle/cache/.+\.gem", False, "bundler installs it"),
)
_HOME = tuple((re.compile(f"^({pattern})(/|$)"), inside, what) for pattern, inside, what in HOME_CACHES)
# The directories the tools own whole (their indexes, locks and temporary files too): judged by the
# rules above, never file by file (uv's lock files are 0666, its archive names may start with '-',
# its cache hard-links into every environment; npm, cargo and pnpm do the like).
HOME_CACHE_ROOTS = (".cargo/registry", ".cargo/git", ".cache/pip", ".cache/uv", ".cache/pypoetry", ".npm",
                    ".cache/yarn", ".yarn/berry/cache", "go/pkg/mod", ".cache/go-build", ".m2/repository",
                    ".m2/wrapper", ".gradle/caches", ".gradle/wrapper", ".gem", ".bundle/cache",
                    ".local/share/pnpm/store")
_CACHE_ROOT = re.compile("^(?:" + "|".join(re.escape(root) for root in HOME_CACHE_ROOTS) + ")(?:/|$)")
# Go's build cache names each output by the SHA-256 of its content: one that no longer matches was
# written by something other than go (go touches the files' times, which is why they move).
_GO_BUILD = re.compile(r"^\.cache/go-build/[0-9a-f]{2}/([0-9a-f]{64})-d\Z")
_LISTED = 3
# Entries named by the hash of their content (npm's cacache, pnpm's store): one whose bytes still
# hash to its name is what the tool would fetch again, whatever rewrote it (npm rewrites the
# registry's metadata it caches at every install). One that does not was written by something else.
_CONTENT_ADDRESSED = (
    re.compile(r"^\.npm/_cacache/content-v2/(?P<algorithm>sha512|sha384|sha256|sha1)/(?P<a>[0-9a-f]{2})/"
               r"(?P<b>[0-9a-f]{2})/(?P<rest>[0-9a-f]{36,124})\Z"),
    re.compile(r"^\.local/share/pnpm/store/v\d+/files/(?P<a>[0-9a-f]{2})/(?P<rest>[0-9a-f]{126})(?:-exec)?\Z"),
)


def in_package_cache(path: str, kind: str) -> bool:
    """Inside a package cache: a cache mount, or a tool's cache directory in the session's home."""
    return kind == "cache" or (kind == "home" and _CACHE_ROOT.match(path) is not None)


def content_intact(path: str, view: View) -> bool | None:
    """Whether a content-addressed entry's bytes hash to its name; None when its name is no address."""
    for pattern in _CONTENT_ADDRESSED:
        match = pattern.match(path)
        if match:
            parts = match.groupdict()
            address = (parts["a"] + (parts.get("b") or "") + parts["rest"])
            data = view.data(path)
            return data is not None and hashlib.new(parts.get("algorithm") or "sha512", data).hexdigest() == address
    return None


def _tampered(change: Change, entry_existed: bool, inside: bool) -> bool:
    if change.before is None:  # new: a new entry, or a file added inside an entry that was there
        return inside and entry_existed and change.after is not None and change.after.kind != "dir"
    if change.what == "removed":
        return False
    if change.what in ("mode", "owner"):
        return change.after is not None and change.after.kind != "dir"
    return True


def _entry(path: str) -> tuple[str, bool, str] | None:
    for pattern, inside, what in _HOME:
        match = pattern.match(path)
        if match:
            return match.group(1), inside, what
    return None


def _go_build(change: Change) -> bool:
    match = _GO_BUILD.match(change.path)
    new = change.after
    return bool(match and change.before is not None and new is not None and new.sha256 is not None and
                new.sha256 != match.group(1))


def changes_value(changes: list[Change]) -> str:
    """What a finding about many changes is fingerprinted by: each path, what changed, its new hash."""
    return "\n".join(f"{c.path}:{c.what}:{c.after.sha256 if c.after else '-'}" for c in changes)


def _summary(paths: list[str], entry: str) -> str:
    names = [p[len(entry) + 1:] or p.rsplit("/", 1)[-1] for p in paths]
    return first_few(names, _LISTED)


def home_cache_findings(view: View) -> list[Finding]:
    """One finding per changed cache entry under the session's home, with the entry's path."""
    entries: dict[str, tuple[str, list[Change]]] = {}
    for change in view.changes:
        found = _entry(change.path)
        if found is not None:
            entry, inside, what = found
            if entry == change.path:  # the entry itself: a new one is what caches are for
                tampered = change.before is not None and _tampered(change, True, False)
            else:
                tampered = _tampered(change, entry in view.before, inside)
            if tampered and not content_intact(change.path, view):
                entries.setdefault(entry, (what, []))[1].append(change)
        elif _go_build(change):
            entries.setdefault(change.path, ("go links it into the next build", []))[1].append(change)
    out = []
    for entry, (what, changes) in sorted(entries.items()):
        paths = sorted({c.path for c in changes})
        value = changes_value(changes)
        out.append(finding("M01", "medium", entry, f"an existing cache entry changed ({_summary(paths, entry)}): "
                           f"{what} in this project's next sessions; delete it so the tool fetches it again",
                           value, remedy="reinstall"))
    return out


def cache_mount_findings(view: View) -> list[Finding]:
    """A cache mounted on its own (outside the home): changed existing entries, by top directory."""
    groups: dict[str, list[Change]] = {}
    for change in view.changes:
        if change.before is not None and change.what != "removed" and \
                not (change.before.kind == "dir" and change.what in ("mode", "owner")):
            groups.setdefault("/".join(change.path.split("/")[:2]), []).append(change)
    out = []
    for entry, changes in sorted(groups.items()):
        paths = sorted({c.path for c in changes})
        value = changes_value(changes)
        out.append(finding("M01", "medium", entry, f"existing cache entries changed ({_summary(paths, entry)}): "
                           "this project's next sessions use them; delete them so the tool fetches them again",
                           value, remedy="reinstall"))
    return out
