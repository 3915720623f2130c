"""The host's AWS credentials, for the proxy's SigV4 routes, read the way the AWS CLI finds them:

1. the environment: ``AWS_ACCESS_KEY_ID`` + ``AWS_SECRET_ACCESS_KEY`` (+ ``AWS_SESSION_TOKEN``,
   ``AWS_CREDENTIAL_EXPIRATION``);
2. else the profile ``AWS_PROFILE`` names (or the manifest's, usually ``default``) in the shared
   credentials file (``AWS_SHARED_CREDENTIALS_FILE``, ``~/.aws/credentials``), then the config file
   (``AWS_CONFIG_FILE``, ``~/.aws/config``): static keys, or a ``credential_process`` run on the
   host (how SSO users hand keys to tools: ``aws configure export-credentials --profile P --format process``).

SSO, assume-role and web-identity profiles are not resolved here (that needs the AWS SDK's network
calls): the error says how to give such a profile a ``credential_process``. Keys live in this
process's memory only; temporary ones are read again a few minutes before they expire.
"""

from __future__ import annotations

import asyncio
import configparser
import json
import shlex
import time
from collections.abc import Callable, Mapping
from datetime import datetime
from pathlib import Path

from dejima.core.secret import Secret
from dejima.core.sigv4 import AwsKeys
from dejima.proxy.sources import COMMAND_TIMEOUT, REFRESH_MARGIN, CredentialError, SourceUnavailable, run_helper

_ENV_KEYS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_CREDENTIAL_EXPIRATION")
_UNRESOLVED = {"sso_session": "AWS SSO", "sso_start_url": "AWS SSO", "role_arn": "an assumed role",
               "web_identity_token_file": "a web identity"}


class _Unavailable(Exception):
    """Why the chain gave no keys, and the fix."""

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.message, self.hint = message, hint


def _expiry(text: str | None, where: str) -> float | None:
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise _Unavailable(f"{where} gives an expiration that is not an ISO 8601 time: {text[:40]!r}",
                           "fix the expiration, or leave it out for keys that do not expire") from None


def _keys(key_id: str | None, secret: str | None, token: str | None, expires: str | None, where: str) -> AwsKeys:
    if not key_id or not secret:
        missing = "aws_access_key_id" if not key_id else "aws_secret_access_key"
        raise _Unavailable(f"{where} has no {missing}", "give both the key id and the secret key")
    try:
        return AwsKeys(key_id.strip(), Secret(secret.strip()), Secret(token.strip()) if token else None,
                       _expiry(expires, where))
    except ValueError:
        raise _Unavailable(f"{where} holds a value that is empty or spans lines", "one line per value") from None


def _sections(path: Path) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None, default_section="\0none")
    try:
        parser.read_string(path.read_text(encoding="utf-8"), source=str(path))
    except FileNotFoundError:
        pass
    except (OSError, UnicodeDecodeError, configparser.Error) as exc:
        raise _Unavailable(f"{path} cannot be read: {exc}", f"fix {path}") from None
    return parser


def _process_keys(command: str, where: str, environ: Mapping[str, str]) -> AwsKeys:
    """A credential_process's JSON (Version 1, AccessKeyId, SecretAccessKey, SessionToken, Expiration)."""
    try:
        out = run_helper(shlex.split(command), environ, COMMAND_TIMEOUT)
        data = json.loads(out)
    except SourceUnavailable as exc:
        raise _Unavailable(f"{where} credential_process `{command}` failed: {exc}",
                           f"run `{command}` on the host to see why (an SSO login may have expired: "
                           "aws sso login)") from None
    except (ValueError, json.JSONDecodeError):
        raise _Unavailable(f"{where} credential_process `{command}` did not print JSON",
                           "it must print {\"Version\": 1, \"AccessKeyId\": …, \"SecretAccessKey\": …}") from None
    if not isinstance(data, dict) or data.get("Version") != 1:
        raise _Unavailable(f"{where} credential_process `{command}` printed no Version 1 object",
                           "it must print {\"Version\": 1, \"AccessKeyId\": …, \"SecretAccessKey\": …}")
    key_id, secret, token, expires = (data.get(k) for k in ("AccessKeyId", "SecretAccessKey", "SessionToken",
                                                              "Expiration"))
    if not all(isinstance(f, str | None) for f in (key_id, secret, token, expires)):
        raise _Unavailable(f"{where} credential_process `{command}` printed non-string values", "fix the helper")
    return _keys(key_id, secret, token, expires, f"{where} credential_process")


def _profile_keys(profile: str, environ: Mapping[str, str], home: Path) -> AwsKeys:
    credentials = Path(environ.get("AWS_SHARED_CREDENTIALS_FILE") or home / ".aws" / "credentials").expanduser()
    config = Path(environ.get("AWS_CONFIG_FILE") or home / ".aws" / "config").expanduser()
    found = [(f"{credentials} [{profile}]", _sections(credentials), profile),
             (f"{config} [profile {profile}]", _sections(config), profile if profile == "default"
              else f"profile {profile}")]
    for where, parser, section in found:
        if not parser.has_section(section):
            continue
        values = parser[section]
        if "aws_access_key_id" in values or "aws_secret_access_key" in values:
            return _keys(values.get("aws_access_key_id"), values.get("aws_secret_access_key"),
                         values.get("aws_session_token"), None, where)
        if values.get("credential_process"):
            return _process_keys(values["credential_process"], where, environ)
        for key, what in _UNRESOLVED.items():
            if key in values:
                raise _Unavailable(
                    f"{where} uses {what} ({key}), which dejima does not resolve itself",
                    f"add `credential_process = aws configure export-credentials --profile {profile} --format "
                    f"process` to [profile {profile}] in {config} (the AWS CLI then does the {what} part)")
    raise _Unavailable(f"no AWS credentials on the host: AWS_ACCESS_KEY_ID is not set and profile {profile!r} "
                       f"is in neither {credentials} nor {config}",
                       "export AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or set AWS_PROFILE to a profile "
                       "with keys or a credential_process")


def read_aws_keys(profile: str, environ: Mapping[str, str], home: Path) -> AwsKeys:
    """The keys the AWS CLI would use on this host (environment first, then the profile)."""
    if environ.get("AWS_ACCESS_KEY_ID") or environ.get("AWS_SECRET_ACCESS_KEY"):
        return _keys(environ.get("AWS_ACCESS_KEY_ID"), environ.get("AWS_SECRET_ACCESS_KEY"),
                     environ.get("AWS_SESSION_TOKEN"), environ.get("AWS_CREDENTIAL_EXPIRATION"),
                     "the environment (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY)")
    return _profile_keys(environ.get("AWS_PROFILE") or profile, environ, home)


class AwsSource:
    """The host's AWS keys for SigV4 routes; ``current()`` gives the secret key (so the proxy can
    recognise it in a request), ``keys()`` the whole set, read again before temporary ones expire."""

    def __init__(self, profile: str, origin: str, environ: Mapping[str, str], home: Path,
                 clock: Callable[[], float] = time.time) -> None:
        self._profile, self._origin, self._home, self._clock = profile, origin, home, clock
        self._lock = asyncio.Lock()
        self.description = f"aws profile {environ.get('AWS_PROFILE') or profile} (AWS_* env, ~/.aws files)"
        self._keys = self._read(environ)
        # Kept for re-reads (files, credential_process), without the keys themselves: keys from the
        # environment are a snapshot that no re-read renews.
        self._from_env = bool(environ.get("AWS_ACCESS_KEY_ID") or environ.get("AWS_SECRET_ACCESS_KEY"))
        self._environ = {k: v for k, v in environ.items() if k not in _ENV_KEYS}

    def _read(self, environ: Mapping[str, str]) -> AwsKeys:
        try:
            keys = read_aws_keys(self._profile, environ, self._home)
        except _Unavailable as exc:
            raise CredentialError(f"{self._origin}: credential source {self.description}: {exc.message}",
                                  hint=exc.hint) from None
        if keys.expires_at is not None and keys.expires_at - self._clock() <= REFRESH_MARGIN:
            raise CredentialError(f"{self._origin}: credential source {self.description}: the keys it gives "
                                  "have expired", hint="renew them on the host (e.g. aws sso login)")
        return keys

    def _fresh(self) -> bool:
        expires = self._keys.expires_at
        return expires is None or expires - self._clock() > REFRESH_MARGIN

    async def keys(self) -> AwsKeys:
        if self._fresh():
            return self._keys
        async with self._lock:
            if not self._fresh():
                if self._from_env:
                    raise SourceUnavailable(f"{self._origin}: the AWS keys from the host's environment have "
                                            "expired; start the session again with fresh ones")
                try:
                    self._keys = await asyncio.to_thread(self._read, self._environ)
                except CredentialError as exc:
                    raise SourceUnavailable(exc.message) from None
        return self._keys

    async def current(self) -> Secret:
        return (await self.keys()).secret_access_key
