"""Real installs in real sessions, each run twice on the same project (warm caches in the session
home the second time), as an agent installs dependencies first thing and again every day: npm
against the npm registry (72 packages), uv sync against PyPI (15 packages), pip into a workspace
.venv from hashed requirements (the same 14), cargo offline. Each
session exits 0 (the second one starts: nothing critical was left), and each leaves at most one
finding per tree, none above low: npm's tree verified against package-lock.json, the workspace
.venv against requirements.txt's hashes and the session image's venv, uv's environment and
cargo's build output in the session's home (the python and rust workflows put them there).

One exception, measured rather than assumed: pip keeps a wheel in its http cache only when the
registry's answer may be cached (real PyPI's may). Where the session's pip kept none, nothing on
the host holds the pinned wheels, so the .venv is medium, and the only thing it may say it could
not verify is that.

The registries resolve, on these machines, into a reserved range the resolver refuses by default:
the settings allow the range the host resolves them to ([network] answer_networks), as a person
installing real packages here would.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from dejima.adapters.runtime import Runtime
from tests.integration.conftest import Images
from tests.integration.test_upstream_proxy import tinyproxy
from tests.world import User, run_dejima

DATA = Path(__file__).resolve().parents[1] / "data" / "installs"
RUNS = {
    "npm": ("registry.npmjs.org", "npm install --no-audit --no-fund --loglevel=error && "
                                  "node -e \"require('express'); console.log('installed')\""),
    "pip": ("pypi.org", "python3 -m venv .venv && "
                        ".venv/bin/pip install --quiet --require-hashes -r requirements.txt && "
                        ".venv/bin/python -c \"import requests, rich; print('installed')\""),
    "uv": ("pypi.org", "uv sync --quiet && uv run python -c \"import requests, rich; print('installed')\""),
    "cargo": (None, "cargo build --offline --quiet && \"$CARGO_TARGET_DIR/debug/offline\" && echo installed"),
}
SEVERITIES = ("info", "low", "medium", "high", "critical")


def settings_for(world_dir: Path, host: str | None) -> Path:
    """Settings that let the registry's answers through when the host resolves it into a range
    the resolver refuses by default."""
    lines = ["[network]"]
    if host is not None:
        address = ipaddress.ip_address(socket.gethostbyname(host))
        if not address.is_global:
            lines.append(f'answer_networks = ["{ipaddress.ip_network(f"{address}/24", strict=False)}"]')
    path = world_dir / f"installs-{host or 'offline'}.toml"
    path.write_text("\n".join(lines) + "\n")
    path.chmod(0o644)
    return path


def pip_kept_wheels(user: User, workspace: Path) -> bool:
    """Whether the session's pip kept any answer in its http cache (the per-project home's)."""
    homes = (user.home / ".local/share/dejima/homes").glob(f"{workspace.name}-*/.cache/pip/http-v2")
    return any(path.is_file() for home in homes for path in home.rglob("*"))


def findings(user: User, scope: str, workspace: Path) -> list[dict[str, object]]:
    result = subprocess.run([user.python, "-c", "import sys; from dejima.cli.audit import main; sys.exit(main())",
                             "list", "--all", "--json", "--workspace", str(workspace)],
                            env=user.env(scope), capture_output=True, text=True, timeout=60, cwd=str(workspace),
                            stdin=subprocess.DEVNULL, **user.popen_kwargs())
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines() if line.strip()]


@pytest.mark.parametrize("project", sorted(RUNS))
def test_a_real_install_twice_leaves_one_quiet_finding_per_tree(user: User, scope: str, workspace: Path,
                                                               world_dir: Path, project: str) -> None:
    host, command = RUNS[project]
    for item in (DATA / project).iterdir():
        (shutil.copytree if item.is_dir() else shutil.copy)(item, workspace / item.name)
    if os.getuid() == 0:
        subprocess.run(["chown", "-R", f"{user.uid}:{user.gid}", str(workspace)], check=True)
    settings = settings_for(world_dir, host)
    seen: list[dict[str, object]] = []
    for run in (1, 2):
        result = run_dejima(user, scope, "-q", str(workspace), "--", "sh", "-c", command, timeout=900,
                            DEJIMA_SETTINGS=str(settings))
        assert result.returncode == 0 and "installed" in result.stdout, (run, result.stdout[-2000:],
                                                                         result.stderr[-3000:])
        left = [f for f in findings(user, scope, workspace) if f not in seen]
        seen += left
        shown = [(f["rule"], f["severity"], f["mount"], f["path"]) for f in left]
        loud = [f for f in left if SEVERITIES.index(str(f["severity"])) > SEVERITIES.index("low")]
        if project == "pip" and loud and not pip_kept_wheels(user, workspace):
            [venv] = loud  # the registry let pip keep no wheel: that may be all it could not verify
            reasons = set(re.findall(r"file\(s\) not verifiable: ([^;(]+)", str(venv["evidence"])))
            assert (venv["path"], venv["severity"]) == (".venv", "medium") and \
                reasons == {"its wheel is in no cache "}, (run, reasons, str(venv["evidence"])[-3000:])
            loud = []
        assert not loud, (run, shown)
        trees = [(f["mount"], f["path"]) for f in left]
        assert len(trees) == len(set(trees)) and len(left) <= 2, (run, shown)  # a tree in each of two mounts, at most
        if project == "cargo":
            assert not (workspace / "target").exists(), run  # built in the session's home


CORPORATE_PROXY_CONF = """Port 8888
Listen 0.0.0.0
Timeout 120
LogLevel Info
MaxClients 20
Allow 0.0.0.0/0
ConnectPort 443
"""


@pytest.fixture
def corporate_proxy(runtime: Runtime, images: Images, world_dir: Path) -> Iterator[str]:
    """tinyproxy on the engine's default network, from where it reaches the registries: the address a
    session is told to go through."""
    with tinyproxy(runtime, images.session_root, "bridge", world_dir / "corporate-proxy.conf", CORPORATE_PROXY_CONF,
                   "corporate-proxy") as container:
        yield container


def test_a_real_install_behind_a_corporate_proxy_goes_through_it_by_name(
        runtime: Runtime, user: User, scope: str, workspace: Path, world_dir: Path, corporate_proxy: str) -> None:
    """npm install in a session whose only way out is the corporate proxy: the filter relays each allowed
    connection as CONNECT name:443 (the proxy's log names the registry, never an address), and no allowed
    destination is reached directly (the ruleset accepts none with a proxy: tests/unit/core/test_upstream_proxy)."""
    host, command = RUNS["npm"]
    for item in (DATA / "npm").iterdir():
        (shutil.copytree if item.is_dir() else shutil.copy)(item, workspace / item.name)
    if os.getuid() == 0:
        subprocess.run(["chown", "-R", f"{user.uid}:{user.gid}", str(workspace)], check=True)
    address = runtime.address(corporate_proxy, "bridge")
    settings = settings_for(world_dir, host)
    settings.write_text(settings.read_text().replace(
        "[network]\n", f'[network]\nupstream_proxy = "http://{address}:8888"\n', 1))
    result = run_dejima(user, scope, str(workspace), "--", "sh", "-c", command, timeout=900,
                        DEJIMA_SETTINGS=str(settings))
    assert result.returncode == 0 and "installed" in result.stdout, (result.stdout[-2000:], result.stderr[-3000:])
    assert f"via proxy http://{address}:8888" in result.stderr
    log = runtime.logs(corporate_proxy)
    assert "CONNECT registry.npmjs.org:443" in log, log[-3000:]
