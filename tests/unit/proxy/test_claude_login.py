"""The host's Claude Code login: the access token is used as is, re-read, or refreshed against a fake endpoint."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from dejima.proxy.claude_login import CLIENT_ID, ClaudeLoginSource
from dejima.proxy.source_kinds import resolve_source
from dejima.proxy.sources import CredentialError, SourceUnavailable
from tests.httpfake import serving

ORIGIN = "harnesses/claude-code.toml credentials[0] (claude-login)"


class TokenEndpoint:
    def __init__(self) -> None:
        self.seen: list[dict[str, object]] = []
        self.status = 200
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                endpoint.seen.append(body)
                answer = json.dumps({"access_token": f"sk-ant-oat01-new{len(endpoint.seen)}",
                                     "refresh_token": f"sk-ant-ort01-new{len(endpoint.seen)}",
                                     "expires_in": 3600}).encode()
                self.send_response(endpoint.status)
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/v1/oauth/token"


@pytest.fixture
def endpoint() -> Iterator[TokenEndpoint]:
    ep = TokenEndpoint()
    with serving(ep.server):
        yield ep


def write_login(home: Path, access: str, expires_in: float, refresh: str | None = "sk-ant-ort01-old") -> Path:
    path = home / ".claude" / ".credentials.json"
    path.parent.mkdir(exist_ok=True)
    oauth: dict[str, object] = {"accessToken": access, "expiresAt": int((time.time() + expires_in) * 1000),
                                "scopes": ["user:inference"], "subscriptionType": "max"}
    if refresh:
        oauth["refreshToken"] = refresh
    path.write_text(json.dumps({"claudeAiOauth": oauth, "other": 1}))
    path.chmod(0o600)
    return path


def current(source: ClaudeLoginSource) -> str:
    return asyncio.run(source.current()).reveal()


def test_a_fresh_token_is_used_without_refresh(tmp_path: Path, endpoint: TokenEndpoint) -> None:
    write_login(tmp_path, "sk-ant-oat01-fresh", 3600)
    source = ClaudeLoginSource.load("~/.claude/.credentials.json", ORIGIN, tmp_path, endpoint.url)
    assert current(source) == "sk-ant-oat01-fresh" and endpoint.seen == []


def test_an_expired_token_is_refreshed_and_written_back(tmp_path: Path, endpoint: TokenEndpoint) -> None:
    path = write_login(tmp_path, "sk-ant-oat01-old", -10)
    source = ClaudeLoginSource.load("~/.claude/.credentials.json", ORIGIN, tmp_path, endpoint.url)
    assert current(source) == "sk-ant-oat01-new1"
    assert endpoint.seen == [{"grant_type": "refresh_token", "refresh_token": "sk-ant-ort01-old",
                              "client_id": CLIENT_ID}]
    saved = json.loads(path.read_text())
    assert saved["other"] == 1 and saved["claudeAiOauth"]["refreshToken"] == "sk-ant-ort01-new1"
    assert saved["claudeAiOauth"]["scopes"] == ["user:inference"]
    assert saved["claudeAiOauth"]["expiresAt"] > (time.time() + 3000) * 1000
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert current(source) == "sk-ant-oat01-new1" and len(endpoint.seen) == 1  # now fresh


def test_concurrent_requests_refresh_once(tmp_path: Path, endpoint: TokenEndpoint) -> None:
    write_login(tmp_path, "sk-ant-oat01-old", -10)
    source = ClaudeLoginSource.load("~/.claude/.credentials.json", ORIGIN, tmp_path, endpoint.url)

    async def many() -> set[str]:
        return {s.reveal() for s in await asyncio.gather(*(source.current() for _ in range(8)))}

    assert asyncio.run(many()) == {"sk-ant-oat01-new1"} and len(endpoint.seen) == 1


def test_a_token_the_host_refreshed_is_reread(tmp_path: Path, endpoint: TokenEndpoint) -> None:
    write_login(tmp_path, "sk-ant-oat01-old", -10)
    source = ClaudeLoginSource.load("~/.claude/.credentials.json", ORIGIN, tmp_path, endpoint.url)
    write_login(tmp_path, "sk-ant-oat01-by-host", 3600)
    assert current(source) == "sk-ant-oat01-by-host" and endpoint.seen == []


def test_a_refused_refresh_says_to_log_in_again(tmp_path: Path, endpoint: TokenEndpoint) -> None:
    endpoint.status = 400
    write_login(tmp_path, "sk-ant-oat01-old", -10)
    source = ClaudeLoginSource.load("~/.claude/.credentials.json", ORIGIN, tmp_path, endpoint.url)
    with pytest.raises(SourceUnavailable, match="HTTP 400.*log in again"):
        current(source)


def test_expired_without_refresh_token(tmp_path: Path, endpoint: TokenEndpoint) -> None:
    write_login(tmp_path, "sk-ant-oat01-old", -10, refresh=None)
    source = ClaudeLoginSource.load("~/.claude/.credentials.json", ORIGIN, tmp_path, endpoint.url)
    with pytest.raises(SourceUnavailable, match="no refresh token"):
        current(source)


def test_missing_login_names_the_file_and_the_manifest(tmp_path: Path) -> None:
    with pytest.raises(CredentialError) as err:
        resolve_source(("claude_login", ("~/.claude/.credentials.json",)), ORIGIN, {}, tmp_path)
    assert ORIGIN in err.value.message and ".credentials.json does not exist" in err.value.message


def test_a_file_without_oauth_is_refused(tmp_path: Path) -> None:
    (tmp_path / "c.json").write_text(json.dumps({"primaryApiKey": "x"}))
    with pytest.raises(CredentialError, match="no claudeAiOauth.accessToken"):
        ClaudeLoginSource.load(str(tmp_path / "c.json"), ORIGIN, tmp_path)
