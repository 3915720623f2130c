"""Credential sources, resolved on the host: an environment variable, a file, a helper command.

A source is resolved once when the session starts (a missing one is a clear error naming the
manifest and the source); a helper command is run again when its value is older than
``max_age`` (tokens it prints, e.g. ``gcloud ... print-access-token``, expire). Values live in
:class:`Secret` objects, in this process's memory only.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

from dejima.core.secret import Secret
from dejima.errors import DiagnosticError

COMMAND_TIMEOUT = 15.0
COMMAND_MAX_AGE = 45 * 60.0
REFRESH_MARGIN = 5 * 60.0  # an expiring credential is renewed this long before it expires
MAX_FILE_BYTES = 64 * 1024


class CredentialError(DiagnosticError):
    """A credential source on the host cannot give its secret."""

    reference = "credential-source"


class SourceUnavailable(Exception):
    """A source failed while the proxy runs (a refresh); the proxy answers 502 with this text."""


class CredentialSource(Protocol):
    description: str  # e.g. "env GH_TOKEN": what and where, never the value

    async def current(self) -> Secret: ...


def _printable(text: str, limit: int = 300) -> str:
    clean = "".join(c if c.isprintable() else " " for c in text).strip()
    return clean if len(clean) <= limit else clean[:limit] + "…"


class FixedSource:
    """A value read once (env var, file)."""

    def __init__(self, description: str, secret: Secret) -> None:
        self.description = description
        self._secret = secret

    async def current(self) -> Secret:
        return self._secret


def _one_line(text: str, origin: str, description: str, fix: str) -> Secret:
    value = text.strip()
    if not value:
        raise CredentialError(f"{origin}: credential source {description} is empty", hint=fix)
    if "\n" in value or "\r" in value or "\0" in value:
        raise CredentialError(f"{origin}: credential source {description} holds more than one line",
                              hint="a source must give the secret alone on one line")
    return Secret(value)


def env_source(name: str, origin: str, environ: Mapping[str, str]) -> FixedSource:
    description = f"env {name}"
    if name not in environ:
        raise CredentialError(f"{origin}: credential source {description} is not set on the host",
                              hint=f"export {name}=… before starting dejima, or choose another backend/forge")
    return FixedSource(description, _one_line(environ[name], origin, description, f"set {name} to the secret"))


def file_source(path: str, origin: str, home: Path) -> FixedSource:
    description = f"file {path}"
    resolved = home / path[2:] if path.startswith("~/") else Path(path)
    try:
        with open(resolved, "rb") as handle:
            data = handle.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        raise CredentialError(f"{origin}: credential source {description} does not exist",
                              hint=f"write the secret to {resolved} (mode 0600)") from None
    except OSError as exc:
        raise CredentialError(f"{origin}: credential source {description} cannot be read: {exc.strerror}",
                              hint=f"check the permissions of {resolved}") from None
    if len(data) > MAX_FILE_BYTES:
        raise CredentialError(f"{origin}: credential source {description} is larger than {MAX_FILE_BYTES} bytes",
                              hint="the file must hold the secret alone")
    return FixedSource(description, _one_line(data.decode("utf-8", "replace"), origin, description,
                                              f"write the secret to {resolved}"))


def run_helper(argv: Sequence[str], environ: Mapping[str, str], timeout: float) -> str:
    """Run a helper command; its stdout is the secret. Raises SourceUnavailable with stderr's gist."""
    try:
        result = subprocess.run(list(argv), capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL,
                                env=dict(environ), check=False)
    except FileNotFoundError:
        raise SourceUnavailable(f"{argv[0]!r} is not installed (not found on PATH)") from None
    except subprocess.TimeoutExpired:
        raise SourceUnavailable(f"it did not finish within {timeout:g} s") from None
    except OSError as exc:
        raise SourceUnavailable(f"it could not start: {exc.strerror}") from None
    if result.returncode != 0:
        said = _printable(result.stderr.decode("utf-8", "replace"))
        raise SourceUnavailable(f"it exited with status {result.returncode}" + (f": {said}" if said else ""))
    return result.stdout.decode("utf-8", "replace")


class CommandSource:
    """A helper command's output, run again when older than ``max_age`` seconds."""

    def __init__(self, argv: Sequence[str], origin: str, environ: Mapping[str, str],
                 timeout: float = COMMAND_TIMEOUT, max_age: float = COMMAND_MAX_AGE) -> None:
        self.description = "command " + " ".join(argv)
        self._argv, self._origin, self._environ = tuple(argv), origin, dict(environ)
        self._timeout, self._max_age = timeout, max_age
        self._lock = asyncio.Lock()
        self._secret, self._at = self._run(), time.monotonic()

    def _run(self) -> Secret:
        fix = f"run `{' '.join(self._argv)}` on the host to see why"
        try:
            out = run_helper(self._argv, self._environ, self._timeout)
        except SourceUnavailable as exc:
            raise CredentialError(f"{self._origin}: credential source {self.description} failed: {exc}",
                                  hint=fix) from None
        return _one_line(out, self._origin, self.description, fix)

    async def current(self) -> Secret:
        if time.monotonic() - self._at < self._max_age:
            return self._secret
        async with self._lock:
            if time.monotonic() - self._at >= self._max_age:
                try:
                    self._secret = await asyncio.to_thread(self._run)
                except CredentialError as exc:
                    raise SourceUnavailable(exc.message) from None
                self._at = time.monotonic()
        return self._secret

