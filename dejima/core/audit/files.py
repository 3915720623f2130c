"""Filesystem rules (research §3.7): links out of the tree or into watched places, hard links,
privilege bits and capabilities, special files, permissions, sizes, invisible characters in code,
and content changed behind an unchanged mtime."""

from __future__ import annotations

import posixpath
import re
import stat

from dejima.core.audit.configs import rules_for
from dejima.core.audit.isolation import judged
from dejima.core.audit.model import Finding, View, finding, resolve
from dejima.core.audit.names import BIDI, invisible_in_text
from dejima.core.audit.treeroots import changed_in_tree, in_tree
from dejima.core.snapshot import Change, SnapshotEntry, mode_text

# Files whose text is code or config: invisible characters there hide logic from a reviewer (F09).
_CODE = re.compile(r"\.(py|pyi|js|mjs|cjs|ts|tsx|jsx|json|jsonc|toml|ya?ml|ini|cfg|conf|sh|bash|zsh|fish|ps1|"
                   r"rb|go|rs|java|kt|kts|scala|c|h|cc|cpp|hpp|cs|php|pl|lua|swift|sql|gradle|tf|nix|mk|"
                   r"env|envrc|properties|xml)\Z|(^|/)(Makefile|Dockerfile|Jenkinsfile|\.envrc)\Z")
_BIG_FILE = 1 << 30
_DEEP = 64


def watched_place(path: str, view: View) -> bool:
    """A place a host tool runs code from: a git directory or a catalogue path outside a tree."""
    return ".git" in path.split("/") or bool(rules_for(path, view.kind)) and not in_tree(path, view)


def _link(path: str, change: Change, view: View) -> list[Finding]:
    new = change.after
    assert new is not None and new.target is not None
    target = resolve(posixpath.dirname(path), new.target)
    value = new.target
    if target is None:
        return [finding("F01", "high", path, f"a link out of the tree, to {new.target}: host tools that follow it "
                        "read or write there", value, remedy="restore")]
    found = []
    if ".git" in target.split("/"):
        found.append(finding("G26", "high", path, f"a link into the git directory ({new.target}): writes through it "
                             "land in .git", value, remedy="restore"))
    if watched_place(target, view):
        found.append(finding("F01", "high", path, f"a link to {target}, a place tools run code from", value,
                             remedy="restore"))
    elif change.before is not None and change.before.kind == "dir":
        found.append(finding("F01", "high", path, f"a directory replaced by a link to {new.target}", value,
                             remedy="restore"))
    return found


def _hard_link(path: str, new: SnapshotEntry, view: View, in_a_tree: bool = False) -> list[Finding]:
    """``in_a_tree``: the path is in a dependency tree, an environment or a package cache, whose
    managers hard-link files among them (uv, pnpm): only a link with a watched place counts there."""
    others = [p for p in view.by_inode.get(new.inode, ()) if p != path]
    if in_a_tree and not others:
        return []  # its other names are outside the mount (uv's cache): no watched place among them
    if watched_place(path, view):
        return []  # reported from the other name, which names both
    watched = [p for p in others if watched_place(p, view)]
    if in_a_tree and not watched:
        return []
    outside = new.nlink - 1 - len(others)
    where = ", ".join(others) + (f" and {outside} name(s) outside the tree" if outside > 0 else "")
    if watched:
        return [finding("F02", "high", path, f"hard-linked with {where}: editing one edits the other, which is a "
                        "place tools run code from", new.sha256 or "", remedy="restore")]
    if outside <= 0 and not any(_had_inode(name, new.inode, view) for name in (path, *others)):
        # Every name of the file was made in this session (a build's copies): nothing that was
        # there before changes when one of them is edited.
        return [finding("F02", "low", path, f"hard-linked with {where}, all made in this session", new.sha256 or "",
                        remedy="restore")]
    return [finding("F02", "medium", path, f"hard-linked with {where}", new.sha256 or "", remedy="restore")]


def _had_inode(path: str, inode: int, view: View) -> bool:
    before = view.entry(path, "before")
    return before is not None and before.inode == inode


def _privilege(path: str, change: Change) -> list[Finding]:
    new, old = change.after, change.before
    assert new is not None
    found = []
    value = new.sha256 or new.kind
    # Files only: a setgid directory is how shared group directories work, and nothing runs it.
    newly = old is None or not old.privileged_bits or change.what in ("modified", "type")
    if new.kind == "file" and new.privileged_bits and newly:
        found.append(finding("F03", "critical", path, f"mode {mode_text(new.mode)}: setuid/setgid", value,
                             remedy="strip-bits"))
    if new.caps:
        found.append(finding("F03", "critical", path, "file capabilities (security.capability)", value,
                             remedy="strip-bits"))
    if new.kind in ("char", "block"):
        found.append(finding("F04", "critical", path, f"a {new.kind} device node", value, remedy="restore"))
    elif new.kind == "fifo" and change.what in ("added", "type"):
        found.append(finding("F04", "medium", path, "a FIFO: host tools that open it hang", value, remedy="restore"))
    elif new.kind == "socket" and change.what in ("added", "type"):
        found.append(finding("F04", "low", path, "a socket", value, remedy="restore"))
    return found


def _metadata(path: str, change: Change) -> list[Finding]:
    new, old = change.after, change.before
    assert new is not None
    value = f"{new.mode:o}:{new.uid}:{new.sha256}"
    if change.what == "mode" and old is not None and new.kind == "file" and new.mode & 0o111 and \
            not old.mode & 0o111:
        return [finding("F05", "low", path, f"made executable ({mode_text(old.mode)} -> {mode_text(new.mode)})", value,
                        remedy="restore")]
    if new.kind != "symlink" and new.mode & 0o002 and not new.mode & stat.S_ISVTX and \
            (old is None or not old.mode & 0o002):
        return [finding("F06", "medium", path, f"world-writable ({mode_text(new.mode)})", value, remedy="restore")]
    if change.what == "owner" and old is not None:
        return [finding("F06", "medium", path, f"owner changed {old.uid}:{old.gid} -> {new.uid}:{new.gid}", value,
                        remedy="restore")]
    return []


def _content(path: str, change: Change, view: View) -> list[Finding]:
    new, old = change.after, change.before
    assert new is not None
    found = []
    if new.size > _BIG_FILE and (old is None or old.size <= _BIG_FILE):
        found.append(finding("F07", "low", path, f"a file of {new.size >> 20} MiB", new.sha256 or "",
                             remedy="restore"))
    # Only hashed files are known to have new content (a chmod also moves ctime).
    if change.what == "modified" and old is not None and old.sha256 is not None and new.mtime_ns <= old.mtime_ns:
        found.append(finding("F10", "low", path, "content changed but the modification time did not move "
                             "forward (set back)", new.sha256 or "", remedy="restore"))
    if _CODE.search(path) and not (view.text(path) or "").isascii():  # ASCII holds no invisible character
        # A byte-order mark opening the file is an encoding marker, not a hidden character.
        lines = [line for line in view.new_lines(path) if BIDI.search(line) or invisible_in_text(
            line[1:] if line.startswith("\ufeff") and (view.text(path) or "").startswith(line) else line)]
        if lines:
            points = ", ".join(invisible_in_text("\n".join(lines)))
            found.append(finding("F09", "medium", path, f"invisible or bidi characters in code ({points})",
                                 "\n".join(lines), remedy="restore"))
    return found


def may_be_privileged(new: SnapshotEntry) -> bool:
    """Whether ``_privilege`` can find anything in an entry: what it reports needs one of these
    (a plain file, directory or link without setuid, setgid or capabilities holds none)."""
    return bool(new.caps) or new.kind not in _PLAIN_KINDS or new.kind == "file" and bool(new.privileged_bits)


_PLAIN_KINDS = ("file", "dir", "symlink")


def file_findings(view: View) -> list[Finding]:
    """Each rule on each changed entry judged on its own (isolation): one that fails is a finding there."""
    found: list[Finding] = []
    deep_reported = False
    known = changed_in_tree(view)  # a tree's paths are told once per directory
    for change in view.changes:
        path, new = change.path, change.after
        if new is None:
            continue
        if may_be_privileged(new):
            found.extend(judged(view, "F03/F04", path, _privilege, path, change))
        linked = change.before is None or change.before.nlink < new.nlink or change.what in ("added", "type")
        hard_linked = new.kind == "file" and new.nlink > 1 and linked and not path.startswith(".git/objects/")
        inside = known.get(path)
        if inside if inside is not None else in_tree(path, view):
            # Reported whole, to reinstall (trees.py, caches.py); a hard link with a watched place is still ours.
            if hard_linked:
                found.extend(judged(view, "F02", path, _hard_link, path, new, view, in_a_tree=True))
            continue
        found.extend(judged(view, "F05/F06", path, _metadata, path, change))
        if new.kind == "symlink" and change.what in ("added", "type", "link-target") and new.target is not None:
            found.extend(judged(view, "F01/G26", path, _link, path, change, view))
        if new.kind == "file" and change.what in ("added", "modified", "type"):
            found.extend(judged(view, "F07/F09/F10", path, _content, path, change, view))
        if hard_linked:
            found.extend(judged(view, "F02", path, _hard_link, path, new, view))
        if change.what == "added" and not deep_reported and path.count("/") >= _DEEP:
            deep_reported = True
            found.append(finding("F07", "low", path, f"nesting deeper than {_DEEP} directories", path))
    return found
