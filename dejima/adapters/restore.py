"""Puts a flagged path back the way it was when the session started (`dejima-audit restore`).

Every step goes through directory file descriptors opened with O_NOFOLLOW: a link planted in the
path can never redirect the write (or the removal) outside the mount. A path that changed again
since the audit is left alone unless forced: the user may have edited it since.

What is put back keeps its owner, group and mode: restoring as root must not leave a root-owned
`.git/config` in a user's repository (the next session would report the owner change). The owner is
the one at the start; for a finding recorded before dejima kept it, the path's present owner (a
session cannot give a file away), else its directory's.
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from dejima.adapters.findings import Stored
from dejima.adapters.nofollow_open import open_directory
from dejima.adapters.tree_walk import KINDS
from dejima.core.audit import cargo_verify, npm_verify, python_verify, yarn_verify
from dejima.core.snapshot import mode_text
from dejima.errors import DiagnosticError


class RestoreError(DiagnosticError):
    reference = "cannot-restore"


@contextmanager
def _parent(root: Path, path: str) -> Iterator[int]:
    """A descriptor of the path's directory, reached without following any link."""
    try:
        fd = open_directory(root, path.split("/")[:-1])
    except OSError as exc:
        raise RestoreError(f"cannot reach {path}: {exc.filename!r} is not a plain directory ({exc.strerror})",
                           hint="look at the path yourself; restore never follows links") from exc
    try:
        yield fd
    finally:
        os.close(fd)


UidGid = tuple[int, int]


def _current(fd: int, name: str) -> tuple[str | None, str | None, int, UidGid]:
    """(kind, sha256 of a regular file, mode, owner) of a name in a directory; kind None when absent
    (the owner is then the directory's)."""
    try:
        info = os.stat(name, dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        directory = os.fstat(fd)
        return None, None, 0, (directory.st_uid, directory.st_gid)
    owner = (info.st_uid, info.st_gid)
    kind = KINDS.get(stat.S_IFMT(info.st_mode))
    if kind != "file":
        return kind, None, info.st_mode, owner
    file = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=fd)
    digest = hashlib.sha256()
    try:
        while chunk := os.read(file, 1 << 20):
            digest.update(chunk)
    finally:
        os.close(file)
    return kind, digest.hexdigest(), info.st_mode, owner


def _remove(fd: int, name: str, kind: str | None) -> None:
    if kind == "dir":
        shutil.rmtree(name, dir_fd=fd)
    elif kind is not None:
        os.unlink(name, dir_fd=fd)


def _owned(change: Callable[[int, int], None], owner: UidGid) -> str:
    """Give a new file ``owner`` (chown clears setuid bits: call it before the mode is set); "" when
    done, else what was left (an ordinary user cannot give a file to another)."""
    try:
        change(*owner)
    except PermissionError:
        return f"; it is yours now, not uid {owner[0]}'s: chown {owner[0]}:{owner[1]} it as root"
    return ""


def _write(fd: int, name: str, data: bytes, mode: int, owner: UidGid) -> str:
    temporary = f".{name}.dejima-restore"
    out = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=fd)
    try:
        os.write(out, data)
        left = _owned(lambda uid, gid: os.fchown(out, uid, gid), owner) if owner != _mine(out) else ""
        os.fchmod(out, stat.S_IMODE(mode))
        os.fsync(out)
    except BaseException:
        os.close(out)
        os.unlink(temporary, dir_fd=fd)
        raise
    os.close(out)
    try:
        os.rename(temporary, name, src_dir_fd=fd, dst_dir_fd=fd)
    except OSError:
        os.unlink(temporary, dir_fd=fd)
        raise
    return left


def _mine(file: int) -> UidGid:
    info = os.fstat(file)
    return info.st_uid, info.st_gid


def _strip_bits(fd: int, name: str, mode: int) -> None:
    file = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=fd)
    try:
        os.fchmod(file, stat.S_IMODE(mode) & ~(stat.S_ISUID | stat.S_ISGID))
        try:
            os.removexattr(file, "security.capability")
        except OSError as exc:
            if exc.errno not in (errno.ENODATA, errno.ENOTSUP):
                raise
    finally:
        os.close(file)


def _remove_tree(stored: Stored, force: bool) -> str:
    """A dependency tree, environment or build output the session created, removed whole (through
    descriptors: a link inside it is removed, never followed)."""
    path = stored.finding.path
    with _parent(Path(stored.root), path) as fd:
        kind, sha256, _, _ = _current(fd, path.rsplit("/", 1)[-1])
        _check_unchanged(stored, kind, sha256, force)
        _remove(fd, path.rsplit("/", 1)[-1], kind)
    command = clean_reinstall_command(stored)
    again = f"`{command}` in {Path(stored.root, path).parent} installs it again from the lockfile" if command else \
        "install it again on the host if the project needs it"
    return f"removed {path}, which the session created ({again})"


def clean_reinstall_command(stored: Stored) -> str | None:
    """The clean reinstall command of the tool whose tree a finding is about, if known."""
    finding = stored.finding
    return yarn_verify.reinstaller(finding.path, finding.evidence) or npm_verify.reinstaller(finding.path) or \
        cargo_verify.reinstaller(finding.path, finding.evidence) or \
        python_verify.reinstaller(finding.path, finding.evidence)


def _check_unchanged(stored: Stored, kind: str | None, sha256: str | None, force: bool) -> None:
    state = stored.state
    assert state is not None
    same = kind == state.after_kind and (kind != "file" or sha256 == state.after_sha256)
    if not same and not force:
        raise RestoreError(f"{stored.finding.path} changed since the audit of session {stored.session}",
                           hint="review it again; --force restores it anyway (your later edits are lost)")


def restore(stored: Stored, force: bool = False) -> str:
    """Restore one finding's path; returns what was done, in words."""
    finding, state = stored.finding, stored.state
    if finding.remedy == "reinstall" and state is not None and finding.path and state.before_kind is None:
        return _remove_tree(stored, force)  # a tree the session made: the start had none
    if state is None or not finding.path or finding.remedy == "reinstall":
        where = f"{stored.root}/{finding.path}".rstrip("/")
        command = clean_reinstall_command(stored)
        then = f"`{command}` in {where.rpartition('/')[0]}" if command else "your installer"
        raise RestoreError(f"finding {stored.id} is about a whole tree ({where})",
                           hint=f"delete it and reinstall on the host (e.g. rm -r {where}, then {then})")
    if finding.remedy == "review":
        raise RestoreError(f"finding {stored.id} has nothing to put back (rule {finding.rule})",
                           hint="review it, then `dejima-audit ack`")
    name = finding.path.rsplit("/", 1)[-1]
    with _parent(Path(stored.root), finding.path) as fd:
        kind, sha256, mode, present = _current(fd, name)
        _check_unchanged(stored, kind, sha256, force)
        owner = (state.before_uid, state.before_gid) if state.before_uid is not None and \
            state.before_gid is not None else present
        if finding.remedy == "strip-bits":
            if kind != "file":
                raise RestoreError(f"{finding.path} is not a regular file any more", hint="review it by hand")
            _strip_bits(fd, name, mode)
            return f"removed the setuid/setgid bits and capabilities of {finding.path}"
        if state.before_kind is None:
            _remove(fd, name, kind)
            return f"removed {finding.path} ({kind}), which the session created"
        if state.before_kind == "symlink" and state.before is not None:
            _remove(fd, name, kind)
            os.symlink(os.fsdecode(state.before), name, dir_fd=fd)
            left = _owned(lambda uid, gid: os.chown(name, uid, gid, dir_fd=fd, follow_symlinks=False), owner) \
                if owner != (os.geteuid(), os.getegid()) else ""
            return f"put back the link {finding.path} -> {os.fsdecode(state.before)}{left}"
        if state.before_kind == "file" and state.before is not None and state.before_mode is not None:
            if kind == "dir":
                raise RestoreError(f"{finding.path} is now a directory", hint="move it away, then restore again")
            left = _write(fd, name, state.before, state.before_mode, owner)
            return f"put back {finding.path} as it was at the start ({len(state.before)} bytes, mode " \
                   f"{mode_text(state.before_mode)}, owner {owner[0]}:{owner[1]}){left}"
    raise RestoreError(f"the start state of {finding.path} (a {state.before_kind}) was not kept",
                       hint="dejima keeps the content of watched files only; restore it from git or a backup")
