"""A session behind an upstream (corporate) proxy, with real containers: tinyproxy (the host's Debian binary,
run in a container the test makes on the test world's network, its names resolved by the world's DNS)
is the only way out. An allowed name is reached through it as CONNECT name:port (its log shows the name,
never the address); a name the policy refuses never reaches it; the session cannot talk to the proxy
itself; and the direct path is closed: a port the proxy refuses to CONNECT to stays closed, though the
decoy answers it directly (tests/integration/test_egress.py)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from dejima.adapters.runtime import Runtime
from dejima.core import labels
from dejima.core.plan import Bind, ContainerSpec
from dejima.orchestration.selftest import ECHO_PORT
from tests.conftest import TEST_SCOPE
from tests.integration.conftest import Images
from tests.integration.test_egress import resolve, tcp
from tests.integration.test_grants import RETRY_THEN_HOLD, allow
from tests.networld import World
from tests.world import User, run_dejima, spawn_dejima, wait_for_line

PROXY_PORT = 8888
# CONNECT only to the decoy's 8080 and its echo port: its 8443, which answers a direct connection, must stay
# closed.
TINYPROXY_CONF = f"""Port {PROXY_PORT}
Listen 0.0.0.0
Timeout 60
LogLevel Info
MaxClients 20
Allow 0.0.0.0/0
ConnectPort 8080
ConnectPort {ECHO_PORT}
"""


@dataclass(frozen=True)
class Proxy:
    container: str
    address: str


@contextmanager
def tinyproxy(runtime: Runtime, image: str, network: str, conf: Path, text: str, name: str,
              dns: tuple[str, ...] = ()) -> Iterator[str]:
    """tinyproxy (the host's Debian binary, configured with ``text``) in a container of the test's own on
    ``network``, once it listens; removed after. Yields the container."""
    binary = shutil.which("tinyproxy")
    assert binary is not None, "tinyproxy is not installed (scripts/setup-machine installs it)"
    conf.write_text(text)
    conf.chmod(0o644)
    container = runtime.create(ContainerSpec(
        name=f"dejima-{TEST_SCOPE}-{name}", image=image, command=("-d", "-c", "/etc/tinyproxy.conf"),
        user="0:0", labels={labels.SCOPE: TEST_SCOPE, labels.ROLE: "test-tinyproxy", labels.LAUNCHER: "test"},
        network_mode=network, entrypoint=("/usr/local/bin/tinyproxy",), dns=dns,
        binds=(Bind(binary, "/usr/local/bin/tinyproxy", read_only=True),
               Bind(str(conf), "/etc/tinyproxy.conf", read_only=True))))
    try:
        runtime.start(container)
        seen = b""
        for chunk in runtime.follow_logs(container):  # ends when the container does
            seen += chunk
            if b"listening on fd" in seen:
                break
        assert b"listening on fd" in seen, seen.decode(errors="replace")
        yield container
    finally:
        runtime.remove(container)


@pytest.fixture(scope="module")
def proxy(runtime: Runtime, images: Images, world: World, world_dir: Path) -> Iterator[Proxy]:
    with tinyproxy(runtime, images.session_root, world.network, world_dir / "tinyproxy.conf", TINYPROXY_CONF,
                   "tinyproxy", dns=(world.dns,)) as container:
        yield Proxy(container, runtime.address(container, world.network))


def proxied_settings(world: World, proxy: Proxy, world_dir: Path, name: str, via_setting: bool) -> Path:
    text = world.settings.read_text()
    if via_setting:
        text = text.replace("[network]\n", f'[network]\nupstream_proxy = "http://{proxy.address}:{PROXY_PORT}"\n', 1)
    path = world_dir / f"{name}.toml"
    path.write_text(text)
    path.chmod(0o644)
    return path


def probe(user: User, scope: str, workspace: Path, world: World, settings: Path, *actions: dict[str, object],
          allow: tuple[str, ...], quiet: bool = True, https_proxy: str = "") -> tuple[list[dict[str, object]], str]:
    flags = [arg for entry in allow for arg in ("--allow", entry)]
    result = run_dejima(user, scope, *(["-q"] if quiet else []), *flags, str(workspace), "--",
                        *world.probe(*actions), DEJIMA_SETTINGS=str(settings), HTTPS_PROXY=https_proxy)
    assert result.returncode == 0, result.stderr
    output = json.loads([line for line in result.stdout.splitlines() if line.startswith("[")][-1])
    return output, result.stderr


def test_an_allowed_name_goes_through_the_proxy_by_name_and_a_refused_one_never_reaches_it(
        runtime: Runtime, user: User, scope: str, workspace: Path, world: World, world_dir: Path,
        proxy: Proxy) -> None:
    settings = proxied_settings(world, proxy, world_dir, "proxied-setting", via_setting=True)
    (allowed, by_address, refused, to_proxy, to_relay, closed_port), stderr = probe(
        user, scope, workspace, world, settings,
        tcp("web.dejima.test", 8080), tcp(world.web, 8080), tcp("other.dejima.test", 8080),
        tcp(proxy.address, PROXY_PORT), tcp("127.0.0.1", 701), tcp("web.dejima.test", 8443),
        allow=("web.dejima.test",), quiet=False)
    assert allowed["result"] == "connected" and str(allowed["data"]).startswith("HTTP/1.0 200"), allowed
    # An address the resolver gave an allowed name goes as that name, never as the address.
    assert by_address["result"] == "connected", by_address
    assert refused["result"] == "blocked", refused  # the resolver refuses the name
    assert to_proxy["result"] == "blocked", to_proxy  # only the relay's marked sockets reach the proxy
    assert to_relay["result"] == "blocked", to_relay  # no name for the relay's own address
    # The decoy answers 8443 directly; the proxy refuses to CONNECT there: no direct path around it.
    assert closed_port["result"] == "blocked", closed_port
    log = runtime.logs(proxy.container)
    requests = [line.rsplit("): ", 1)[1] for line in log.splitlines() if "Request (file descriptor" in line]
    assert requests.count("CONNECT web.dejima.test:8080 HTTP/1.1") == 2, requests
    assert "CONNECT web.dejima.test:8443 HTTP/1.1" in requests
    assert "other.dejima.test" not in log and f"CONNECT {world.web}" not in log
    assert f"via proxy http://{proxy.address}:{PROXY_PORT} (from {settings} network.upstream_proxy)" in stderr


def test_the_hosts_https_proxy_is_used_when_the_setting_is_absent_and_said_on_the_card(
        runtime: Runtime, user: User, scope: str, workspace: Path, world: World, world_dir: Path,
        proxy: Proxy) -> None:
    settings = proxied_settings(world, proxy, world_dir, "proxied-env", via_setting=False)
    before = runtime.logs(proxy.container).count("CONNECT web.dejima.test:8080")
    (allowed,), stderr = probe(user, scope, workspace, world, settings, tcp("web.dejima.test", 8080),
                               allow=("web.dejima.test:8080",), quiet=False,
                               https_proxy=f"http://{proxy.address}:{PROXY_PORT}")
    assert allowed["result"] == "connected", allowed
    assert runtime.logs(proxy.container).count("CONNECT web.dejima.test:8080") == before + 1
    assert "from the host's $HTTPS_PROXY)" in stderr


def test_a_grant_opens_a_name_through_the_proxy_and_a_revoke_cuts_the_relayed_connection(
        runtime: Runtime, user: User, scope: str, workspace: Path, world: World, world_dir: Path,
        proxy: Proxy) -> None:
    """Live grants behind a proxy: the agent's retries get through once granted (as CONNECT name:port);
    the revoke cuts the open relayed connection (its packets are headed for the relay, its conntrack
    entry's original destination is revoked) and a new one is refused."""
    settings = proxied_settings(world, proxy, world_dir, "proxied-grants", via_setting=True)
    with spawn_dejima(user, scope, "-q", str(workspace), "--", "python3", "-c", RETRY_THEN_HOLD, "web.dejima.test",
                      str(ECHO_PORT), "hold", DEJIMA_SETTINGS=str(settings), HTTPS_PROXY="") as proc:
        wait_for_line(proc.stdout, "denied")
        granted = allow(user, scope, workspace, "web.dejima.test")
        assert granted.returncode == 0, granted.stderr
        wait_for_line(proc.stdout, "connected", timeout=30)
        assert f"CONNECT web.dejima.test:{ECHO_PORT} HTTP/1.1" in runtime.logs(proxy.container)
        revoked = allow(user, scope, workspace, "web.dejima.test", "--revoke")
        assert revoked.returncode == 0, revoked.stderr
        wait_for_line(proc.stdout, "cut:", timeout=30)
        assert "refused" in wait_for_line(proc.stdout, "new:", timeout=30)
        assert proc.wait(timeout=60) == 0


def test_without_a_proxy_the_same_port_answers_directly(user: User, scope: str, workspace: Path,
                                                        world: World) -> None:
    """The control of the closed port above: the decoy's 8443 answers a session without the proxy."""
    (resolved, direct), _ = probe(user, scope, workspace, world, world.settings, resolve("web.dejima.test"),
                                  tcp("web.dejima.test", 8443), allow=("web.dejima.test",))
    assert resolved["result"] == "resolved" and direct["result"] == "connected", direct
