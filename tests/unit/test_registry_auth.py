"""The registry credentials a pull carries (dejima.adapters.registry_auth), read as the docker CLI reads them:
a real configuration file and real credential-helper programs on PATH."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from dejima.adapters.registry_auth import DOCKER_HUB, header_for, registry_of


def decoded(header: dict[str, str]) -> object:
    return json.loads(base64.urlsafe_b64decode(header["X-Registry-Auth"]))


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "docker"
    directory.mkdir()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("DOCKER_CONFIG", str(directory))
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    return directory


def helper(config: Path, name: str, script: str) -> None:
    path = config.parent / "bin" / f"docker-credential-{name}"
    path.write_text(f"#!/bin/sh\nread registry\n{script}\n")
    path.chmod(0o755)


@pytest.mark.parametrize(("ref", "registry"), [
    ("debian:trixie-slim", DOCKER_HUB), ("library/debian", DOCKER_HUB), ("me/base:1", DOCKER_HUB),
    ("ghcr.io/me/base:1", "ghcr.io"), ("localhost:5000/base", "localhost:5000"), ("localhost/base", "localhost"),
])
def test_the_registry_of_a_reference(ref: str, registry: str) -> None:
    assert registry_of(ref) == registry


def test_no_configuration_is_an_anonymous_pull(config: Path) -> None:
    assert header_for("debian:trixie-slim") == header_for("ghcr.io/x/y")
    assert header_for("debian:trixie-slim").header == {} and header_for("debian:trixie-slim").note == ""


def test_auths_in_the_configuration(config: Path) -> None:
    (config / "config.json").write_text(json.dumps({"auths": {DOCKER_HUB: {
        "auth": base64.b64encode(b"me:pa:ss").decode()}}}))
    assert decoded(header_for("me/base:1").header) == {"username": "me", "password": "pa:ss",
                                                        "serveraddress": DOCKER_HUB}
    assert header_for("ghcr.io/me/base").header == {}  # another registry's pull carries nothing


def test_a_registry_helper_wins_over_the_store_and_a_token_is_an_identity_token(config: Path) -> None:
    (config / "config.json").write_text(json.dumps({"credsStore": "store", "credHelpers": {"ghcr.io": "gh"}}))
    helper(config, "gh", 'echo "{\\"Username\\": \\"<token>\\", \\"Secret\\": \\"tok-$registry\\"}"')
    helper(config, "store", 'echo "{\\"Username\\": \\"u\\", \\"Secret\\": \\"p-$registry\\"}"')
    assert decoded(header_for("ghcr.io/me/base").header) == {"identitytoken": "tok-ghcr.io",
                                                            "serveraddress": "ghcr.io"}
    assert decoded(header_for("debian").header) == {"username": "u", "password": f"p-{DOCKER_HUB}",
                                                    "serveraddress": DOCKER_HUB}


def test_a_helper_with_nothing_stored_is_anonymous_and_a_broken_one_is_said(config: Path) -> None:
    (config / "config.json").write_text(json.dumps({"credHelpers": {"a.io": "empty", "b.io": "broken",
                                                                    "c.io": "missing"}}))
    helper(config, "empty", 'echo "credentials not found in native keychain"; exit 1')
    helper(config, "broken", 'echo "keychain locked" >&2; exit 1')
    assert header_for("a.io/x") == header_for("d.io/x")  # nothing for a.io: anonymous, nothing to say
    broken = header_for("b.io/x")
    assert broken.header == {}
    assert broken.note == "the credential helper docker-credential-broken failed: keychain locked"
    assert "docker-credential-missing could not run" in header_for("c.io/x").note
