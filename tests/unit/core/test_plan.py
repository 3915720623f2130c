from dataclasses import replace
from pathlib import PurePosixPath

import pytest

from dejima.core import labels
from dejima.core.paths import SESSION_HOME
from dejima.core.plan import (
    Identity,
    SessionPlan,
    SessionRequest,
    build_session_plan,
    plan_hash,
    session_ids,
)
from dejima.core.settings import Settings

IDENTITY = Identity(uid=1000, gid=1000, name="alice")


def request(**overrides: object) -> SessionRequest:
    base = SessionRequest(
        session_id="abcd1234", scope="test", workspace=PurePosixPath("/home/alice/repos/p"),
        home_dir=PurePosixPath("/home/alice/.local/share/dejima/homes/p-1"), command=("true",),
        launcher="boot:1:2",
    )
    return replace(base, **overrides)  # type: ignore[arg-type]


def plan(**overrides: object) -> SessionPlan:
    return build_session_plan(request(**overrides), Settings(), IDENTITY, "dejima/filter:x", "dejima/session:y")


def test_session_joins_the_filters_network_and_pid_namespaces() -> None:
    p = plan()
    assert p.session.network_mode == f"container:{p.filter.name}"
    assert p.session.pid_mode == f"container:{p.filter.name}"


def test_session_runs_as_the_user_without_capabilities() -> None:
    p = plan()
    assert p.session.user == "1000:1000"
    assert p.session.cap_add == ()
    assert p.filter.cap_add == ("NET_ADMIN", "NET_BIND_SERVICE")  # the pair's only capabilities, the filter's


def test_workspace_is_mounted_at_the_same_path_and_home_persists() -> None:
    s = plan().session
    binds = {b.target: b for b in s.binds}
    assert binds["/home/alice/repos/p"].source == "/home/alice/repos/p"
    assert not binds["/home/alice/repos/p"].read_only
    assert binds[SESSION_HOME].source == "/home/alice/.local/share/dejima/homes/p-1"
    assert set(binds) == {"/home/alice/repos/p", SESSION_HOME}
    assert s.working_dir == "/home/alice/repos/p"
    assert set(s.tmpfs["/tmp"].split(",")) >= {"exec", "nosuid", "nodev"}  # go test runs what it builds there


def test_no_docker_socket_is_ever_mounted() -> None:
    p = plan()
    for spec in (p.filter, p.session):
        assert not any("docker.sock" in b.source or "docker.sock" in b.target for b in spec.binds)


def test_every_container_is_labelled_with_scope_session_and_role() -> None:
    p = plan()
    for spec, role in ((p.filter, labels.ROLE_FILTER), (p.session, labels.ROLE_SESSION)):
        assert spec.labels[labels.SCOPE] == "test"
        assert spec.labels[labels.SESSION] == "abcd1234"
        assert spec.labels[labels.ROLE] == role
        assert spec.labels[labels.LAUNCHER] == "boot:1:2"


def test_interactive_session_gets_a_tty_and_a_login_shell() -> None:
    p = plan(command=None)
    assert p.interactive and p.session.tty
    assert p.session.command == ("bash", "-l")
    assert not plan().session.tty


def test_filter_receives_the_ruleset_and_its_expectation() -> None:
    import json

    p = plan()
    config = json.loads(p.filter.environment["DEJIMA_FILTER_CONFIG"])
    assert config["ruleset"] == p.ruleset
    assert [c["name"] for c in config["expect"]["chains"]] == ["output", "input", "forward"]


def test_plan_hash_ignores_session_id_but_not_content() -> None:
    assert plan_hash(plan()) == plan_hash(plan(session_id="ffff0000", launcher="boot:9:9"))
    assert plan_hash(plan()) != plan_hash(plan(command=("false",)))


def test_filter_is_the_sessions_only_resolver_and_ipv6_is_off() -> None:
    p = plan()
    assert p.filter.dns == ("127.0.0.1",)
    assert p.filter.sysctls["net.ipv6.conf.all.disable_ipv6"] == "1"


def test_cli_and_settings_entries_join_the_policy() -> None:
    from dejima.core.settings import NetworkSettings

    settings = Settings(network=NetworkSettings(allow=("crates.io",), deny=("evil.example",),
                                                deny_reasons={"evil.example": "exfil"}))
    p = build_session_plan(request(allow=("pypi.org:443",)), settings, IDENTITY, "f", "s")
    assert [e.canonical for e in p.policy.allowed] == ["crates.io", "pypi.org:443"]
    assert p.policy.name_verdict("evil.example").reason == "exfil"


def test_ipv6_allow_entries_are_refused() -> None:
    import pytest

    from dejima.core.egress import PolicyError

    with pytest.raises(PolicyError, match="sessions have IPv6 disabled"):
        plan(allow=("[2001:db8::1]:443",))


def test_manifest_entries_carry_their_origin_and_repository_denies_win() -> None:
    from dejima.core.resolve import RepoPolicy, WorkspaceFacts, resolve
    from tests.unit.core.test_resolve import CATALOG

    resolved = resolve(CATALOG, WorkspaceFacts(frozenset({"Cargo.toml"})), "claude-code",
                       repo=RepoPolicy(deny=("static.crates.io",)))
    p = build_session_plan(request(), Settings(), IDENTITY, "f", "s", resolved=resolved)
    origins = {e.canonical: e.origin for e in p.policy.allowed}
    assert origins["crates.io"] == "/shipped/workflows/rust.toml network.allow"
    assert p.policy.name_verdict("crates.io").allowed
    assert not p.policy.name_verdict("static.crates.io").allowed  # the repository narrowed it
    assert p.session.environment["CARGO_HOME"] == "/home/dejima/.cargo"
    assert plan(command=None).session.command == ("bash", "-l")


def test_caches_persist_with_the_home_or_get_a_mount_of_their_own() -> None:
    from dejima.core.manifest import parse_manifest
    from dejima.core.resolve import WorkspaceFacts, resolve

    shell = parse_manifest('schema = 1\ndescription = "s"\n[harness]\ncommand = ["sh"]\napis = []\n'
                           '[[caches]]\npath = "/home/dejima/.cache/x"\n[[caches]]\npath = "/opt/tool/cache"\n',
                           "harnesses", "shell", "/m/shell.toml")
    resolved = resolve({("harnesses", "shell"): shell}, WorkspaceFacts(), "shell")
    p = build_session_plan(request(cache_root=PurePosixPath("/data/caches/p-1")), Settings(), IDENTITY, "f", "s",
                           resolved=resolved)
    binds = {b.target: b.source for b in p.session.binds}
    assert binds["/opt/tool/cache"] == "/data/caches/p-1/opt__tool__cache"
    assert "/home/dejima/.cache/x" not in binds  # inside the per-project home already


def test_both_containers_are_limited_and_the_session_tmp_is_sized() -> None:
    from dejima.core.settings import LimitSettings

    settings = Settings(limits=LimitSettings(session_pids=64, session_memory="96m", session_tmp_size="8m"))
    p = build_session_plan(request(), settings, IDENTITY, "f", "s", engine_memory=8 * 1024**3)
    assert p.session.limits is not None and p.filter.limits is not None
    assert (p.session.limits.pids, p.session.limits.memory) == (64, 96 * 1024**2)
    assert p.session.tmpfs["/tmp"].endswith(",size=8388608")
    assert (p.filter.limits.pids, p.filter.limits.memory) == (512, 256 * 1024**2)


def test_the_filters_namespace_keeps_low_ports_privileged() -> None:
    p = plan()
    assert p.filter.sysctls["net.ipv4.ip_unprivileged_port_start"] == "1024"
    assert "NET_BIND_SERVICE" not in p.session.cap_add


def test_special_literals_need_an_override_from_the_flag_or_the_settings() -> None:
    import ipaddress

    import pytest

    from dejima.core.plan import NetworkFacts
    from dejima.core.settings import NetworkSettings
    from dejima.core.special_entries import SpecialEntryError

    facts = NetworkFacts(gateway=ipaddress.ip_network("172.17.0.1/32"))
    with pytest.raises(SpecialEntryError, match="^--allow: egress entry '172.17.0.0/16' reaches 172.17.0.1"):
        build_session_plan(request(allow=("172.17.0.0/16",)), Settings(), IDENTITY, "f", "s", facts)
    p = build_session_plan(request(allow=("172.17.0.0/16",), allow_special=("172.17.0.0/16",)), Settings(),
                           IDENTITY, "f", "s", facts)
    assert [(u.entry.canonical, u.override_origin) for u in p.unlocked] == [("172.17.0.0/16", "--allow-special")]
    settings = Settings(network=NetworkSettings(allow=("169.254.169.254",), allow_special=("169.254.169.254",)))
    p = build_session_plan(request(), settings, IDENTITY, "f", "s", facts, settings_source="/s.toml")
    assert p.unlocked[0].override_origin == "/s.toml network.allow_special"
    with pytest.raises(SpecialEntryError, match="^/s.toml network.allow: egress entry '0.0.0.0/0' covers"):
        build_session_plan(request(), Settings(network=NetworkSettings(allow=("0.0.0.0/0",))), IDENTITY, "f", "s",
                           facts, settings_source="/s.toml")


@pytest.mark.parametrize(("launcher", "owner", "as_root", "expected"), [
    ((1000, 1000), (1000, 1000), False, (1000, 1000)),
    ((1000, 1000), (2000, 2000), False, (1000, 1000)),  # not root: always the launcher
    ((1000, 1000), (0, 0), False, (1000, 1000)),
    ((0, 0), (4242, 4343), False, (4242, 4343)),  # root: the workspace's owner
    ((0, 0), (4242, 4242), True, (0, 0)),  # root, asked for
    ((0, 0), (0, 0), True, (0, 0)),
])
def test_the_session_runs_as_the_workspace_owner_when_the_launcher_is_root(
        launcher: tuple[int, int], owner: tuple[int, int], as_root: bool, expected: tuple[int, int]) -> None:
    assert session_ids(launcher, owner, as_root, "/w") == expected


def test_root_on_a_root_owned_workspace_needs_the_option_and_a_user_cannot_ask_for_root() -> None:
    from dejima.errors import UsageError

    with pytest.raises(UsageError, match="/w belongs to root and dejima runs as root") as caught:
        session_ids((0, 0), (0, 0), False, "/w")
    assert caught.value.hint is not None and "--as-root" in caught.value.hint
    with pytest.raises(UsageError, match="--as-root needs dejima itself to run as root"):
        session_ids((1000, 1000), (1000, 1000), True, "/w")


def test_a_gated_session_runs_its_command_behind_the_gate_mounted_read_only() -> None:
    from dejima.core.paths import GATE_DIR
    from dejima.core.plan import GATE_ENTRYPOINT

    gated = plan(gate_dir=PurePosixPath("/state/sessions/abcd1234/gate"))
    assert gated.session.entrypoint == GATE_ENTRYPOINT
    assert gated.session.command == ("true",)  # the user's command, handed to the gate's script
    gate_binds = [b for b in gated.session.binds if b.target == GATE_DIR]
    assert [(b.source, b.read_only) for b in gate_binds] == [("/state/sessions/abcd1234/gate", True)]
    assert gated.gate == "/state/sessions/abcd1234/gate/go"
    assert not any(b.target == GATE_DIR for b in gated.filter.binds)
    ungated = plan()
    assert ungated.session.entrypoint is None and ungated.gate is None
