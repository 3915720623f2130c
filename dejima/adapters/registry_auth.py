"""The registry credentials the docker CLI would use to pull an image, as the engine's X-Registry-Auth header.

Read as the CLI reads them: ``$DOCKER_CONFIG/config.json`` (default ``~/.docker/config.json``); a
registry's ``credHelpers`` entry, else the ``credsStore``, runs ``docker-credential-<name> get``
with the registry on its input; else ``auths`` holds ``user:password`` in base64. No credentials:
the pull is anonymous (public images need none). A helper that fails is said in the pull's error.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

DOCKER_HUB = "https://index.docker.io/v1/"  # the key the docker CLI files Docker Hub's credentials under
HELPER_TIMEOUT = 30.0


@dataclass(frozen=True, slots=True)
class Auth:
    header: dict[str, str] = field(default_factory=dict)  # {"X-Registry-Auth": ...}, or empty: anonymous
    note: str = ""  # why credentials that exist could not be used, for the pull's error


def registry_of(ref: str) -> str:
    """The registry an image reference names: its first part when that is a host, else Docker Hub."""
    first, slash, _ = ref.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost"):
        return first
    return DOCKER_HUB


def _config(environ: Mapping[str, str]) -> dict[str, object]:
    directory = environ.get("DOCKER_CONFIG") or str(Path.home() / ".docker")
    try:
        found = json.loads((Path(directory) / "config.json").read_text())
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def _from_helper(helper: str, registry: str) -> tuple[dict[str, str] | None, str]:
    command = f"docker-credential-{helper}"
    try:
        result = subprocess.run([command, "get"], input=registry, capture_output=True, text=True,
                                timeout=HELPER_TIMEOUT, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"the credential helper {command} could not run: {exc}"
    if result.returncode != 0:
        if "credentials not found" in result.stdout + result.stderr:
            return None, ""  # nothing stored for this registry: anonymous, as the CLI does
        return None, f"the credential helper {command} failed: {(result.stderr or result.stdout).strip()[:200]}"
    try:
        answer = json.loads(result.stdout)
        username, secret = str(answer["Username"]), str(answer["Secret"])
    except (ValueError, KeyError, TypeError):
        return None, f"the credential helper {command} answered something other than credentials"
    if username == "<token>":
        return {"identitytoken": secret, "serveraddress": registry}, ""
    return {"username": username, "password": secret, "serveraddress": registry}, ""


def header_for(ref: str, environ: Mapping[str, str] = os.environ) -> Auth:
    """The X-Registry-Auth header for pulling ``ref``, from the docker CLI's configuration."""
    registry = registry_of(ref)
    config = _config(environ)
    helpers = config.get("credHelpers")
    helper = (helpers.get(registry) if isinstance(helpers, dict) else None) or config.get("credsStore")
    credentials: dict[str, str] | None = None
    note = ""
    if isinstance(helper, str) and helper:
        credentials, note = _from_helper(helper, registry)
    else:
        auths = config.get("auths")
        entry = auths.get(registry) if isinstance(auths, dict) else None
        encoded = entry.get("auth") if isinstance(entry, dict) else None
        if isinstance(encoded, str) and encoded:
            try:
                username, _, password = base64.b64decode(encoded).decode().partition(":")
                credentials = {"username": username, "password": password, "serveraddress": registry}
            except ValueError:
                note = f"the docker configuration's credentials for {registry} are not base64 user:password"
    if credentials is None:
        return Auth(note=note)
    return Auth({"X-Registry-Auth": base64.urlsafe_b64encode(json.dumps(credentials).encode()).decode()})
