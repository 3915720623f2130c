"""Routes: upstream URLs, the /r/<route>/ layout, header forms, and what a client presented."""

import base64

import pytest

from dejima.core.credentials import (
    Route,
    RouteError,
    credential_value,
    looks_like_real_secret,
    parse_upstream,
    presented_token,
    route_base_url,
    split_route_target,
    upstream_target,
)
from dejima.core.secret import Secret


def test_upstreams_are_https_or_loopback_http() -> None:
    up = parse_upstream("https://api.anthropic.com/", "r")
    assert (up.scheme, up.host, up.port, up.base_path, str(up)) == ("https", "api.anthropic.com", 443, "",
                                                                    "https://api.anthropic.com")
    assert parse_upstream("http://127.0.0.1:8080/api", "r").host_header == "127.0.0.1:8080"
    for bad in ("http://api.anthropic.com", "https://u:p@h", "https://h/?q=1", "ftp://h", "https://h:99999"):
        with pytest.raises(RouteError):
            parse_upstream(bad, "r")


def test_route_layout() -> None:
    base = route_base_url("http://127.0.0.1:8080", "anthropic-api-key")
    assert base == "http://127.0.0.1:8080/r/anthropic-api-key"
    assert split_route_target("/r/github-git/o/r.git/info/refs?s=x") == ("github-git", "/o/r.git/info/refs?s=x")
    assert split_route_target("/r/anthropic-api-key") == ("anthropic-api-key", "/")
    assert split_route_target("/r/anthropic-api-key?x=1") == ("anthropic-api-key", "/?x=1")
    assert split_route_target("/v1/messages") is None and split_route_target("/r/Bad_Name/x") is None
    up = parse_upstream("https://openrouter.ai/api", "r")
    assert upstream_target(up, "/v1/messages") == "/api/v1/messages"


def route(scheme: str, header: str = "authorization", username: str | None = None) -> Route:
    return Route("r", parse_upstream("https://h", "r"), header, scheme, "ph-123", username)


def test_credential_forms() -> None:
    secret = Secret("s3cret")
    assert credential_value(route("raw", "x-api-key"), secret) == "s3cret"
    assert credential_value(route("Bearer"), secret) == "Bearer s3cret"
    assert credential_value(route("token"), secret) == "token s3cret"
    basic = credential_value(route("Basic", username="x-access-token"), secret)
    assert base64.b64decode(basic.split()[1]) == b"x-access-token:s3cret"


def test_presented_tokens() -> None:
    assert presented_token("raw", " ph ") == "ph"
    assert presented_token("Bearer", "Bearer ph") == "ph" and presented_token("Bearer", "token ph") == "ph"
    assert presented_token("Bearer", "Digest ph") is None
    assert presented_token("Basic", "Basic " + base64.b64encode(b"x-access-token:ph").decode()) == "ph"
    assert presented_token("Basic", "Basic " + base64.b64encode(b"ph:").decode()) == "ph"
    assert presented_token("Basic", "Basic !!!") is None


def test_route_validation() -> None:
    with pytest.raises(RouteError):
        Route("Bad", parse_upstream("https://h", "r"), "x", "raw", "p")
    with pytest.raises(RouteError):
        Route("r", parse_upstream("https://h", "r"), "X-Api-Key", "raw", "p")


def test_real_secret_shapes() -> None:
    assert looks_like_real_secret("sk-ant-api03-" + "a" * 90)
    assert looks_like_real_secret("ghp_" + "a" * 36) and looks_like_real_secret("AKIA" + "A" * 16)
    assert not looks_like_real_secret("application/json") and not looks_like_real_secret("2023-06-01")
