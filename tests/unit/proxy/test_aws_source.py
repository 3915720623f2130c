"""The host's AWS keys for SigV4 routes: environment, shared files and profiles, credential_process,
read again before temporary keys expire; a missing or broken source names the manifest, route and source."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from dejima.proxy.aws_source import AwsSource
from dejima.proxy.source_kinds import resolve_source
from dejima.proxy.sources import CredentialError, SourceUnavailable

ORIGIN = "backends/bedrock.toml credentials route 'aws-sigv4-runtime'"
KEY_ID, SECRET = "AKIAHOSTREALKEY00001", "hostSecretKeyThatMustNeverEnterTheSession01"


def keys(source: object) -> tuple[str, str, str | None]:
    got = asyncio.run(source.keys())  # type: ignore[attr-defined]
    return got.access_key_id, got.secret_access_key.reveal(), got.session_token.reveal() if got.session_token else None


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_the_environment_comes_first(tmp_path: Path) -> None:
    write(tmp_path / ".aws" / "credentials", "[default]\naws_access_key_id = FILE\naws_secret_access_key = file\n")
    env = {"AWS_ACCESS_KEY_ID": KEY_ID, "AWS_SECRET_ACCESS_KEY": SECRET, "AWS_SESSION_TOKEN": "tok"}
    source = resolve_source(("aws", ("default",)), ORIGIN, env, tmp_path)
    assert keys(source) == (KEY_ID, SECRET, "tok")
    assert asyncio.run(source.current()).reveal() == SECRET  # what the proxy recognises in a request
    assert SECRET not in source.description and SECRET not in repr(source.__dict__)


def test_a_profile_from_the_credentials_file_then_the_config_file(tmp_path: Path) -> None:
    write(tmp_path / ".aws" / "credentials", f"[work]\naws_access_key_id = {KEY_ID}\n"
                                             f"aws_secret_access_key = {SECRET}\n")
    write(tmp_path / ".aws" / "config", "[profile other]\naws_access_key_id = CFG\naws_secret_access_key = cfg\n"
                                        "aws_session_token = t2\n")
    assert keys(resolve_source(("aws", ("work",)), ORIGIN, {}, tmp_path)) == (KEY_ID, SECRET, None)
    assert keys(resolve_source(("aws", ("default",)), ORIGIN, {"AWS_PROFILE": "other"}, tmp_path)) == (
        "CFG", "cfg", "t2")


def _process(tmp_path: Path, expiration: str | None, fail: bool = False) -> str:
    counter = tmp_path / "runs"
    script = write(tmp_path / "helper.py", f"""
import json, pathlib, sys
runs = pathlib.Path({str(counter)!r}); n = int(runs.read_text()) + 1 if runs.exists() else 1; runs.write_text(str(n))
if {fail!r} and n > 1:
    sys.exit("the SSO session has expired")
out = {{"Version": 1, "AccessKeyId": "ASIA%d" % n, "SecretAccessKey": "secret-%d" % n, "SessionToken": "tok-%d" % n}}
if {expiration!r}:  # each run's keys live an hour longer than the last's
    out["Expiration"] = {expiration!r}.replace("T00:", "T%02d:" % (n - 1))
print(json.dumps(out))
""")
    return f"{sys.executable} {script}"


def test_credential_process_keys_are_read_again_before_they_expire(tmp_path: Path) -> None:
    write(tmp_path / ".aws" / "config", "[profile sso]\ncredential_process = "
                                        + _process(tmp_path, "2030-01-01T00:00:00Z") + "\n")
    now = [1893455000.0]  # 2030-01-01 00:00:00 UTC is 1893456000: 1000 s before expiry
    source = AwsSource("sso", ORIGIN, {}, tmp_path, clock=lambda: now[0])
    assert keys(source) == ("ASIA1", "secret-1", "tok-1")
    now[0] += 750  # 250 s left: inside the refresh margin
    assert keys(source) == ("ASIA2", "secret-2", "tok-2")
    assert keys(source) == ("ASIA2", "secret-2", "tok-2")  # fresh again: not run once more


def test_a_refresh_that_fails_answers_with_the_helpers_reason(tmp_path: Path) -> None:
    write(tmp_path / ".aws" / "config", "[default]\ncredential_process = "
                                        + _process(tmp_path, "2030-01-01T00:00:00Z", fail=True) + "\n")
    now = [1893455000.0]
    source = AwsSource("default", ORIGIN, {}, tmp_path, clock=lambda: now[0])
    now[0] += 900
    with pytest.raises(SourceUnavailable) as err:
        asyncio.run(source.keys())
    assert ORIGIN in str(err.value) and "SSO session has expired" in str(err.value)


@pytest.mark.parametrize(("files", "env", "expected", "hint"), [
    ({}, {}, "AWS_ACCESS_KEY_ID is not set and profile 'default' is in neither", "export AWS_ACCESS_KEY_ID"),
    ({}, {"AWS_ACCESS_KEY_ID": KEY_ID}, "has no aws_secret_access_key", "both"),
    ({"config": "[profile dev]\nsso_session = corp\nsso_account_id = 1\n"}, {"AWS_PROFILE": "dev"},
     "uses AWS SSO (sso_session), which dejima does not resolve itself",
     "credential_process = aws configure export-credentials --profile dev --format process"),
    ({"config": "[default]\ncredential_process = /nonexistent/helper\n"}, {},
     "credential_process `/nonexistent/helper` failed: '/nonexistent/helper' is not installed", "aws sso login"),
    ({"config": "[default]\ncredential_process = /bin/echo not-json\n"}, {}, "did not print JSON", "Version"),
    ({"credentials": "[default\nbroken"}, {}, "cannot be read", "fix"),
    ({"config": "[default]\ncredential_process = /bin/echo '{\"Version\":1,\"AccessKeyId\":\"A\",\"SecretAccessKey\":"
                "\"B\",\"Expiration\":\"2001-01-01T00:00:00Z\"}'\n"}, {}, "have expired", "aws sso login"),
])
def test_a_missing_or_broken_source_names_manifest_route_and_source(
        tmp_path: Path, files: dict[str, str], env: dict[str, str], expected: str, hint: str) -> None:
    for name, text in files.items():
        write(tmp_path / ".aws" / name, text)
    with pytest.raises(CredentialError) as err:
        resolve_source(("aws", ("default",)), ORIGIN, env, tmp_path)
    assert err.value.message.startswith(f"{ORIGIN}: credential source aws profile ")
    assert expected in err.value.message, err.value.message
    assert hint in (err.value.hint or ""), err.value.hint


def test_the_shared_file_locations_follow_the_aws_variables(tmp_path: Path) -> None:
    creds = write(tmp_path / "elsewhere" / "creds", f"[default]\naws_access_key_id = {KEY_ID}\n"
                  f"aws_secret_access_key = {SECRET}\n")
    assert keys(resolve_source(("aws", ("default",)), ORIGIN, {"AWS_SHARED_CREDENTIALS_FILE": str(creds)},
                               tmp_path)) == (KEY_ID, SECRET, None)
