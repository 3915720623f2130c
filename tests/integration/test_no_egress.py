"""No egress: the session cannot reach a decoy that an unfiltered container reaches."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dejima.adapters.runtime import Runtime
from dejima.core import labels
from dejima.orchestration.selftest import Decoy, ProbeResult, probe_command
from tests.integration.conftest import Images
from tests.world import (
    User,
    containers_of,
    docker,
    probe_from_plain_container,
    run_dejima,
    spawn_dejima,
    start_decoy,
    wait_for_line,
)

LIST_AFTER_APPLY = 'printf "%s" "$0" | nft -f - && nft -s list table inet dejima'
GOLDEN_LISTING = Path(__file__).parents[1] / "golden" / "ruleset" / "deny-all.listed.nft"


@pytest.fixture(scope="module")
def decoy(runtime: Runtime, images: Images) -> Decoy:
    from tests.conftest import TEST_SCOPE

    return start_decoy(runtime, TEST_SCOPE, images.session_root)


def test_control_probe_reaches_the_decoy(runtime: Runtime, images: Images, decoy: Decoy, scope: str) -> None:
    """Without dejima the same probe gets through, so the blocked results below mean something."""
    result = probe_from_plain_container(runtime, scope, images.session_root, decoy.address)
    assert result.tcp["result"] == "connected" and isinstance(result.tcp["data"], str) \
        and result.tcp["data"].startswith("HTTP/1.0 200")
    assert result.udp["result"] == "answered"


def probe_in_session(user: User, scope: str, workspace: Path, address: str) -> ProbeResult:
    result = run_dejima(user, scope, "-q", str(workspace), "--", *probe_command(address, timeout=5))
    assert result.returncode == 0, result.stderr
    return ProbeResult.parse(result.stdout)


def test_tcp_to_decoy_is_refused_fast(runtime: Runtime, images: Images, decoy: Decoy, user: User, scope: str,
                                      workspace: Path) -> None:
    result = probe_in_session(user, scope, workspace, decoy.address)
    # "blocked" means the connect failed before the probe's 5 s timeout: a reject, not a hang.
    assert result.tcp["result"] == "blocked", result.tcp


def test_dns_to_decoy_resolver_gets_nothing(runtime: Runtime, images: Images, decoy: Decoy, user: User,
                                            scope: str, workspace: Path) -> None:
    result = probe_in_session(user, scope, workspace, decoy.address)
    assert result.udp["result"] in ("blocked", "timeout"), result.udp
    assert result.udp["result"] != "answered"


def test_loopback_inside_the_namespace_works(runtime: Runtime, images: Images, decoy: Decoy, user: User,
                                             scope: str, workspace: Path) -> None:
    assert probe_in_session(user, scope, workspace, decoy.address).loopback["result"] == "connected"


def normalise_listing(text: str) -> str:
    """Counters as N; protocols as numbers (nft 1.0 lists `l4proto 6`, nft 1.1 `l4proto tcp`: the
    filter image's nft is the base's)."""
    text = re.sub(r"counter packets \d+ bytes \d+", "counter packets N bytes N", text)
    return text.replace("l4proto { tcp, udp }", "l4proto { 6, 17 }").replace("l4proto tcp ", "l4proto 6 ")


def test_applied_ruleset_reads_back_as_rendered(runtime: Runtime, images: Images, user: User, scope: str,
                                                workspace: Path, world_dir: Path, update_golden: bool) -> None:
    """The kernel in the session's namespace holds exactly the deny-all table (nft's own listing)."""
    # A fixed upstream (TEST-NET-1) keeps the listing the same on every machine. No query is
    # forwarded in this test, so nothing is ever sent there.
    settings = world_dir / "fixed-upstream.toml"
    settings.write_text('[network]\nupstream_dns = ["192.0.2.53"]\n')
    settings.chmod(0o644)
    with spawn_dejima(user, scope, "-q", str(workspace), "--", "sh", "-c", "echo started; exec sleep 300",
                      DEJIMA_SETTINGS=str(settings)) as proc:
        wait_for_line(proc.stdout, "started")
        (filter_id,) = containers_of(runtime, scope, role=labels.ROLE_FILTER)
        listing = docker("exec", filter_id, "nft", "list", "ruleset")
        proc.terminate()
    assert listing.returncode == 0, listing.stdout
    text = normalise_listing(listing.stdout.decode())
    if update_golden:
        GOLDEN_LISTING.write_text(text)
    assert text == GOLDEN_LISTING.read_text()


NET_ADMIN_ATTEMPTS = r"""
import fcntl, json, socket, struct
results = {}
s = socket.socket()
try:
    s.setsockopt(socket.SOL_SOCKET, 36, 1)  # SO_MARK: would let traffic match other rules
    results["so_mark"] = "allowed"
except PermissionError:
    results["so_mark"] = "denied"
try:
    fcntl.ioctl(s, 0x8914, struct.pack("16sH", b"lo", 0))  # SIOCSIFFLAGS: take loopback down
    results["ifdown"] = "allowed"
except PermissionError:
    results["ifdown"] = "denied"
print(json.dumps(results))
"""


def test_session_cannot_change_the_network(runtime: Runtime, images: Images, user: User, scope: str,
                                          workspace: Path) -> None:
    from tests.world import parse_json_line

    result = run_dejima(user, scope, "-q", str(workspace), "--", "python3", "-c", NET_ADMIN_ATTEMPTS)
    assert result.returncode == 0, result.stderr
    assert parse_json_line(result.stdout) == {"so_mark": "denied", "ifdown": "denied"}


@pytest.mark.parametrize("golden", sorted(p.name for p in GOLDEN_LISTING.parent.glob("*.nft")
                                          if not p.name.endswith(".listed.nft")))
def test_every_golden_render_applies_and_lists_back_as_written(runtime: Runtime, images: Images, scope: str,
                                                                golden: str) -> None:
    """Each golden render is accepted by nft and the kernel lists it exactly as written, so the
    filter's read-back comparison holds for every shape the template produces."""
    from dejima.core.nftlisting import difference

    text = (GOLDEN_LISTING.parent / golden).read_text()
    output = docker("run", "--rm", "--cap-add", "NET_ADMIN", "--network", "none", "--label", f"{labels.SCOPE}={scope}",
                    "--label", f"{labels.ROLE}=test-nft-check", "--entrypoint", "sh", images.filter,
                    "-c", LIST_AFTER_APPLY, text).stdout
    assert difference(text, output.decode()) is None
