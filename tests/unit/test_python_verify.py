"""A Python environment held to what uv.lock pinned before the session (issue 32): a real `uv lock`
against a package index on loopback (this test's own, serving wheels built here, as PyPI would:
with the hashes uv records and the cache headers pip keeps bodies by), then a real `uv sync` or pip
install in the session, then each attack an agent makes in the environment, each beside its benign
neighbour (the same install untouched), audited through the same code as after a session (capture,
then audit_mount with the caches given). Each attack rewrites the RECORD to match, as an agent
that reads installs.py would: what a RECORD says proves nothing. Where a test says the host runs
the planted code, it runs the environment's python."""

from __future__ import annotations

import hashlib
import http.server
import marshal
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from dejima.adapters import fork_workers, pinned_archives, wheel_cache
from dejima.adapters.wheel_cache import WheelCaches
from dejima.core.audit import Finding, python_verify
from dejima.core.audit.python_verify import _unreferenced, bytecode_form
from dejima.orchestration.exit_audit import Mount, audit_mount, capture
from tests import venvs
from tests.pinned_trees import replace_file, severities
from tests.wheels import record_hash, wheel

UV = shutil.which("uv", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
pytestmark = pytest.mark.skipif(UV is None, reason="needs uv (the test extras install it)")

SITE = f"lib/python{sys.version_info.major}.{sys.version_info.minor}/site-packages"
TINY = {
    "tiny/__init__.py": b"VALUE = 1\n",
    "tiny/cli.py": b"def main():\n    print('tiny')\n",
    "tiny-1.0.dist-info/entry_points.txt": b"[console_scripts]\ntinytool = tiny.cli:main\n",
    "tiny-1.0.data/scripts/tinysh": b"#!python\nprint('sh')\n",
}
PLANTED = "import sys; sys.stdout.write('planted\\n')\n"


class _Index(http.server.BaseHTTPRequestHandler):
    """A simple index (PEP 503) of the wheels in ``directory``: each page links its wheels with
    their hashes, each wheel is sent as immutable (as PyPI's CDN sends them)."""

    directory: Path

    def do_GET(self) -> None:
        parts = self.path.strip("/").split("/")
        if parts[0] == "simple" and len(parts) == 2:
            links = "".join(f'<a href="/files/{w.name}#sha256={hashlib.sha256(w.read_bytes()).hexdigest()}">'
                            f"{w.name}</a>\n" for w in sorted(self.directory.glob(f"{parts[1]}-*.whl")))
            body, kind = f"<html><body>{links}</body></html>".encode(), "text/html"
        elif parts[0] == "files" and len(parts) == 2 and (self.directory / parts[1]).is_file():
            body, kind = (self.directory / parts[1]).read_bytes(), "application/octet-stream"
        else:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "max-age=365000000, immutable, public")
        self.end_headers()
        self.wfile.write(body)

    def do_HEAD(self) -> None:
        self.send_error(405)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The index's URL: tiny 1.0 (a package, a console script, a ``#!python`` script) and other 2.0."""
    directory = tmp_path_factory.mktemp("index")
    wheel(directory, "tiny", "1.0", TINY)
    wheel(directory, "other", "2.0", {"other.py": b"X = 2\n"})
    handler = type("Index", (_Index,), {"directory": directory})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/simple"
    server.shutdown()
    thread.join(timeout=10)
    server.server_close()


def uv(workspace: Path, cache: Path, *args: str, python: str = sys.executable) -> None:
    env = {**os.environ, "UV_CACHE_DIR": str(cache), "UV_PYTHON_DOWNLOADS": "never"}
    assert UV is not None
    subprocess.run([UV, *args, "--quiet", "--python", python], cwd=workspace, env=env, check=True,
                   capture_output=True, timeout=120)


def project(root: Path, index: str) -> tuple[Path, Path, Path]:
    """A workspace whose committed uv.lock pins tiny (locked on the host, with the host user's uv
    cache), a session home whose caches are empty; returns (workspace, home, the host's uv cache)."""
    workspace, home, host = root / "workspace", root / "home", root / "host-uv"
    workspace.mkdir(parents=True)
    home.mkdir()
    (workspace / "pyproject.toml").write_text(
        '[project]\nname = "proj"\nversion = "0.1.0"\nrequires-python = ">=3.11"\ndependencies = ["tiny"]\n'
        f'[tool.uv]\npackage = false\n[[tool.uv.index]]\nname = "here"\nurl = "{index}"\ndefault = true\n')
    uv(workspace, host, "sync")  # the host user's own install: the host's uv cache holds tiny's archive
    shutil.rmtree(workspace / ".venv")
    return workspace, home, host


def uv_sync(workspace: Path, home: Path) -> None:
    uv(workspace, home / ".cache/uv", "sync", "--frozen")


def pip_install(index: str, *what: str) -> Callable[[Path, Path], None]:
    """`python -m venv --without-pip .venv`, then pip (this Python's) into it, its cache in the home:
    tiny, or ``what``."""
    def install(workspace: Path, home: Path) -> None:
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(workspace / ".venv")], check=True)
        # --trusted-host: pip keeps no http cache for a plain-http index it does not trust.
        subprocess.run([sys.executable, "-m", "pip", "--python", str(workspace / ".venv/bin/python"), "install",
                        "-q", "--disable-pip-version-check", "--index-url", index, "--trusted-host", "127.0.0.1",
                        *(what or ["tiny"])], cwd=workspace, check=True, capture_output=True, timeout=120,
                       env={**os.environ, "PIP_CONFIG_FILE": os.devnull, "PIP_CACHE_DIR": str(home / ".cache/pip")})
    return install


def session(workspace: Path, home: Path, change: Callable[[Path], object] | None = None,
            install: Callable[[Path, Path], None] = uv_sync, host: Path | None = None,
            installed: bool = False) -> list[Finding]:
    """The session: the install, then ``change``; the environment's findings. ``host``: the host
    user's uv cache; ``installed``: the environment was there at the start already."""
    if installed:
        install(workspace, home)
    state = capture(Mount("workspace", workspace))
    if not installed:
        install(workspace, home)
    if change is not None:
        change(workspace)
    caches = WheelCaches(pip=(home / ".cache/pip",), uv=(host,) if host is not None else ())
    found, _ = audit_mount(state, npm_caches=[], wheel_caches=caches, venvs=venvs.here(UV))
    return [f for f in found if f.path.startswith(".venv")]


def site(workspace: Path) -> Path:
    return workspace / ".venv" / SITE


def recorded(workspace: Path, path: str, data: bytes | None) -> None:
    """tiny's RECORD made to agree with ``path`` (site-packages-relative) holding ``data``."""
    record = site(workspace) / "tiny-1.0.dist-info/RECORD"
    lines = [line for line in record.read_text().splitlines() if not line.startswith(f"{path},")]
    if data is not None:
        lines.append(f"{path},{record_hash(data)},{len(data)}")
    fresh = record.with_name("RECORD.new")
    fresh.write_text("\n".join(lines) + "\n")
    os.replace(fresh, record)


def runs_on_host(workspace: Path, *args: str) -> str:
    return subprocess.run([str(workspace / ".venv/bin/python"), *args], cwd=workspace, check=True,
                          capture_output=True, text=True, timeout=60).stdout


# --- the benign neighbours ---------------------------------------------------------------------------------

def test_a_clean_uv_sync_is_verified_file_by_file(tmp_path: Path, index: str) -> None:
    workspace, home, host = project(tmp_path, index)
    found = session(workspace, home, host=host)
    assert severities(found) == [(".venv", "low")], found[0].evidence
    assert "verified 7 file(s) of 1 distribution(s) against uv.lock as the session's start had it" in \
        found[0].evidence


def test_a_clean_pip_install_from_the_index_is_verified_with_its_bytecode(tmp_path: Path, index: str) -> None:
    """pip keeps the wheel's bytes in its http cache; the .pyc it compiles are compiled again here."""
    workspace, home, _ = project(tmp_path, index)
    found = session(workspace, home, install=pip_install(index))
    assert severities(found) == [(".venv", "low")], found[0].evidence
    assert "verified 9 file(s) of 1 distribution(s) against uv.lock" in found[0].evidence


def test_scripts_for_an_interpreter_path_with_a_space_are_verified(tmp_path: Path, index: str) -> None:
    """A path #! cannot hold: uv writes `#!/bin/sh` and an `exec` of the interpreter, for entry points
    and `#!python` scripts alike. (pip writes its `exec` form for entry points, but rewrites a
    `#!python` script to a #! with the space in it, which is never accepted: the kernel would run
    the path's first word.)"""
    workspace, home, host = project(tmp_path / "my project", index)
    found = session(workspace, home, host=host)
    assert (workspace / ".venv/bin/tinytool").read_text().startswith("#!/bin/sh\n" + "'" * 3 + "exec' ")
    # The scripts verify; the environment's own files name its path quoted, which the record cannot render.
    assert severities(found) == [(".venv", "medium")], found[0].evidence
    assert "verified 7 file(s) of 1 distribution(s)" in found[0].evidence
    assert found[0].evidence.count(" not verified: ") == 1 and "needs quoting in a shell" in found[0].evidence


def test_the_venv_s_own_pip_keeps_the_wheel_in_its_older_cache_and_writes_distlib_s_scripts(
        tmp_path: Path, index: str) -> None:
    """`python -m venv .venv && .venv/bin/pip install`: the pip ensurepip seeds (this Python's
    bundled one) keeps bodies inside msgpack (http/, as Debian's pip does) and writes distlib's
    script template. tiny is verified whole; pip and setuptools themselves, which no lockfile pins,
    are verified against the wheels ensurepip installed (the record's), the environment's own files
    against what this Python's venv writes."""
    workspace, home, host = project(tmp_path, index)

    def install(workspace: Path, home: Path) -> None:
        subprocess.run([sys.executable, "-m", "venv", str(workspace / ".venv")], check=True)
        subprocess.run([str(workspace / ".venv/bin/pip"), "install", "-q", "--disable-pip-version-check",
                        "--index-url", index, "--trusted-host", "127.0.0.1", "tiny"], cwd=workspace, check=True,
                       capture_output=True, timeout=120,
                       env={**os.environ, "PIP_CONFIG_FILE": os.devnull, "PIP_CACHE_DIR": str(home / ".cache/pip")})

    found = session(workspace, home, install=install, host=host)
    assert list((home / ".cache/pip").glob("http/*")), "this Python's bundled pip keeps the older cache"
    assert severities(found) == [(".venv", "low")], found[0].evidence
    assert "of 3 distribution(s) against uv.lock as the session's start had it (pip, setuptools against the wheels " \
        "ensurepip seeds in the session image)" in found[0].evidence  # found in use: all "against" the lockfile
    assert found[0].evidence.startswith(f"its own files (9) are what the session image's python3 -m venv (Python "
                                        f"{sys.version.split()[0]}) writes; ")
    assert "import re" in (workspace / ".venv/bin/tinytool").read_text()  # distlib's template


def test_a_wheel_the_project_holds_is_read_where_uv_lock_names_it(tmp_path: Path, index: str) -> None:
    """`[tool.uv.sources] tiny = { path = "tiny-1.0-py3-none-any.whl" }`: uv.lock pins the wheel in the
    workspace by its hash, so it verifies with no cache at all (offline); rewritten, it does not."""
    workspace, home, _ = project(tmp_path, index)
    wheel(workspace, "tiny", "1.0", TINY)
    with (workspace / "pyproject.toml").open("a") as file:
        file.write('[tool.uv.sources]\ntiny = { path = "tiny-1.0-py3-none-any.whl" }\n')
    uv(workspace, tmp_path / "lock-cache", "lock", "--offline")
    assert 'source = { path = "tiny-1.0-py3-none-any.whl" }' in (workspace / "uv.lock").read_text()
    found = session(workspace, home, install=lambda w, h: uv(w, h / ".cache/uv", "sync", "--frozen", "--offline"))
    assert severities(found) == [(".venv", "low")], found[0].evidence

    def rewritten(workspace: Path) -> None:  # the module and the project's wheel, to agree
        renamed_over(workspace)
        wheel(workspace, "tiny", "1.0", {**TINY, "tiny/__init__.py": b"VALUE = 1\n" + PLANTED.encode()})

    shutil.rmtree(workspace / ".venv")
    shutil.rmtree(pinned_archives.manifests_dir())  # no audit read the pinned wheel before (the next test: one did)
    again = session(workspace, home, rewritten, install=lambda w, h: uv(w, h / ".cache/uv", "sync", "--frozen",
                                                                        "--offline"))
    assert severities(again) == [(".venv", "medium")]
    assert "its wheel does not hash to the pinned hash" in again[0].evidence


def test_a_wheel_an_earlier_audit_read_is_kept_and_holds_the_environment_to_it_when_rewritten_or_gone(
        tmp_path: Path, index: str) -> None:
    """What an audit read of a pinned wheel is kept, by its pinned hash, in the host user's state (the
    session cannot write it): the next audit reads it instead of the host's uv cache, with the same
    verdict; and when the wheel is rewritten to agree with a module planted in the environment, or
    gone, the environment is still held to the pinned wheel's content (high, named), not unverified."""
    workspace, home, host = project(tmp_path, index)
    first = session(workspace, home, host=host)
    fork_workers.finish_behind()  # the manifests are kept by a process the audit does not wait for
    kept = list((pinned_archives.manifests_dir() / wheel_cache.KEPT).iterdir())
    assert len(kept) == 1
    shutil.rmtree(workspace / ".venv")
    assert session(workspace, home, host=host) == first  # from the kept manifest: what reading the cache said
    shutil.rmtree(workspace / ".venv")
    for archive in (host / "archive-v0").iterdir():  # the host's cache rewritten to agree, then no cache at all
        for module in archive.glob("tiny/__init__.py"):
            module.write_text("VALUE = 1\n" + PLANTED)
    again = session(workspace, home, renamed_over, host=host)
    assert severities(again) == [(".venv", "high")]
    assert f".venv/{SITE}/tiny/__init__.py: not the content of its wheel" in again[0].evidence
    shutil.rmtree(workspace / ".venv")
    gone = session(workspace, home, renamed_over)
    assert severities(gone) == [(".venv", "high")], gone[0].evidence
    kept[0].write_bytes(kept[0].read_bytes()[:-3])  # damaged: read again, here from no cache at all
    shutil.rmtree(workspace / ".venv")
    assert "its wheel is in no cache" in session(workspace, home, renamed_over)[0].evidence


def test_uv_s_own_cache_proves_nothing(tmp_path: Path, index: str) -> None:
    """The session's uv cache holds unpacked files and uv's record of their hash, both writable by the
    session: without the host's uv cache or the wheel's bytes, nothing is verified (medium)."""
    workspace, home, _ = project(tmp_path, index)
    found = session(workspace, home)
    assert severities(found) == [(".venv", "medium")]
    assert "its wheel is in no cache" in found[0].evidence and "rm -r .venv && uv sync --reinstall" in \
        found[0].evidence


def test_a_wheel_rewritten_in_the_session_s_pip_cache_verifies_nothing(tmp_path: Path, index: str) -> None:
    """The session rewrites a module and the wheel pip cached, to agree: the cached body no longer
    hashes to uv.lock's hash, so it is not the pinned wheel (unverified, never low)."""
    workspace, home, _ = project(tmp_path, index)

    def change(workspace: Path) -> None:
        renamed_over(workspace)
        tampered = wheel(tmp_path, "tiny", "1.0", {**TINY, "tiny/__init__.py": b"VALUE = 1\n" + PLANTED.encode()})
        for body in home.glob(".cache/pip/http-v2/**/*.body"):
            body.write_bytes(tampered.read_bytes())

    found = session(workspace, home, change, install=pip_install(index))
    assert severities(found) == [(".venv", "medium")]
    assert "its wheel does not hash to the pinned hash" in found[0].evidence


def test_no_lockfile_at_the_start_is_medium(tmp_path: Path, index: str) -> None:
    workspace, home, host = project(tmp_path, index)
    (workspace / "uv.lock").rename(tmp_path / "uv.lock")
    found = session(workspace, home, lambda w: shutil.copy(tmp_path / "uv.lock", w / "uv.lock"),
                    install=pip_install(index), host=host)
    assert severities(found) == [(".venv", "medium")]
    assert "no uv.lock or requirements file with --hash pins was there at the session's start" in \
        found[0].evidence


def test_requirements_with_hashes_pin_a_pip_install(tmp_path: Path, index: str) -> None:
    """`uv export` (or pip-compile --generate-hashes) at the start, no uv.lock: pip installs with
    --require-hashes; its wheels have no URL in the pins, and are found in pip's cache by their hash."""
    workspace, home, host = project(tmp_path, index)
    uv(workspace, host, "export", "--format", "requirements-txt", "--no-header", "-o", "requirements.txt")
    (workspace / "uv.lock").unlink()
    assert "--hash=sha256:" in (workspace / "requirements.txt").read_text()
    found = session(workspace, home, install=pip_install(index, "--require-hashes", "-r", "requirements.txt"))
    assert severities(found) == [(".venv", "low")], found[0].evidence
    assert "verified 9 file(s) of 1 distribution(s) against requirements.txt" in found[0].evidence
    fork_workers.finish_behind()  # the wheel's manifest is kept: pip's cache is not searched again
    shutil.rmtree(workspace / ".venv")
    again = session(workspace, home, install=pip_install(index, "--require-hashes", "-r", "requirements.txt"))
    assert [(f.severity, f.evidence) for f in again] == [(f.severity, f.evidence) for f in found]
    unpinned = session(*project(tmp_path / "again", index)[:2], install=pip_install(index, "tiny", "other"))
    assert severities(unpinned) == [(".venv", "high")]


def test_a_pip_install_target_is_held_to_the_requirements_beside_it(tmp_path: Path, index: str) -> None:
    """`pip install --target vendor --require-hashes -r requirements.txt`: the RECORDs make vendor/ a
    tree, the requirements beside it pin it; a module rewritten there with its RECORD is high."""
    workspace, home, host = project(tmp_path, index)
    uv(workspace, host, "export", "--format", "requirements-txt", "--no-header", "-o", "requirements.txt")
    (workspace / "uv.lock").unlink()

    def target(workspace: Path, home: Path) -> None:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--target",
                        str(workspace / "vendor"), "--index-url", index, "--trusted-host", "127.0.0.1",
                        "--require-hashes", "-r", "requirements.txt"], cwd=workspace, check=True,
                       capture_output=True, timeout=120,
                       env={**os.environ, "PIP_CONFIG_FILE": os.devnull, "PIP_CACHE_DIR": str(home / ".cache/pip")})

    def tampered(workspace: Path) -> None:
        module = workspace / "vendor/tiny/__init__.py"
        replace_file(module, "VALUE = 1\n" + PLANTED)
        record = workspace / "vendor/tiny-1.0.dist-info/RECORD"
        record.write_text("".join(f"tiny/__init__.py,{record_hash(module.read_bytes())},1\n"
                                  if line.startswith("tiny/__init__.py,") else line + "\n"
                                  for line in record.read_text().splitlines()))

    def vendored(found: list[Finding]) -> list[tuple[str, str]]:
        return [(f.path, f.severity) for f in found if f.path.startswith("vendor")]

    def audited(change: Callable[[Path], object] | None) -> list[Finding]:
        state = capture(Mount("workspace", workspace))
        target(workspace, home)
        if change is not None:
            change(workspace)
        found, _ = audit_mount(state, npm_caches=[], wheel_caches=WheelCaches(pip=(home / ".cache/pip",)))
        shutil.rmtree(workspace / "vendor")
        return found

    clean = audited(None)
    assert vendored(clean) == [("vendor", "low")], clean
    assert "against requirements.txt" in next(f for f in clean if f.path == "vendor").evidence
    assert vendored(audited(tampered)) == [("vendor", "high")]


# --- the attacks -------------------------------------------------------------------------------------------

def appended(workspace: Path) -> None:
    path = site(workspace) / "tiny/__init__.py"
    with path.open("a") as file:
        file.write(PLANTED)
    recorded(workspace, "tiny/__init__.py", path.read_bytes())


def renamed_over(workspace: Path) -> None:
    path = site(workspace) / "tiny/__init__.py"
    replace_file(path, "VALUE = 1\n" + PLANTED)
    recorded(workspace, "tiny/__init__.py", path.read_bytes())


def new_file(workspace: Path) -> None:
    (site(workspace) / "tiny/_extra.py").write_text(PLANTED)
    replace_file(site(workspace) / "tiny/__init__.py", "VALUE = 1\nfrom tiny import _extra\n")
    recorded(workspace, "tiny/_extra.py", (site(workspace) / "tiny/_extra.py").read_bytes())
    recorded(workspace, "tiny/__init__.py", (site(workspace) / "tiny/__init__.py").read_bytes())


def new_file_alone(workspace: Path) -> None:
    """A new module no one imports yet (the next `import tiny.helpers` does)."""
    (site(workspace) / "tiny/helpers.py").write_text(PLANTED)
    recorded(workspace, "tiny/helpers.py", (site(workspace) / "tiny/helpers.py").read_bytes())


def script_replaced(workspace: Path) -> None:
    script = workspace / ".venv/bin/tinytool"
    shebang = script.read_text().partition("\n")[0]
    replace_file(script, f"{shebang}\n{PLANTED}")
    recorded(workspace, "../../../bin/tinytool", script.read_bytes())


def path_pth(workspace: Path) -> None:
    """A .pth of a path line only (data, to installs.py), to a directory with a sitecustomize.py:
    Python imports it at every start."""
    (workspace / ".venv/lib/extra").mkdir()
    (workspace / ".venv/lib/extra/sitecustomize.py").write_text(PLANTED)
    (site(workspace) / "tiny.pth").write_text(f"{workspace / '.venv/lib/extra'}\n")
    recorded(workspace, "tiny.pth", (site(workspace) / "tiny.pth").read_bytes())
    recorded(workspace, "../../extra/sitecustomize.py", PLANTED.encode())


def interpreter_named(workspace: Path) -> None:
    """A script named like the interpreter's links, which no RECORD lists (installs.py took the name
    for the environment's own)."""
    script = workspace / ".venv/bin/python-helper"
    script.write_text(PLANTED)
    script.chmod(0o755)


def unpinned(index: str) -> Callable[[Path], None]:
    """A distribution the lockfile does not pin, installed by uv itself (its RECORD is uv's)."""
    def change(workspace: Path) -> None:
        uv(workspace, workspace.parent / "home/.cache/uv", "pip", "install", "--index-url", index, "other",
           python=str(workspace / ".venv/bin/python"))
    return change


ATTACKS: dict[str, tuple[Callable[[Path], None], tuple[str, ...]]] = {
    "a line appended": (appended, ("-c", "import tiny")),
    "a file renamed over": (renamed_over, ("-c", "import tiny")),
    "a new file imported by a rewritten one": (new_file, ("-c", "import tiny")),
    "a new file in a package": (new_file_alone, ("-c", "import tiny.helpers")),
    "an entry-point script replaced": (script_replaced, (".venv/bin/tinytool",)),
    "a .pth added with a sitecustomize": (path_pth, ("-c", "pass")),
    "a script named like the interpreter": (interpreter_named, (".venv/bin/python-helper",)),
}


@pytest.mark.parametrize("attack", ATTACKS.values(), ids=ATTACKS.keys())
def test_each_attack_on_a_new_environment_is_high_and_runs_on_the_host(
        tmp_path: Path, index: str, attack: tuple[Callable[[Path], None], tuple[str, ...]]) -> None:
    change, command = attack
    workspace, home, host = project(tmp_path, index)
    found = session(workspace, home, change, host=host)
    assert severities(found) == [(".venv", "high")], found
    assert "planted" in runs_on_host(workspace, *command)


@pytest.mark.parametrize("attack", ATTACKS.values(), ids=ATTACKS.keys())
def test_each_attack_on_an_environment_that_was_there_is_high(
        tmp_path: Path, index: str, attack: tuple[Callable[[Path], None], tuple[str, ...]]) -> None:
    change, _ = attack
    workspace, home, host = project(tmp_path, index)
    assert severities(session(workspace, home, change, host=host, installed=True)) == [(".venv", "high")]


def test_a_distribution_the_lockfile_does_not_pin_is_high(tmp_path: Path, index: str) -> None:
    workspace, home, host = project(tmp_path, index)
    found = session(workspace, home, unpinned(index), host=host)
    assert severities(found) == [(".venv", "high")]
    assert f"{SITE}/other-2.0.dist-info: a distribution uv.lock does not pin" in found[0].evidence
    assert runs_on_host(workspace, "-c", "import other; print(other.X)") == "2\n"


def planted_bytecode(pyc: Path, source: Path | None) -> None:
    """Bytecode of the planted code: for ``source`` (its header matches the source's mtime and size,
    so Python runs it instead), or sourceless (Python imports it as a module)."""
    import importlib._bootstrap_external as external
    code = compile("def main():\n    print('planted')\nmain()\n", str(source or pyc), "exec")
    mtime, size = (int(source.stat().st_mtime), source.stat().st_size) if source is not None else (0, 0)
    pyc.parent.mkdir(exist_ok=True)
    pyc.write_bytes(external._code_to_timestamp_pyc(code, mtime, size))  # type: ignore[attr-defined]


def cached(workspace: Path) -> None:
    source = site(workspace) / "tiny/cli.py"
    pyc = site(workspace) / f"tiny/__pycache__/cli.{sys.implementation.cache_tag}.pyc"
    if pyc.exists():
        replace_file(pyc, "")
    planted_bytecode(pyc, source)


@pytest.mark.parametrize("pip", [True, False], ids=["pip compiled it", "uv did not"])
def test_bytecode_beside_a_verified_source_that_is_not_its_compilation_is_never_verified(
        tmp_path: Path, index: str, pip: bool) -> None:
    """Python runs a __pycache__ .pyc while its header matches the source's mtime and size. This
    one does not recompile to the same bytes: unverified (medium), as bytecode another Python
    wrote would be, where it was low."""
    workspace, home, host = project(tmp_path, index)
    found = session(workspace, home, cached, install=pip_install(index) if pip else uv_sync, host=host)
    assert severities(found) == [(".venv", "medium")]
    assert "bytecode file(s) that do not recompile" in found[0].evidence
    assert runs_on_host(workspace, "-c", "import tiny.cli") == "planted\n"


def test_sourceless_bytecode_in_a_package_is_high(tmp_path: Path, index: str) -> None:
    workspace, home, host = project(tmp_path, index)
    found = session(workspace, home, lambda w: planted_bytecode(site(w) / "tiny/evil.pyc", None), host=host)
    assert severities(found) == [(".venv", "high")]
    assert "tiny/evil.pyc: bytecode no distribution installs" in found[0].evidence
    assert runs_on_host(workspace, "-c", "import tiny.evil") == "planted\n"


# --- the pins, read without a tool -------------------------------------------------------------------------

def test_uv_lock_s_forks_pin_each_version_and_requirements_read_continued_lines() -> None:
    from dejima.core.audit.python_verify import requirement_pins, uv_pins
    lock = ('version = 1\n[[package]]\nname = "Typing_Extensions"\nversion = "4.0"\nsource = { registry = "x" }\n'
            'wheels = [{ url = "https://h/t-4.0-py3-none-any.whl", hash = "sha256:' + "a" * 64 + '" }]\n'
            '[[package]]\nname = "typing-extensions"\nversion = "3.0"\nsource = { registry = "x" }\n'
            'wheels = [{ path = "t-3.0-py3-none-any.whl", hash = "sha256:' + "b" * 64 + '" }]\n'
            '[[package]]\nname = "proj"\nversion = "0.1"\nsource = { editable = "." }\n')
    pins = uv_pins(lock, "sub")
    assert pins is not None
    assert pins["typing-extensions==4.0"].wheels == (("a" * 64, "url:https://h/t-4.0-py3-none-any.whl"),)
    assert pins["typing-extensions==3.0"].wheels == (("b" * 64, "path:sub/x/t-3.0-py3-none-any.whl"),)
    assert pins["typing-extensions"].version == "4.0" and pins["proj"].local
    requirements = ("# comment\ntiny==1.0 \\\n    --hash=sha256:" + "C" * 64 + " \\\n    --hash=sha256:" + "d" * 64 +
                    "\n-r other.txt\nloose>=2\nother[extra]==2.0 ; python_version >= '3' --hash=sha256:" + "e" * 64)
    pinned = requirement_pins(requirements)
    assert pinned is not None
    assert pinned["tiny"].wheels == (("c" * 64, "name:tiny"), ("d" * 64, "name:tiny"))
    assert pinned["other"].version == "2.0" and "loose" not in pinned
    assert requirement_pins("tiny==1.0\n") is None  # no hash: no pin


def test_pip_s_cache_key_and_uv_s_record() -> None:
    from dejima.adapters.wheel_cache import _cache_key, _msgpack
    assert _cache_key("HTTPS://Files.Example/a/b.whl#sha256=x") == hashlib.sha224(
        b"https://files.example/a/b.whl").hexdigest()
    record = bytes.fromhex("95b0") + b"J1RmD1mBiU40Tiwp" + bytes.fromhex("9181a6") + b"Sha256" + \
        bytes.fromhex("d940") + b"2" * 64 + bytes.fromhex("b9") + b"tiny-1.0-py3-none-any.whl" + \
        bytes.fromhex("00cd064a")
    assert _msgpack(record, 0)[0] == ["J1RmD1mBiU40Tiwp", [{"Sha256": "2" * 64}], "tiny-1.0-py3-none-any.whl", 0,
                                      1610]
    with pytest.raises(ValueError):
        _msgpack(bytes.fromhex("dc ffff"), 0)  # an array longer than its bytes


# --- the environment's own files, held to the session image's record (venv_facts.py) -------------------------

def venv_then_pip(index: str) -> Callable[[Path, Path], None]:
    """`python3 -m venv .venv && .venv/bin/pip install --require-hashes -r requirements.txt`: the
    environment's own files and its seed pip and setuptools, then tiny pinned by its hash."""
    def install(workspace: Path, home: Path) -> None:
        subprocess.run([sys.executable, "-m", "venv", str(workspace / ".venv")], check=True)
        subprocess.run([str(workspace / ".venv/bin/pip"), "install", "-q", "--disable-pip-version-check",
                        "--index-url", index, "--trusted-host", "127.0.0.1", "--require-hashes", "-r",
                        "requirements.txt"], cwd=workspace, check=True, capture_output=True, timeout=120,
                       env={**os.environ, "PIP_CONFIG_FILE": os.devnull, "PIP_CACHE_DIR": str(home / ".cache/pip")})
    return install


def hashed_project(root: Path, index: str) -> tuple[Path, Path, Path]:
    workspace, home, host = project(root, index)
    uv(workspace, host, "export", "--format", "requirements-txt", "--no-header", "-o", "requirements.txt")
    (workspace / "uv.lock").unlink()
    return workspace, home, host


def activate_appended(workspace: Path) -> None:
    with (workspace / ".venv/bin/activate").open("a") as file:
        file.write("echo planted\n")


def home_changed(workspace: Path) -> None:
    """pyvenv.cfg's home names the directory whose python runs: one the session wrote."""
    (workspace / "bin").mkdir()
    os.symlink("/bin/sh", workspace / "bin/python3")
    config = workspace / ".venv/pyvenv.cfg"
    replace_file(config, re.sub(r"(?m)^home = .*$", f"home = {workspace / 'bin'}", config.read_text()))


def seed_modified(workspace: Path) -> None:
    pip = next(site(workspace).glob("pip/__init__.py"))
    replace_file(pip, pip.read_text() + PLANTED)
    record = next(site(workspace).glob("pip-*.dist-info/RECORD"))
    lines = [line for line in record.read_text().splitlines() if not line.startswith("pip/__init__.py,")]
    record.write_text("\n".join([*lines, f"pip/__init__.py,{record_hash(pip.read_bytes())},"
                                 f"{len(pip.read_bytes())}"]) + "\n")


def test_venv_then_pip_with_hashes_is_verified_own_files_seeds_and_all(tmp_path: Path, index: str) -> None:
    workspace, home, _ = hashed_project(tmp_path, index)
    found = session(workspace, home, install=venv_then_pip(index))
    assert severities(found) == [(".venv", "low")], found[0].evidence
    assert "are what the session image's python3 -m venv" in found[0].evidence
    assert "of 3 distribution(s) against requirements.txt" in found[0].evidence


OWN_ATTACKS = {
    "a line appended to bin/activate": (activate_appended, ".venv/bin/activate: not what python3 -m venv"),
    "pyvenv.cfg's home changed": (home_changed, ".venv/pyvenv.cfg: home = "),
    "a file of the seed pip modified": (seed_modified, "/site-packages/pip/__init__.py: not the content of its wheel"),
}


@pytest.mark.parametrize("attack", OWN_ATTACKS.values(), ids=OWN_ATTACKS.keys())
def test_each_change_to_a_venv_s_own_files_or_seeds_is_high_and_named(
        tmp_path: Path, index: str, attack: tuple[Callable[[Path], None], str]) -> None:
    change, named = attack
    workspace, home, _ = hashed_project(tmp_path, index)
    found = session(workspace, home, change, install=venv_then_pip(index))
    assert severities(found) == [(".venv", "high")], found[0].evidence
    assert named in found[0].evidence


def test_with_no_record_of_the_image_a_venv_s_own_files_are_medium_never_low(tmp_path: Path, index: str) -> None:
    """Fail closed: the same benign install audited without the session image's record."""
    workspace, home, _ = hashed_project(tmp_path, index)
    state = capture(Mount("workspace", workspace))
    venv_then_pip(index)(workspace, home)
    found = [f for f in audit_mount(state, npm_caches=[], wheel_caches=WheelCaches(pip=(home / ".cache/pip",)))[0]
             if f.path.startswith(".venv")]
    assert severities(found) == [(".venv", "medium")], found[0].evidence
    assert "own file(s) (.venv/bin/Activate.ps1, .venv/bin/activate, .venv/bin/activate.csh and" in \
        found[0].evidence and "record of what its python3 -m venv writes is missing" in found[0].evidence
    assert "setuptools as `python -m venv` installs it (ensurepip), which no lockfile pins" in found[0].evidence


def test_an_environment_made_by_a_tool_the_record_lacks_is_medium_saying_so(tmp_path: Path, index: str) -> None:
    """uv's environment audited against a record of venv alone: its own files are not verified."""
    workspace, home, host = project(tmp_path, index)
    state = capture(Mount("workspace", workspace))
    uv_sync(workspace, home)
    found = [f for f in audit_mount(state, npm_caches=[], wheel_caches=WheelCaches(uv=(host,)),
                                    venvs=venvs.here(None))[0] if f.path.startswith(".venv")]
    assert severities(found) == [(".venv", "medium")], found[0].evidence
    assert "made by uv, whose own files the session image's record does not hold" in found[0].evidence


def test_a_venv_no_lockfile_pins_is_low_with_its_own_files_and_seeds_verified(tmp_path: Path, index: str) -> None:
    """`python3 -m venv .venv` and nothing else: no lockfile, yet every file is the record's (the
    templates rendered, the seed wheels'); a line appended to its activate there is high all the same."""
    workspace, home, _ = project(tmp_path, index)
    (workspace / "uv.lock").unlink()

    def made(workspace: Path, home: Path) -> None:
        subprocess.run([sys.executable, "-m", "venv", str(workspace / ".venv")], check=True)

    found = session(workspace, home, install=made)
    assert severities(found) == [(".venv", "low")], found[0].evidence
    assert "of 2 distribution(s) against the wheels ensurepip seeds in the session image" in found[0].evidence
    assert "as the session's start had it" not in found[0].evidence  # no lockfile then: the seeds are the image's
    shutil.rmtree(workspace / ".venv")
    tampered = session(workspace, home, activate_appended, install=made)
    assert severities(tampered) == [(".venv", "high")] and ".venv/bin/activate: not what" in tampered[0].evidence
    assert "change(s) no install makes: " in tampered[0].evidence  # not "no install from the wheels ... seeds"
    assert "planted" in subprocess.run(["sh", "-c", ". .venv/bin/activate"], cwd=workspace, capture_output=True,
                                       text=True, check=True).stdout  # what the user's `source` runs


def host_python_is_another_release(monkeypatch: pytest.MonkeyPatch) -> None:
    """As on a host whose Python is not the session image's release (3.11 here, 3.13 in the image):
    no bytecode compiles again to the same bytes, so only the image's record can verify a seed's."""
    monkeypatch.setattr(python_verify, "recompiles", lambda data, source, inside: False)


def venv_alone(tmp_path: Path, index: str) -> tuple[Path, Path, Callable[[Path, Path], None]]:
    workspace, home, _ = project(tmp_path, index)
    (workspace / "uv.lock").unlink()

    def made(workspace: Path, home: Path) -> None:
        subprocess.run([sys.executable, "-m", "venv", str(workspace / ".venv")], check=True)
    return workspace, home, made


def test_a_seed_s_bytecode_is_verified_against_the_record_not_compiled_again_here(
        tmp_path: Path, index: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """ensurepip compiles its seeds (no PIP_ variable reaches it); the record keeps what the image's
    Python wrote, by path below site-packages, as what neither the environment's path (another
    here) nor the writing process decides: every .pyc verified without compiling anything again."""
    host_python_is_another_release(monkeypatch)
    workspace, home, made = venv_alone(tmp_path, index)
    found = session(workspace, home, install=made)
    assert severities(found) == [(".venv", "low")], found[0].evidence
    verified = re.search(r"verified (\d+) file\(s\) of 2 distribution\(s\) against the wheels ensurepip",
                         found[0].evidence)
    bytecode, sources = (len(list(site(workspace).rglob(f"*.{kind}"))) for kind in ("pyc", "py"))
    assert verified and bytecode > 100 and int(verified.group(1)) >= bytecode + sources, found[0].evidence


def test_a_seed_s_bytecode_replaced_by_another_compilation_is_high_named_and_runs_on_the_host(
        tmp_path: Path, index: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The seed pip's __init__ bytecode compiled from another source, behind the original header (its
    mtime and size match the source, so Python runs it): not the record's, high, named."""
    host_python_is_another_release(monkeypatch)
    workspace, home, made = venv_alone(tmp_path, index)

    def compiled_otherwise(workspace: Path) -> None:
        source = site(workspace) / "pip/__init__.py"
        pyc = site(workspace) / f"pip/__pycache__/__init__.{sys.implementation.cache_tag}.pyc"
        header = pyc.read_bytes()[:16]
        code = compile(source.read_text() + PLANTED, str(source), "exec")
        replace_file(pyc, "")
        pyc.write_bytes(header + marshal.dumps(code))

    found = session(workspace, home, compiled_otherwise, install=made)
    assert severities(found) == [(".venv", "high")], found[0].evidence
    assert f"{SITE}/pip/__pycache__/__init__.{sys.implementation.cache_tag}.pyc: not the bytecode the session " \
        "image's Python compiled" in found[0].evidence
    assert runs_on_host(workspace, "-c", "import pip") == "planted\n"


def test_copies_of_the_interpreter_are_medium_and_a_file_no_tool_writes_beside_them_high(
        tmp_path: Path, index: str) -> None:
    """`python -m venv --copies`: the interpreter copied where venv makes a link, which the record does
    not hold (medium, saying so); a `bin/activate.nu` in venv's environment is uv's, not venv's (high)."""
    workspace, home, _ = project(tmp_path, index)
    (workspace / "uv.lock").unlink()

    def made(workspace: Path, home: Path) -> None:
        subprocess.run([sys.executable, "-m", "venv", "--copies", "--without-pip", str(workspace / ".venv")],
                       check=True)

    found = session(workspace, home, install=made)
    assert severities(found) == [(".venv", "medium")], found[0].evidence
    assert "a copy of the interpreter (python -m venv --copies)" in found[0].evidence
    shutil.rmtree(workspace / ".venv")
    planted = session(workspace, home, lambda w: (w / ".venv/bin/activate.nu").write_text(PLANTED), install=made)
    assert severities(planted) == [(".venv", "high")] and ".venv/bin/activate.nu: a file no distribution" in \
        planted[0].evidence


def test_marshal_s_reference_flags_interning_and_set_order_are_the_writing_process_s_not_the_code_s() -> None:
    """What marshal writes for one code object depends on the writing process: an object something
    else there refers to is flagged for reference (numbering later references differently), a string
    may be interned, and a set's elements are ordered by those bytes. Compared without them (each
    reference by the place of what it names), the same code is the same; other values or another
    sharing of one object are not. (Seen: setuptools' expand.pyc, as ensurepip wrote it, did not
    recompile to the same bytes in a test process that held other references.)"""
    def short(text: bytes, flag: int = 0, interned: bool = False) -> bytes:
        return bytes([(ord("Z") if interned else ord("z")) | flag, len(text)]) + text

    def sequence(kind: bytes, *items: bytes) -> bytes:
        return kind + len(items).to_bytes(4, "little") + b"".join(items)

    def ref(index: int) -> bytes:
        return b"r" + index.to_bytes(4, "little")

    flag = 0x80
    assert _unreferenced(sequence(b"<", short(b"a"), short(b"b"))) == \
        _unreferenced(sequence(b"<", short(b"b"), short(b"a", flag, interned=True)))
    # one more object flagged before the referred one: its reference numbered one higher
    assert _unreferenced(sequence(b"(", short(b"q", flag), short(b"a", flag), ref(1))) == \
        _unreferenced(sequence(b"(", short(b"q"), short(b"a", flag), ref(0)))
    assert _unreferenced(sequence(b"(", short(b"q"), short(b"a", flag), ref(0))) != \
        _unreferenced(sequence(b"(", short(b"q"), short(b"a"), short(b"a")))  # shared, or two objects
    assert _unreferenced(sequence(b"<", short(b"a"), short(b"b"))) != _unreferenced(sequence(b"<", short(b"a"),
                                                                                            short(b"c")))
    assert _unreferenced(sequence(b"(", ref(0))) is None and _unreferenced(b"(\x05\x00\x00\x00") is None


def test_a_pyc_s_recorded_form_leaves_out_where_it_was_and_when_but_not_what_python_runs(tmp_path: Path) -> None:
    """One source compiled in two environments at other paths, at other times: one form; the same
    code behind an unchecked-hash header (Python runs it without looking at the source), other code,
    another release's magic, a cut stream: not that form, or none (nothing proven)."""
    import importlib._bootstrap_external as external
    text = "import os\nX = {'a', 'b'}\ndef f():\n    return os.sep + 'x'\nclass C:\n    def g(self):\n" \
        "        return f\n"
    made = []
    for place, mtime in (("a/lib/python3/site-packages", 1), ("other/.venv/lib/python3/site-packages", 7)):
        source = tmp_path / place / "pkg/mod.py"
        code = compile(text, str(source), "exec")
        made.append(external._code_to_timestamp_pyc(code, mtime, len(text)))  # type: ignore[attr-defined]
    pyc = "pkg/__pycache__/mod.cpython-311.pyc"
    first, second = (bytecode_form(data, pyc) for data in made)
    assert first is not None and first == second and made[0][16:] != made[1][16:]  # the path differs inside
    unchecked = made[0][:4] + (1).to_bytes(4, "little") + made[0][8:]
    other = compile(text.replace("'x'", "'y'"), str(tmp_path / "a/lib/python3/site-packages/pkg/mod.py"), "exec")
    assert bytecode_form(unchecked, pyc) not in (first, None)
    assert bytecode_form(made[0][:16] + marshal.dumps(other), pyc) not in (first, None)
    assert bytecode_form(made[0], "pkg/__pycache__/other.cpython-311.pyc") != first  # its path names another source
    assert bytecode_form(b"\x00\x00\r\n" + made[0][4:], pyc) is None
    assert bytecode_form(made[0][:-3], pyc) is None


def test_venv_made_again_on_an_environment_that_was_there_is_as_venv_makes_it_not_start_up_code_changed(
        tmp_path: Path, index: str) -> None:
    """`python3 -m venv .venv` run again (a second session's first step) rewrites activate and
    pyvenv.cfg with what venv writes: low, no start-up file changed; the same rewrite then a line
    appended to activate is critical still (it runs at the environment's every start)."""
    workspace, home, _ = project(tmp_path, index)
    (workspace / "uv.lock").unlink()

    def made(workspace: Path, home: Path) -> None:
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(workspace / ".venv")], check=True)

    def again(workspace: Path) -> None:
        made(workspace, home)

    found = session(workspace, home, again, install=made, installed=True)
    assert [f.severity for f in found] in ([], ["low"]), [(f.path, f.severity, f.evidence) for f in found]

    def again_and_appended(workspace: Path) -> None:
        again(workspace)
        activate_appended(workspace)

    shutil.rmtree(workspace / ".venv")
    tampered = session(workspace, home, again_and_appended, install=made, installed=True)
    assert (".venv/bin/activate", "critical") in severities(tampered), tampered


def test_the_starts_uv_lock_is_parsed_while_the_session_runs_and_each_caller_gets_its_own_pins(
        tmp_path: Path) -> None:
    # exit_audit.start's rules thread parses the start's uv.lock: the end audit, in its forked
    # stages too, finds it parsed. What a caller does to the pins it got leaves the next caller's whole.
    from dejima.orchestration import exit_audit
    lock = ('version = 1\n[[package]]\nname = "six"\nversion = "1.16.0"\n'
            'source = { registry = "https://pypi.org/simple" }\n'
            'wheels = [{ url = "https://files.example/six.whl", hash = "sha256:' + "a" * 64 + '" }]\n')
    (tmp_path / "uv.lock").write_text(lock)
    python_verify._PARSED.clear()
    states = exit_audit.start("parsed-ahead", [Mount("workspace", tmp_path)])
    for state in states:
        state.join()
    assert "uv.lock" in states[0].kept
    python_verify._PARSED.clear()
    exit_audit._import_rules(states)  # what the start's thread runs
    assert list(python_verify._PARSED) == [(lock, "")]
    pins = python_verify.uv_pins(lock, "")
    assert pins is not None and pins["six"].version == "1.16.0"
    pins.clear()
    assert python_verify.uv_pins(lock, "") == python_verify._uv_pins(lock, "") != {}
    assert python_verify.uv_pins("not toml [", "") is None and python_verify.uv_pins(None, "") is None
