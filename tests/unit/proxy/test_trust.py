"""What a session gets for intercepted routes: the trust variables, the CA files in its home (public
certificates only), and the hosts the filter must answer with its relay; nothing without a marked route."""

from __future__ import annotations

from pathlib import Path

import pytest

from dejima.core.manifest import CredentialRoute
from dejima.core.plan import TLS_PORT, TLS_SOCKET
from dejima.core.route_plan import BUNDLE_FILE, CA_FILE, TRUST_VARS
from dejima.proxy.runner import write_trust
from tests.unit.proxy.prepared import plan, prepare

API = CredentialRoute("github-api", "https://api.github.com", "Authorization", "Bearer", ("env", ("GH_TOKEN",)),
                      "GH_TOKEN", intercept=True)
GIT = CredentialRoute("github-git", "https://github.com", "Authorization", "Basic", ("env", ("GH_TOKEN",)),
                      None, "x-access-token")
HOST = {"GH_TOKEN": "ghp_" + "R" * 36}


def test_marked_routes_get_a_session_ca_for_their_manifest_host(tmp_path: Path) -> None:
    prepared = prepare([(API, "forges/github.toml"), (GIT, "forges/github.toml")], tmp_path,
                       overrides={"github-api": "https://127.0.0.1:9443"}, environ=HOST)
    interception = prepared.interception
    assert interception is not None
    assert interception.routes == {"api.github.com": "github-api"}  # the host the tool dials, not the override
    assert interception.authority.hosts == ("api.github.com",)
    env = prepared.env
    for name in TRUST_VARS:
        assert env[name] == f"/home/dejima/.dejima/tls/{BUNDLE_FILE}"
    assert env["NODE_EXTRA_CA_CERTS"] == f"/home/dejima/.dejima/tls/{CA_FILE}"
    assert "PRIVATE" not in str(env)


def test_no_marked_route_no_ca_and_no_trust_variables(tmp_path: Path) -> None:
    prepared = prepare([(GIT, "forges/github.toml")], tmp_path, environ=HOST)
    assert prepared.interception is None
    env = prepared.env
    assert not set(TRUST_VARS) & set(env) and "NODE_EXTRA_CA_CERTS" not in env


def test_the_trust_files_hold_the_system_cas_and_the_session_ca(tmp_path: Path) -> None:
    prepared = prepare([(API, "forges/github.toml")], tmp_path, environ=HOST)
    assert prepared.interception is not None
    ca_pem = prepared.interception.authority.ca_pem
    (tmp_path / "home").mkdir()
    write_trust(tmp_path / "home", (".dejima", "tls"), ca_pem, None)
    directory = tmp_path / "home" / ".dejima" / "tls"
    assert (directory / CA_FILE).read_text() == ca_pem
    bundle = (directory / BUNDLE_FILE).read_text()
    assert bundle.endswith(ca_pem) and bundle.count("BEGIN CERTIFICATE") > 10  # the host's CAs come first
    assert "PRIVATE KEY" not in bundle
    assert oct((directory / BUNDLE_FILE).stat().st_mode & 0o777) == "0o644"


def test_a_link_the_session_left_in_its_home_is_removed_not_followed(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    home = tmp_path / "home"
    home.mkdir()
    (home / ".dejima").symlink_to(elsewhere)
    assert write_trust(home, (".dejima", "tls"), "CERT\n", None) == ["~/.dejima was a link; replaced by a directory"]
    assert list(elsewhere.iterdir()) == [] and not (home / ".dejima").is_symlink()
    assert (home / ".dejima" / "tls" / CA_FILE).read_text() == "CERT\n"


@pytest.mark.parametrize("intercept", [(), ("api.github.com",)])
def test_the_filter_config_names_the_relay_only_with_intercepted_hosts(intercept: tuple[str, ...],
                                                                       tmp_path: Path) -> None:
    import json
    from pathlib import PurePosixPath

    from dejima.core.egress import parse_policy
    from dejima.core.plan import SessionRequest, filter_config
    from dejima.core.ruleset import DENY_ALL_EXPECTATION

    request = SessionRequest("s1", "scope", PurePosixPath("/w"), PurePosixPath("/h"), None, "l",
                             run_dir=PurePosixPath("/run"))
    routes = plan([(API if intercept else GIT, "forges/github.toml")], tmp_path)
    config = json.loads(filter_config("s1", "", DENY_ALL_EXPECTATION, parse_policy([], []), (), request,
                                      routes=routes))
    assert config["bridge"]["port"] == 700
    if intercept:
        assert config["intercept"] == {"socket": f"/run/dejima/{TLS_SOCKET}", "port": TLS_PORT,
                                       "names": ["api.github.com"]}
    else:
        assert "intercept" not in config


FORGE = """schema = 1
description = "a forge"
[[credentials]]
name = "api"
upstream = "{upstream}"
header = "Authorization"
scheme = "Bearer"
source = {{ env = "TOKEN" }}
intercept = {intercept}
"""


def test_the_manifest_key_takes_a_boolean_and_a_bare_upstream() -> None:
    from dejima.core.manifest import ManifestError, parse_manifest

    parsed = parse_manifest(FORGE.format(upstream="https://api.forge.test", intercept="true"), "forges", "f", "f.toml")
    assert parsed.credentials[0].intercept
    with pytest.raises(ManifestError, match="'credentials\\[0\\].intercept' needs an upstream without a path"):
        parse_manifest(FORGE.format(upstream="https://forge.test/api", intercept="true"), "forges", "f", "f.toml")
    with pytest.raises(ManifestError, match="must be true or false"):
        parse_manifest(FORGE.format(upstream="https://api.forge.test", intercept='"yes"'), "forges", "f", "f.toml")
    assert not parse_manifest(FORGE.format(upstream="https://forge.test/api", intercept="false"), "forges", "f",
                              "f.toml").credentials[0].intercept


def test_render_shows_which_routes_are_intercepted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """A github workspace's plan says that the API hosts' TLS is answered by the proxy (no engine needed)."""
    import subprocess

    from dejima.cli.launch import main
    from dejima.errors import ExitStatus
    from tests.unit.cli.test_launch_errors import AS_OWNER

    def no_engine(*_args: object, **_kw: object) -> None:
        raise AssertionError("--render needs no engine")

    monkeypatch.setattr("dejima.adapters.runtime.connect", no_engine)
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    subprocess.run(["git", "-C", str(tmp_path), "remote", "add", "origin", "https://github.com/o/r.git"], check=True)
    assert main([str(tmp_path), "--render", *AS_OWNER, "--dns-upstream", "192.0.2.53"]) == ExitStatus.SUCCESS
    lines = capsys.readouterr().out.splitlines()
    api = next(line for line in lines if line.startswith("github-api "))
    git = next(line for line in lines if line.startswith("github-git "))
    assert "TLS answered by the proxy" in api and "TLS answered by the proxy" not in git


def test_a_corporate_proxys_ca_joins_the_bundle_before_the_session_ca(tmp_path: Path) -> None:
    """[network] extra_ca: the session's tools, pointed at the bundle, trust a TLS-inspecting proxy too."""
    corporate = "-----BEGIN CERTIFICATE-----\nQ09SUA==\n-----END CERTIFICATE-----\n"
    (tmp_path / "home").mkdir()
    write_trust(tmp_path / "home", (".dejima", "tls"), "SESSION CA\n", None, corporate)
    bundle = (tmp_path / "home" / ".dejima" / "tls" / BUNDLE_FILE).read_text()
    assert bundle.endswith(f"{corporate}SESSION CA\n")
    assert bundle.count("BEGIN CERTIFICATE") > 10  # the host's CAs still first
