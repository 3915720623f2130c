"""Bedrock through a real session: the agent holds placeholder AWS keys, signs with them, and a fake
Bedrock on this host's loopback receives requests signed by the host's real keys (checked by botocore).

The proxy runs in the launcher, on the host, so that is where it connects; the session reaches it
only through 127.0.0.1:700 in its namespace. The real secret key must appear nowhere in the session.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import TypedDict

import pytest

from dejima.adapters.runtime import Runtime
from tests.bedrockfake import DRIP_SECONDS, WORDS, FakeBedrock, fake_bedrock
from tests.integration.conftest import ENVIRONS, credential_settings, run_agent
from tests.integration.test_interactive import exit_on_a_terminal
from tests.world import User, containers_of, run_dejima

REAL_ID = "AKIACANARYHOSTKEY001"
REAL_SECRET = "Canary/RealAwsSecretKeyNeverInSession0001"
REAL_TOKEN = "IQoJb3JpZ2luX2VjCanaryHostSessionToken//0001+="


class AwsEnv(TypedDict, total=False):
    """The AWS variables a test gives the launcher (named, so they cannot stand for its other arguments)."""

    AWS_ACCESS_KEY_ID: str
    AWS_SECRET_ACCESS_KEY: str
    AWS_SESSION_TOKEN: str
    AWS_PROFILE: str


HOST_AWS: AwsEnv = {"AWS_ACCESS_KEY_ID": REAL_ID, "AWS_SECRET_ACCESS_KEY": REAL_SECRET, "AWS_SESSION_TOKEN": REAL_TOKEN}


@pytest.fixture(scope="module")
def bedrock() -> Iterator[FakeBedrock]:
    with fake_bedrock(REAL_ID, REAL_SECRET, REAL_TOKEN) as fake:
        yield fake


@pytest.fixture
def settings(world_dir: Path, bedrock: FakeBedrock, claude_image: None) -> str:
    return credential_settings(world_dir, f"bedrock-{bedrock.port}",
                               {"aws-sigv4-runtime": bedrock.url, "aws-sigv4-control": bedrock.url})


# Runs in the session: one request as an AWS SDK would send it (signed, here with a made-up
# signature: the proxy drops it), read frame by frame; then one signed with the decoy file's keys.
AGENT = r"""
import glob, json, os, struct, base64, time, urllib.request, urllib.error
key, base = os.environ.get("AWS_ACCESS_KEY_ID", ""), os.environ.get("ANTHROPIC_BEDROCK_BASE_URL", "")
def send(key_id):
    date = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    auth = (f"AWS4-HMAC-SHA256 Credential={key_id}/{date[:8]}/us-east-1/bedrock/aws4_request, "
            f"SignedHeaders=content-type;host;x-amz-date, Signature={'0' * 64}")
    body = json.dumps({"anthropic_version": "bedrock-2023-05-31", "max_tokens": 16,
                       "messages": [{"role": "user", "content": "hi"}]}).encode()
    request = urllib.request.Request(base + "/model/us.anthropic.claude-fake-v1%3A0/invoke-with-response-stream",
        method="POST", data=body, headers={"Authorization": auth, "X-Amz-Date": date,
                                           "Content-Type": "application/json"})
    return urllib.request.urlopen(request, timeout=30)
arrivals, data = [], b""
with send(key) as response:
    while chunk := response.read1(65536):
        arrivals.append(time.monotonic())
        data += chunk
text = ""
while data:
    total, headers = struct.unpack(">II", data[:8])
    event = json.loads(base64.b64decode(json.loads(data[12 + headers:total - 4])["bytes"]))
    text += event.get("delta", {}).get("text", "")
    data = data[total:]
decoy_file = open(os.path.expanduser("~/.aws/credentials")).read()
decoy_id = [l.split("=")[1].strip() for l in decoy_file.splitlines() if l.startswith("aws_access_key_id")][0]
try:
    decoy = send(decoy_id).status
except urllib.error.HTTPError as e:
    decoy = e.code
""" + ENVIRONS + r"""
print(json.dumps({"key": key, "secret": os.environ.get("AWS_SECRET_ACCESS_KEY", ""), "base": base, "text": text,
                  "spread": arrivals[-1] - arrivals[0], "decoy": decoy, "environs": environs}), "AGENT-DONE",
      flush=True)
"""


@pytest.mark.timeout(1800)  # the claude_image fixture builds the image on a first run (apt, npm)
def test_a_placeholder_signed_request_reaches_bedrock_signed_by_the_host_keys(
        runtime: Runtime, user: User, scope: str, workspace: Path, bedrock: FakeBedrock, settings: str) -> None:
    bedrock.seen.clear()
    seen, inspected, stderr = run_agent(runtime, user, scope, ("--harness", "claude-code", "--backend", "bedrock",
                                        str(workspace)), AGENT, DEJIMA_SETTINGS=settings, **HOST_AWS)
    assert seen["key"].startswith("AKIA") and seen["key"] != REAL_ID and seen["secret"] != REAL_SECRET
    assert seen["base"] == "http://127.0.0.1:700/r/aws-sigv4-runtime"
    assert seen["text"] == "".join(WORDS)
    assert seen["spread"] >= DRIP_SECONDS * 5  # frames arrived one by one, not at the end
    assert seen["decoy"] == 403
    # The fake Bedrock saw one request, signed by the real key (botocore agrees), never a placeholder.
    [request] = bedrock.seen
    assert request.verdict == "" and f"Credential={REAL_ID}/" in request.headers["authorization"]
    assert seen["key"] not in json.dumps(request.headers) and seen["secret"] not in json.dumps(request.headers)
    # The real keys are nowhere the session or the engine can show them.
    for real in (REAL_SECRET, REAL_TOKEN):
        assert all(real not in env for env in seen["environs"])
        assert inspected and all(real not in text for text in inspected)
        assert real not in stderr
        for root in (user.home, workspace):
            found = subprocess.run(["grep", "-rlF", real, str(root)], capture_output=True, text=True)
            assert found.stdout == "", f"a real AWS value was written to {found.stdout}"
    session = stderr.split("dejima violations ")[-1].split()[0] if "dejima violations " in stderr else \
        stderr.split("dejima ledger ")[-1].split()[0]
    records = [json.loads(x) for x in run_dejima(user, scope, "violations", session, "--json").stdout.splitlines()]
    assert [r["kind"] for r in records] == ["decoy-used"], records


@pytest.mark.timeout(600)
def test_the_real_claude_code_cli_answers_from_the_fake_bedrock(user: User, scope: str, workspace: Path,
                                                               bedrock: FakeBedrock, settings: str) -> None:
    """The real `claude -p` with CLAUDE_CODE_USE_BEDROCK, through the bridge and the proxy: its
    AWS SDK signs with the placeholder keys, the fake Bedrock sees the host's signature."""
    bedrock.seen.clear()
    result = run_dejima(user, scope, "-q", "--harness", "claude-code", "--backend", "bedrock", str(workspace),
                        "--", "claude", "-p", "Say hello.", timeout=300, DEJIMA_SETTINGS=settings, **HOST_AWS)
    invokes = [s for s in bedrock.seen if "/invoke" in s.path]
    assert result.returncode == 0, (result.stdout[-2000:], result.stderr[-3000:], bedrock.seen)
    assert "".join(WORDS) in result.stdout
    assert invokes and all(s.verdict == "" for s in bedrock.seen), bedrock.seen
    assert all(f"Credential={REAL_ID}/" in s.headers["authorization"] for s in bedrock.seen)


def test_missing_aws_keys_are_named_and_the_agent_is_not_started_without_them(
        runtime: Runtime, user: User, scope: str, workspace: Path, settings: str) -> None:
    from dejima.core import labels

    no_keys: AwsEnv = {"AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": "", "AWS_PROFILE": "dejima-test-none"}
    with_command = run_dejima(user, scope, "--harness", "claude-code", "--backend", "bedrock", str(workspace), "--",
                              "true", DEJIMA_SETTINGS=settings, **no_keys)
    assert with_command.returncode == 0, with_command.stderr
    assert "backends/bedrock.toml credentials route 'aws-sigv4-runtime'" in with_command.stderr
    assert "aws profile dejima-test-none" in with_command.stderr and "starts without that route" in with_command.stderr
    # On a terminal, as an agent is started (without one the start is refused sooner: no terminal).
    status, printed = exit_on_a_terminal(user, scope, "--harness", "claude-code", "--backend", "bedrock",
                                         str(workspace), DEJIMA_SETTINGS=settings, **no_keys)
    assert status != 0, printed
    assert b"aws profile dejima-test-none" in printed and b"AWS_ACCESS_KEY_ID" in printed, printed
    assert containers_of(runtime, scope, role=labels.ROLE_SESSION) == []
