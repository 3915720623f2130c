"""The TLS fallback with a real session: tools that take no base URL reach https://api.github.com as
they always do, trusting only what the environment's variables name, and hold only a placeholder.

The filter's resolver answers api.github.com with 127.0.0.1, the filter relays 127.0.0.1:443 to the
proxy's TLS socket, the proxy answers with a leaf of the session CA, swaps the placeholder and
forwards to a fake GitHub API on this host's loopback (the route's upstream, overridden in the
settings; its certificate is verified against a test CA given as extra_ca_file). Nothing leaves
the machine.
"""

from __future__ import annotations

import json
import os
import ssl
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from dejima.adapters.runtime import Runtime
from tests.httpfake import send_json, serving
from tests.integration.conftest import ENVIRONS, credential_settings, run_agent
from tests.unit.proxy.fakes import make_test_ca
from tests.world import User, run_dejima

TOKEN = "ghp_" + "Tl5FallbackRealTokenNeverInSession0042"
OTHER_TOKEN = "glpat-" + "OtherForgeRealTokenNeverInSession42"


@dataclass
class FakeGitHub:
    port: int
    ca: Path
    seen: list[tuple[str, str, str]] = field(default_factory=list)  # (method, path, authorization)


@pytest.fixture(scope="module")
def github(world_dir: Path) -> Iterator[FakeGitHub]:
    directory = world_dir / f"github-ca-{os.urandom(3).hex()}"
    directory.mkdir()
    ca, leaf, key = make_test_ca(directory)
    ca.chmod(0o644)
    fake = FakeGitHub(0, ca)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def _answer(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            fake.seen.append((self.command, self.path, self.headers.get("Authorization", "")))
            ok = self.headers.get("Authorization") == f"Bearer {TOKEN}"
            send_json(self, 200 if ok else 401, {"login": "octocat", "id": 1} if ok else {"message": "Bad credentials"},
                      "application/json; charset=utf-8")

        do_GET = do_POST = _answer  # noqa: N815 - the stdlib's names

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(leaf), str(key))
    server.socket = context.wrap_socket(server.socket, server_side=True)
    with serving(server):
        fake.port = server.server_address[1]
        yield fake


@pytest.fixture
def github_workspace(workspace: Path, user: User) -> Path:
    """A workspace whose remote is on github.com, so the github forge (and its intercepted API) applies."""
    from tests.unit.proxy.gitworld import git

    git("init", "-q", "-b", "main", str(workspace))
    git("-c", "safe.directory=*", "remote", "add", "origin", "https://github.com/owner/repo.git", cwd=workspace)
    if os.getuid() == 0:
        subprocess.run(["chown", "-R", f"{user.uid}:{user.gid}", str(workspace)], check=True)
    return workspace


OTHER_FORGE = """schema = 1
description = "a second forge, so that the session holds a placeholder of another route"
[detect]
remote_hosts = ["forge.test"]
[[credentials]]
name = "other-forge-api"
upstream = "https://api.forge.test"
header = "Authorization"
scheme = "Bearer"
source = { env = "OTHER_FORGE_TOKEN" }
placeholder_env = "OTHER_FORGE_TOKEN"
"""


@pytest.fixture
def other_forge(user: User) -> Iterator[str]:
    """A user manifest (no image packages: the session image stays the github one), used with --forge."""
    path = user.home / ".config" / "dejima" / "forges" / "other-forge.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(OTHER_FORGE)
    if os.getuid() == 0:
        for item in (user.home / ".config", user.home / ".config" / "dejima", path.parent, path):
            os.chown(item, user.uid, user.gid)
    yield "other-forge"
    path.unlink()


@pytest.fixture
def settings(world_dir: Path, github: FakeGitHub) -> str:
    upstream = f"https://127.0.0.1:{github.port}"
    return credential_settings(world_dir, f"tls-{github.port}", {"github-api": upstream, "github-uploads": upstream},
                               f'extra_ca_file = "{github.ca}"\n')


# Runs in the session, as the agent: three clients that know nothing of dejima, then the hostile part.
AGENT = r"""
import glob, json, os, socket, ssl, subprocess, urllib.error, urllib.request
token = os.environ["GH_TOKEN"]
out = {"token": token, "address": socket.gethostbyname("api.github.com"),
       "vars": {k: os.environ.get(k) for k in ("SSL_CERT_FILE", "CURL_CA_BUNDLE", "NODE_EXTRA_CA_CERTS")}}
def fetch(url):
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers={"Authorization": "token " + token}),
                                    timeout=20) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")
    except OSError as e:
        return 0, repr(e)
out["python"] = fetch("https://api.github.com/user")
curl = subprocess.run(["curl", "-sS", "-H", "Authorization: token " + token, "https://api.github.com/user"],
                      capture_output=True, text=True, timeout=60)
out["curl"] = [curl.returncode, curl.stdout, curl.stderr]
try:
    gh = subprocess.run(["gh", "api", "/user"], capture_output=True, text=True, timeout=60)
    out["gh"] = [gh.returncode, gh.stdout, gh.stderr]
except FileNotFoundError:
    out["gh"] = None
def handshake(name):
    try:
        with socket.create_connection(("127.0.0.1", 443), timeout=10) as raw:
            with ssl.create_default_context().wrap_socket(raw, server_hostname=name):
                return "connected"
    except ssl.SSLError as e:  # the alert, or the end of the relayed connection after it
        return "tls-refused"
    except OSError as e:
        return type(e).__name__
out["sni"] = {name: handshake(name) for name in ("evil.example", "api.github.com")}
out["uploads"] = fetch("https://uploads.github.com/repos/owner/repo/releases/1/assets?name=x")[0]
token = os.environ["OTHER_FORGE_TOKEN"]  # another route's placeholder toward the intercepted host
out["other"] = fetch("https://api.github.com/user")[0]
token = os.environ["AWS_ACCESS_KEY_ID"]  # a decoy
out["decoy"] = fetch("https://api.github.com/user")[0]
try:
    socket.socket().bind(("127.0.0.1", 443)); out["bind"] = "bound"
except OSError as e:
    out["bind"] = e.errno
""" + ENVIRONS + r"""
out["environs"] = environs
print(json.dumps(out), "AGENT-DONE", flush=True)
"""


@pytest.mark.timeout(1500)  # a first run builds the github forge's session image (gh from Debian)
def test_tools_reach_the_intercepted_api_with_a_placeholder_and_the_ca_key_stays_out(
        runtime: Runtime, user: User, scope: str, github_workspace: Path, github: FakeGitHub,
        settings: str, other_forge: str) -> None:
    forge = ("--forge", other_forge)
    built = run_dejima(user, scope, "-q", *forge, str(github_workspace), "--", "true", timeout=1200,
                       DEJIMA_SETTINGS=settings, GH_TOKEN=TOKEN, OTHER_FORGE_TOKEN=OTHER_TOKEN)
    assert built.returncode == 0, built.stderr[-3000:]
    github.seen.clear()
    seen, inspected, stderr = run_agent(runtime, user, scope, (*forge, str(github_workspace)), AGENT, timeout=180,
                                        DEJIMA_SETTINGS=settings, GH_TOKEN=TOKEN, OTHER_FORGE_TOKEN=OTHER_TOKEN)
    # The session holds a placeholder shaped like a token; api.github.com is the filter's relay.
    assert seen["token"].startswith("ghp_") and seen["token"] != TOKEN
    assert seen["address"] == "127.0.0.1"
    assert seen["vars"]["SSL_CERT_FILE"] == "/home/dejima/.dejima/tls/ca-bundle.pem"
    # Python and curl, trusting only what the variables name, got the fake's answer.
    assert seen["python"][0] == 200 and json.loads(seen["python"][1])["login"] == "octocat", seen["python"]
    assert seen["curl"][0] == 0 and json.loads(seen["curl"][1])["login"] == "octocat", seen["curl"]
    print("gh:", seen["gh"])
    if seen["gh"] is not None:  # the github forge's image carries gh (Debian's package)
        assert seen["gh"][0] == 0 and json.loads(seen["gh"][1])["login"] == "octocat", seen["gh"]
    # gh's one token serves the uploads host too (both routes take GH_TOKEN's placeholder).
    assert seen["uploads"] == 200
    # The fake saw the real token only: python, curl, gh and the upload; nothing else reached it.
    assert [p for _m, p, _a in github.seen].count("/user") == (3 if seen["gh"] is not None else 2), github.seen
    assert {auth for _m, _p, auth in github.seen} == {f"Bearer {TOKEN}"}, github.seen
    # Hostile: an unmarked name gets no TLS (control: the marked one does), another route's
    # placeholder and a decoy toward the intercepted host are refused, the relay's port cannot be taken.
    assert seen["sni"] == {"evil.example": "tls-refused", "api.github.com": "connected"}, seen["sni"]
    assert seen["other"] == 403 and seen["decoy"] == 403
    assert len(github.seen) == (4 if seen["gh"] is not None else 3)
    assert seen["bind"] == 13  # EACCES: 443 is below the namespace's unprivileged-port floor
    # The real token and the CA's key are nowhere the session or the engine can show them.
    assert seen["environs"] and not any(t in env for env in seen["environs"] for t in (TOKEN, OTHER_TOKEN,
                                                                                       "PRIVATE KEY"))
    assert inspected and all(t not in text for text in inspected for t in (TOKEN, OTHER_TOKEN, "PRIVATE KEY"))
    for root in (user.home, github_workspace):
        found = subprocess.run(["grep", "-rlE", f"PRIVATE KEY|{TOKEN}|{OTHER_TOKEN}", str(root)], capture_output=True,
                               text=True)
        assert found.stdout == "", f"a key or the token was written to {found.stdout}"
    homes = list(user.home.glob("**/.dejima/tls/ca-bundle.pem"))
    assert homes and all(p.read_text().count("BEGIN CERTIFICATE") > 10 for p in homes)  # system CAs + session CA
    session = stderr.split("dejima ledger ")[-1].split()[0]
    records = [json.loads(x) for x in run_dejima(user, scope, "violations", session, "--json").stdout.splitlines()]
    kinds = [r["kind"] for r in records]
    assert {"tls-name-refused", "placeholder-cross-route", "decoy-used"} <= set(kinds), records
    ledger = [json.loads(x) for x in run_dejima(user, scope, "ledger", session, "--json").stdout.splitlines()]
    assert ("github-api", "GET", 200) in [(e["route"], e["method"], e["status"]) for e in ledger]
