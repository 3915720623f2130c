"""The credential proxy with a real session: the agent talks to its model through the filter's
bridge and dejima's proxy, holding only a placeholder, while the real key reaches the model.

The "model" is a fake Anthropic Messages API on this host's loopback (the proxy runs in the
launcher, on the host, so that is where it connects); the session reaches it only through
127.0.0.1:700 in its namespace. Nothing leaves the machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from dejima.adapters.runtime import Runtime
from dejima.core import labels
from tests.httpfake import send_json, serving
from tests.integration.conftest import ENVIRONS, credential_settings, run_agent
from tests.integration.test_interactive import exit_on_a_terminal
from tests.world import User, containers_of, parse_json_line, run_dejima

REAL_KEY = "sk-ant-api03-" + "Zq7Vt2Lr9Xc4Nw8Pb1Ks6Hd3Fg5Jm0Yu2Ie7Oa4Ws9Rx1Tc8Vb3Nq6Lp5Kz" + "-canaryAA"
EVENTS = [("message_start", {"type": "message_start", "message": {
              "id": "msg_fake", "type": "message", "role": "assistant", "model": "claude-fake", "content": [],
              "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 3, "output_tokens": 1}}}),
          ("content_block_start", {"type": "content_block_start", "index": 0,
                                   "content_block": {"type": "text", "text": ""}}),
          *[("content_block_delta", {"type": "content_block_delta", "index": 0,
                                     "delta": {"type": "text_delta", "text": word}})
            for word in ("Hello ", "from ", "the ", "fake ", "model.")],
          ("content_block_stop", {"type": "content_block_stop", "index": 0}),
          ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                             "usage": {"output_tokens": 5}}),
          ("message_stop", {"type": "message_stop"})]
DRIP_SECONDS = 0.25  # between two streamed events: a proxy that buffers would deliver them all at the end


@dataclass
class FakeModel:
    port: int
    seen: list[dict[str, str]] = field(default_factory=list)  # the headers of every request


@pytest.fixture(scope="module")
def model() -> Iterator[FakeModel]:
    fake = FakeModel(0)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            fake.seen.append({k.lower(): v for k, v in self.headers.items()} | {"path": self.path})
            if not self.path.startswith("/v1/messages"):
                self._json(404, {"type": "error", "error": {"type": "not_found_error", "message": self.path}})
            elif self.headers.get("x-api-key") != REAL_KEY:
                self._json(401, {"type": "error", "error": {"type": "authentication_error", "message": "bad key"}})
            elif body.get("stream"):
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for name, data in EVENTS:
                    chunk = f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    self.wfile.flush()
                    time.sleep(DRIP_SECONDS)
                self.wfile.write(b"0\r\n\r\n")
            else:
                self._json(200, {"id": "msg_fake", "type": "message", "role": "assistant", "model": "claude-fake",
                                 "content": [{"type": "text", "text": "Hello from the fake model."}],
                                 "stop_reason": "end_turn", "stop_sequence": None,
                                 "usage": {"input_tokens": 3, "output_tokens": 5}})

        def _json(self, status: int, payload: dict[str, object]) -> None:
            send_json(self, status, payload)

    with serving(ThreadingHTTPServer(("127.0.0.1", 0), Handler)) as server:
        fake.port = server.server_address[1]
        yield fake


@pytest.fixture
def settings(world_dir: Path, model: FakeModel, claude_image: None) -> str:
    return credential_settings(world_dir, f"credentials-{model.port}",
                               {"anthropic-api-key": f"http://127.0.0.1:{model.port}"})


# Runs in the session: what the agent can see, and one streamed request through the proxy.
AGENT = r"""
import glob, json, os, time, urllib.request
key, base = os.environ.get("ANTHROPIC_API_KEY", ""), os.environ.get("ANTHROPIC_BASE_URL", "")
request = urllib.request.Request(base + "/v1/messages", method="POST", headers={
    "x-api-key": key, "anthropic-version": "2023-06-01", "content-type": "application/json"},
    data=json.dumps({"model": "claude-fake", "max_tokens": 16, "stream": True,
                     "messages": [{"role": "user", "content": "hi"}]}).encode())
arrivals, text = [], ""
with urllib.request.urlopen(request, timeout=30) as response:
    for line in response:
        if line.startswith(b"data:"):
            arrivals.append(time.monotonic())
            data = json.loads(line[5:])
            text += data.get("delta", {}).get("text", "")
def status(url, headers):
    try:
        return urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10).status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError as e:
        return str(e)
# The placeholder toward another route, and without the route prefix: refused at the proxy.
elsewhere = status(base.replace("anthropic-api-key", "github-api") + "/user", {"Authorization": "Bearer " + key})
""" + ENVIRONS + r"""
print(json.dumps({"key": key, "base": base, "text": text, "spread": arrivals[-1] - arrivals[0],
                  "events": len(arrivals), "elsewhere": elsewhere, "environs": environs,
                  "decoy": os.environ.get("AWS_SECRET_ACCESS_KEY", ""),
                  "aws_file": open(os.path.expanduser("~/.aws/credentials")).read()}), "AGENT-DONE", flush=True)
"""


@pytest.mark.timeout(1800)  # the claude_image fixture builds the image on a first run (apt, npm)
def test_the_agent_reaches_its_model_with_a_placeholder_and_the_key_never_enters(
        runtime: Runtime, user: User, scope: str, workspace: Path, model: FakeModel, settings: str) -> None:
    model.seen.clear()
    seen, inspected, stderr = run_agent(runtime, user, scope, ("--harness", "claude-code", str(workspace)), AGENT,
                                        DEJIMA_SETTINGS=settings, ANTHROPIC_API_KEY=REAL_KEY)
    # The agent held a placeholder shaped like a key, and reached the model through the bridge.
    assert seen["key"].startswith("sk-ant-") and seen["key"] != REAL_KEY
    assert seen["base"] == "http://127.0.0.1:700/r/anthropic-api-key"
    assert seen["text"] == "Hello from the fake model."
    # Streamed event by event: the first reached the agent well before the last was sent.
    assert seen["events"] == len(EVENTS) and seen["spread"] >= DRIP_SECONDS * (len(EVENTS) - 2)
    assert seen["elsewhere"] in (401, 403, 404), seen["elsewhere"]
    # The model saw the real key, never the placeholder.
    assert [h["x-api-key"] for h in model.seen] == [REAL_KEY]
    assert seen["decoy"] and "aws_secret_access_key" in seen["aws_file"]  # decoys planted
    # The real key is nowhere the session or the engine can show it.
    assert all(REAL_KEY not in env for env in seen["environs"])
    assert inspected and all(REAL_KEY not in text for text in inspected)
    assert REAL_KEY not in stderr and "request(s) through the credential proxy" in stderr
    for root in (user.home, workspace):
        found = subprocess.run(["grep", "-rlF", REAL_KEY, str(root)], capture_output=True, text=True)
        assert found.stdout == "", f"the real key was written to {found.stdout}"
    session = stderr.split("dejima ledger ")[-1].split()[0]
    listed = run_dejima(user, scope, "ledger", session, "--json").stdout
    ledger = [json.loads(line) for line in listed.splitlines()]
    assert [(e["route"], e["method"], e["status"]) for e in ledger][:1] == [("anthropic-api-key", "POST", 200)]


def test_a_placeholder_in_a_dns_name_is_refused_and_recorded(user: User, scope: str, workspace: Path,
                                                             settings: str) -> None:
    script = ('import os, socket, json\nkey = os.environ["ANTHROPIC_API_KEY"]\nlabel = key[-30:].lower()'
              '.replace("_", "-").strip("-")\n'
              'try:\n    socket.getaddrinfo(label + ".api.anthropic.com", 443); r = "resolved"\n'
              'except socket.gaierror: r = "refused"\nprint(json.dumps({"result": r}))')
    result = run_dejima(user, scope, "--harness", "claude-code", str(workspace), "--", "python3", "-c", script,
                        DEJIMA_SETTINGS=settings, ANTHROPIC_API_KEY=REAL_KEY)
    assert result.returncode == 0, result.stderr
    assert parse_json_line(result.stdout) == {"result": "refused"}
    session = result.stderr.split("dejima violations ")[-1].split()[0]
    listed = run_dejima(user, scope, "violations", session, "--json").stdout
    records = [json.loads(line) for line in listed.splitlines()]
    assert any(r["kind"] == "canary" for r in records), records


def test_a_missing_source_is_named_and_the_agent_is_not_started_without_it(
        runtime: Runtime, user: User, scope: str, workspace: Path, settings: str) -> None:
    # With a command, the route is left out and the session starts, saying so.
    with_command = run_dejima(user, scope, "--harness", "claude-code", str(workspace), "--", "true",
                              DEJIMA_SETTINGS=settings, ANTHROPIC_API_KEY="")
    assert with_command.returncode == 0, with_command.stderr
    assert "backends/anthropic.toml" in with_command.stderr and "ANTHROPIC_API_KEY" in with_command.stderr
    assert "starts without that route" in with_command.stderr
    # The agent itself needs its model: no session at all, and the message names the source.
    # On a terminal, as an agent is started (without one the start is refused sooner: no terminal).
    status, printed = exit_on_a_terminal(user, scope, "--harness", "claude-code", str(workspace),
                                         DEJIMA_SETTINGS=settings, ANTHROPIC_API_KEY="")
    assert status != 0
    assert b"ANTHROPIC_API_KEY" in printed, printed
    assert containers_of(runtime, scope, role=labels.ROLE_SESSION) == []


@pytest.mark.timeout(600)
def test_the_real_claude_code_cli_answers_from_the_fake_model(user: User, scope: str, workspace: Path,
                                                             model: FakeModel, settings: str) -> None:
    """The real `claude -p`, headless, through the bridge and the proxy: it prints the fake reply,
    and the fake API saw only the real key."""
    model.seen.clear()
    result = run_dejima(user, scope, "-q", "--harness", "claude-code", str(workspace), "--",
                        "claude", "-p", "Say hello.", timeout=300, DEJIMA_SETTINGS=settings,
                        ANTHROPIC_API_KEY=REAL_KEY)
    assert result.returncode == 0, (result.stdout[-2000:], result.stderr[-3000:], model.seen)
    assert "Hello from the fake model." in result.stdout
    keys = {h.get("x-api-key") for h in model.seen if h["path"].startswith("/v1/messages")}
    assert keys == {REAL_KEY}, keys


GIT_SESSION = r"""
set -u
export HOME=/tmp/h; mkdir -p $HOME; git config --global user.email a@b; git config --global user.name agent
git clone -q https://github.com/owner/repo.git /tmp/c && cd /tmp/c || exit 3
echo change >> README && git commit -qam change
git push -q origin HEAD:refs/heads/feature 2>&1 && echo "PUSH-FEATURE ok"
git commit -q --amend -m rewritten
git push -q --force origin HEAD:refs/heads/feature 2>&1; echo "PUSH-FORCE $?"
git push -q origin HEAD:main 2>&1; echo "PUSH-MAIN $?"
git push -q https://github.com/other/repo.git HEAD:refs/heads/x 2>&1; echo "PUSH-OTHER $?"
python3 - <<'PY' 2>&1
# What an agent with an HTTP client of its own tries: the same push to main, its service name encoded.
import os, subprocess, urllib.request
key = next(k for k in os.environ if k.startswith("GIT_CONFIG_KEY_") and os.environ[k].endswith(".extraHeader"))
name, _, value = os.environ[key.replace("KEY", "VALUE")].partition(": ")
rev = lambda r: subprocess.run(["git", "rev-parse", r], capture_output=True, text=True).stdout.strip()
old, new = rev("origin/main"), rev("HEAD")
pack = subprocess.run(["git", "pack-objects", "--stdout", "--revs", "-q"], input=f"{new}\n^{old}\n".encode(),
                      capture_output=True).stdout
line = f"{old} {new} refs/heads/main\0report-status\n".encode()
request = urllib.request.Request("http://127.0.0.1:700/r/github-git/owner/repo.git/git%2Dreceive%2Dpack",
                                 data=b"%04x" % (len(line) + 4) + line + b"0000" + pack,
                                 headers={name: value, "Content-Type": "application/x-git-receive-pack-request"})
try:
    print("PUSH-ENCODED", urllib.request.urlopen(request, timeout=30).read())
except Exception as e:
    print("PUSH-ENCODED", e)
PY
env | grep -c "$0" || true
"""


def test_git_clones_and_pushes_through_the_proxy_and_its_push_rules_hold(
        user: User, scope: str, workspace: Path, world_dir: Path) -> None:
    from tests.unit.proxy.gitworld import fake_forge, git

    token = "ghp_" + "R3alT0kenThatMustNeverEnterTheSession0001"
    git("init", "-q", "-b", "main", str(workspace))
    git("-c", "safe.directory=*", "remote", "add", "origin", "https://github.com/owner/repo.git", cwd=workspace)
    if os.getuid() == 0:
        subprocess.run(["chown", "-R", f"{user.uid}:{user.gid}", str(workspace)], check=True)
    with fake_forge(world_dir / f"forge-{os.urandom(3).hex()}") as forge:
        bare = forge.root / "owner" / "repo.git"
        main_before = git("rev-parse", "refs/heads/main", cwd=bare).stdout
        settings = world_dir / f"forge-{forge.url.rsplit(':', 1)[1]}.toml"
        settings.write_text(f'[credentials]\nupstreams = {{ "github-git" = "{forge.url}" }}\n')
        settings.chmod(0o644)
        result = run_dejima(user, scope, str(workspace), "--", "sh", "-c", GIT_SESSION, token,
                            DEJIMA_SETTINGS=str(settings), GH_TOKEN=token)
    out = result.stdout + result.stderr
    assert "PUSH-FEATURE ok" in out, out[-3000:]
    assert "PUSH-FORCE 1" in out and "not a fast-forward" in out, out[-3000:]
    assert "PUSH-MAIN 1" in out and "default branch" in out, out[-3000:]
    assert "PUSH-OTHER 0" not in out and "PUSH-OTHER" in out, out[-3000:]
    assert "ng refs/heads/main pushing to the default branch (main) is not allowed" in out.split("PUSH-ENCODED")[1]
    assert git("rev-parse", "refs/heads/main", cwd=bare).stdout == main_before  # the forge decodes; nothing moved
    assert token not in result.stdout  # the session's env held no token: grep counted 0
    assert result.stdout.strip().splitlines()[-1] == "0"
    seen = {a for a in forge.auth_seen if a}
    assert seen and all(base64_user_token(a) == ("x-access-token", token) for a in seen), seen


def base64_user_token(header: str) -> tuple[str, str]:
    import base64

    user, _, password = base64.b64decode(header.split()[1]).decode().partition(":")
    return user, password
