"""From manifest routes to a proxy config and a session environment that holds no secret."""

from dataclasses import replace
from pathlib import Path

import pytest

from dejima.core.credentials import RouteError
from dejima.core.manifest import CredentialRoute
from dejima.core.pushrules import PushPolicy
from dejima.core.route_plan import FORWARDS, GUARDS_PUSHES
from dejima.proxy.gitpush import GitPushGuard
from dejima.proxy.routes import Forwarding
from dejima.proxy.sources import CredentialError
from tests.unit.proxy.prepared import plan, prepare

ANTHROPIC = CredentialRoute("anthropic-api-key", "https://api.anthropic.com", "x-api-key", "raw",
                            ("env", ("ANTHROPIC_API_KEY",)), "ANTHROPIC_API_KEY",
                            base_url_env="ANTHROPIC_BASE_URL")
GIT = CredentialRoute("github-git", "https://github.com", "Authorization", "Basic", ("env", ("GH_TOKEN",)),
                      None, "x-access-token")
HOST = {"ANTHROPIC_API_KEY": "sk-ant-api03-" + "R" * 90, "GH_TOKEN": "ghp_" + "R" * 36}


def test_env_has_placeholders_urls_and_git_rewrites_but_no_secret(tmp_path: Path) -> None:
    prepared = prepare([(ANTHROPIC, "backends/anthropic.toml"), (GIT, "forges/github.toml")], tmp_path,
                       overrides={"github-git": "http://127.0.0.1:9999"},
                       push={"github-git": PushPolicy(("o/r",))}, environ=HOST, origin="http://127.0.0.1:8080")
    env = prepared.env
    assert env["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:8080/r/anthropic-api-key"
    assert env["ANTHROPIC_API_KEY"].startswith("sk-ant-api03-")
    assert env["GIT_CONFIG_KEY_0"] == "url.http://127.0.0.1:8080/r/github-git/.insteadOf"
    assert env["GIT_CONFIG_VALUE_0"] == "https://github.com/"
    assert env["GIT_CONFIG_VALUE_1"].startswith("Authorization: Basic ")
    assert "AWS_ACCESS_KEY_ID" in env and env["GIT_TERMINAL_PROMPT"] == "0"
    for secret in HOST.values():
        assert secret not in str(env) and secret not in repr(prepared)
    assert [p.behaviour for p in prepared.plan.routes] == [FORWARDS, GUARDS_PUSHES]  # as planned, so served:
    git_spec = prepared.config.routes[1]
    assert str(git_spec.route.upstream) == "http://127.0.0.1:9999"
    assert git_spec.behaviour == GitPushGuard(PushPolicy(("o/r",)))
    assert isinstance(prepared.config.routes[0].behaviour, Forwarding)


def test_missing_sources_are_skipped_or_required(tmp_path: Path) -> None:
    prepared = prepare([(ANTHROPIC, "backends/anthropic.toml")], tmp_path, environ={})
    assert prepared.config.routes == () and "env ANTHROPIC_API_KEY" in prepared.skipped[0].message
    with pytest.raises(CredentialError, match="backends/anthropic.toml credentials route 'anthropic-api-key'"):
        prepare([(ANTHROPIC, "backends/anthropic.toml")], tmp_path, environ={}, required=["anthropic-api-key"])


def test_a_plaintext_override_to_a_remote_host_is_refused(tmp_path: Path) -> None:
    with pytest.raises(RouteError, match="b.toml credentials route 'anthropic-api-key'.*plain http to a non-loopback"):
        prepare([(ANTHROPIC, "b.toml")], tmp_path, overrides={"anthropic-api-key": "http://gw.corp"}, environ=HOST)


def test_routes_fed_by_one_source_share_its_placeholder(tmp_path: Path) -> None:
    """gh sends GH_TOKEN's placeholder to api.github.com and uploads.github.com alike: both routes
    take it (each toward its own upstream); a route of another source does not."""
    uploads = CredentialRoute("github-uploads", "https://uploads.github.com", "Authorization", "Bearer",
                              ("env", ("GH_TOKEN",)))
    api = CredentialRoute("github-api", "https://api.github.com", "Authorization", "Bearer", ("env", ("GH_TOKEN",)),
                          "GH_TOKEN")
    prepared = prepare([(api, "f.toml"), (uploads, "f.toml"), (GIT, "f.toml"), (ANTHROPIC, "b.toml")], tmp_path,
                       environ=HOST)
    placeholders = {spec.route.name: spec.route.placeholder for spec in prepared.config.routes}
    assert placeholders["github-api"] == placeholders["github-uploads"] == placeholders["github-git"]
    assert placeholders["anthropic-api-key"] != placeholders["github-api"]


def test_a_render_names_every_source_and_reads_none(tmp_path: Path) -> None:
    """--render (no source read): every declared route is planned with its placeholder, even with no secret on
    the host; its source is named, and the plan holds no source object that could be asked for a value."""
    planned = plan([(ANTHROPIC, "backends/anthropic.toml"), (GIT, "forges/github.toml")], tmp_path)
    assert planned.names == ("anthropic-api-key", "github-git")
    assert [p.source_shown for p in planned.routes] == ["host env ANTHROPIC_API_KEY", "host env GH_TOKEN"]
    assert planned == replace(planned)  # plain values: a plan compares equal to its copy


def test_a_plan_is_served_only_with_a_source_for_each_route(tmp_path: Path) -> None:
    """A render's plan (every route, no source read) cannot be served: the proxy refuses it, naming the
    routes, rather than serving a route without its secret."""
    from dejima.proxy.setup import served_config

    planned = plan([(ANTHROPIC, "backends/anthropic.toml"), (GIT, "forges/github.toml")], tmp_path)
    with pytest.raises(CredentialError, match="anthropic-api-key, github-git"):
        served_config(planned, {})
