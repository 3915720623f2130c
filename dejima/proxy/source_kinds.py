"""Which source serves each kind a manifest names (``env``, ``file``, ``command``, ``claude_login``, ``aws``).

Kept apart from dejima.proxy.sources, which the kinds build on, so no module imports its own users.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from dejima.proxy.aws_source import AwsSource
from dejima.proxy.claude_login import ClaudeLoginSource
from dejima.proxy.sources import CommandSource, CredentialError, CredentialSource, env_source, file_source


def resolve_source(source: tuple[str, tuple[str, ...]], origin: str, environ: Mapping[str, str] | None = None,
                   home: Path | None = None) -> CredentialSource:
    """The source a manifest route names (``CredentialRoute.source``); ``origin`` names the manifest and route."""
    env = os.environ if environ is None else environ
    where = Path.home() if home is None else home
    kind, values = source
    if kind == "env":
        return env_source(values[0], origin, env)
    if kind == "file":
        return file_source(values[0], origin, where)
    if kind == "command":
        return CommandSource(values, origin, env)
    if kind == "claude_login":
        return ClaudeLoginSource.load(values[0] if values else "~/.claude/.credentials.json", origin, where)
    if kind == "aws":
        return AwsSource(values[0], origin, env, where)
    raise CredentialError(f"{origin}: unknown credential source kind {kind!r}",
                          hint="one of env, file, command, claude_login, aws")
