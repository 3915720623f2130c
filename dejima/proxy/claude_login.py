"""The host user's own Claude Code login as a credential source (subscription users have no API key).

Claude Code keeps its OAuth tokens in ``~/.claude/.credentials.json``::

    {"claudeAiOauth": {"accessToken": "sk-ant-oat01-…", "refreshToken": "sk-ant-ort01-…",
                       "expiresAt": 1747909518727, "scopes": […], "subscriptionType": "…"}}

(``expiresAt`` in milliseconds). The access token is sent as ``Authorization: Bearer``. When it is
about to expire the proxy first re-reads the file (the host's own ``claude`` may have refreshed it),
then refreshes it itself: ``POST {grant_type: refresh_token, refresh_token, client_id}`` as JSON to
the token endpoint, answered with ``access_token``, ``expires_in`` and usually a new
``refresh_token``. Refresh tokens rotate, so the new pair is written back to the file (atomically,
mode 0600, other keys kept), or the host's own login would stop working.
"""

from __future__ import annotations

import asyncio
import json
import os
import ssl
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from dejima.core.secret import Secret
from dejima.proxy.sources import REFRESH_MARGIN, CredentialError, SourceUnavailable

TOKEN_ENDPOINT = "https://console.anthropic.com/v1/oauth/token"
CLIENT_ID = "9d1c250a-e61b-44d9-88ed-5944d1962f5e"  # Claude Code's public OAuth client
REFRESH_TIMEOUT = 20.0


@dataclass(slots=True)
class _Tokens:
    access: Secret
    refresh: Secret | None
    expires_at: float | None  # seconds since the epoch


def _read(path: Path, origin: str) -> tuple[dict[str, object], _Tokens]:
    fix = "log in on the host with `claude` (then /login), or use an API key (ANTHROPIC_API_KEY)"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CredentialError(f"{origin}: credential source claude login: {path} does not exist", hint=fix) from None
    except (OSError, ValueError) as exc:
        raise CredentialError(f"{origin}: credential source claude login: {path} is unreadable ({exc})",
                              hint=fix) from None
    oauth = data.get("claudeAiOauth") if isinstance(data, dict) else None
    if not isinstance(oauth, dict) or not isinstance(oauth.get("accessToken"), str) or not oauth["accessToken"]:
        raise CredentialError(f"{origin}: credential source claude login: {path} holds no claudeAiOauth.accessToken",
                              hint=fix)
    refresh = oauth.get("refreshToken")
    expires = oauth.get("expiresAt")
    return data, _Tokens(Secret(oauth["accessToken"]), Secret(refresh) if isinstance(refresh, str) and refresh
                         else None, expires / 1000.0 if isinstance(expires, (int, float)) else None)


def _post_refresh(endpoint: str, refresh: Secret, cafile: str | None, timeout: float) -> dict[str, object]:
    body = json.dumps({"grant_type": "refresh_token", "refresh_token": refresh.reveal(),
                       "client_id": CLIENT_ID}).encode()
    request = urllib.request.Request(endpoint, data=body, method="POST",
                                     headers={"Content-Type": "application/json", "Accept": "application/json"})
    context = ssl.create_default_context()
    if cafile:
        context.load_verify_locations(cafile=cafile)
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
            answer = json.loads(response.read(1024 * 1024))
    except urllib.error.HTTPError as exc:
        raise SourceUnavailable(f"the token endpoint refused the refresh (HTTP {exc.code}); "
                                "log in again on the host with `claude`") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise SourceUnavailable(f"the token endpoint could not be reached or answered badly: {exc}") from None
    if not isinstance(answer, dict) or not isinstance(answer.get("access_token"), str):
        raise SourceUnavailable("the token endpoint's answer holds no access_token")
    return answer


def _write_back(path: Path, data: dict[str, object], tokens: _Tokens) -> None:
    oauth = dict(data.get("claudeAiOauth") or {})  # type: ignore[call-overload]
    oauth["accessToken"] = tokens.access.reveal()
    if tokens.refresh is not None:
        oauth["refreshToken"] = tokens.refresh.reveal()
    if tokens.expires_at is not None:
        oauth["expiresAt"] = int(tokens.expires_at * 1000)
    text = json.dumps({**data, "claudeAiOauth": oauth})
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".credentials.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class ClaudeLoginSource:
    """The access token of the host's Claude Code login, refreshed on the host when it expires."""

    def __init__(self, path: Path, origin: str, endpoint: str = TOKEN_ENDPOINT, cafile: str | None = None,
                 clock: object = time.time) -> None:
        self.description = f"claude login {path}"
        self._path, self._origin, self._endpoint, self._cafile = path, origin, endpoint, cafile
        self._clock = clock
        self._data, self._tokens = _read(path, origin)
        self._lock = asyncio.Lock()

    @classmethod
    def load(cls, path: str, origin: str, home: Path, endpoint: str = TOKEN_ENDPOINT,
             cafile: str | None = None) -> ClaudeLoginSource:
        return cls(home / path[2:] if path.startswith("~/") else Path(path), origin, endpoint, cafile)

    def _now(self) -> float:
        return float(self._clock())  # type: ignore[operator]

    def _fresh(self) -> bool:
        expires = self._tokens.expires_at
        return expires is None or expires - self._now() > REFRESH_MARGIN

    async def current(self) -> Secret:
        if self._fresh():
            return self._tokens.access
        async with self._lock:
            if not self._fresh():
                await asyncio.to_thread(self._renew)
        return self._tokens.access

    def _renew(self) -> None:
        try:
            self._data, self._tokens = _read(self._path, self._origin)
        except CredentialError as exc:
            raise SourceUnavailable(exc.message) from None
        if self._fresh():
            return  # the host's own claude refreshed it
        if self._tokens.refresh is None:
            raise SourceUnavailable("the Claude login has expired and holds no refresh token; "
                                    "log in again on the host with `claude`")
        answer = _post_refresh(self._endpoint, self._tokens.refresh, self._cafile, REFRESH_TIMEOUT)
        lifetime = answer.get("expires_in")
        refresh = answer.get("refresh_token")
        self._tokens = _Tokens(
            Secret(str(answer["access_token"])),
            Secret(refresh) if isinstance(refresh, str) and refresh else self._tokens.refresh,
            self._now() + float(lifetime) if isinstance(lifetime, (int, float)) else None,
        )
        _write_back(self._path, self._data, self._tokens)
