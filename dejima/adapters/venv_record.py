"""The session image's record of what a Python environment's own files are (core/audit/venv_facts.py):
made once per image by a throwaway container of that image (no network) running
venv_probe_script.py with the image's python3, kept in the host user's state
(``$XDG_STATE_HOME/dejima/audit/venv/<image id>.json``, mode 0700, never mounted into a container:
the session can write neither the image nor this), read by the exit audit of every session that ran
on that image. What ensurepip seeded is read here from the wheels' bytes, hashed here."""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import zipfile
from pathlib import Path

from dejima.adapters import host, packaged
from dejima.adapters.engine import APIError
from dejima.adapters.runtime import Runtime
from dejima.adapters.wheel_cache import wheel_entries
from dejima.core import labels
from dejima.core.audit.model import Artifact
from dejima.core.audit.python_verify import bytecode_form
from dejima.core.audit.venv_facts import VenvFacts, from_document, from_probe, to_document
from dejima.core.plan import ContainerSpec
from dejima.errors import EngineError

PROBE_TIMEOUT = 300  # seconds: three environments, one with pip installed in it


def records_dir() -> Path:
    return host.state_dir() / "audit" / "venv"


def _path(image_id: str, directory: Path | None) -> Path:
    return (directory or records_dir()) / f"{image_id.removeprefix('sha256:')}.json"


def facts_of(image_id: str, output: str) -> VenvFacts:
    """The facts in the probe script's output (its last line), the seed wheels hashed and read here,
    the bytecode ensurepip compiled kept as what its path and the writing process do not decide (one
    not read is not kept: the audit cannot verify it that way)."""
    document = json.loads(output.strip().rpartition("\n")[2])
    seeds: dict[str, tuple[str, Artifact]] = {}
    for made in document.get("tools", {}).values():
        made["bytecode"] = {path: form for path, data in made.get("bytecode", {}).items()
                            if (form := bytecode_form(base64.b64decode(data), path)) is not None}
        for seed in made.get("seeds", []):
            data = base64.b64decode(seed["data"])
            seeds[seed["file"]] = (hashlib.sha256(data).hexdigest(), wheel_entries(data))
    return from_probe(image_id, document, seeds)


def load(image_id: str, directory: Path | None = None) -> VenvFacts | None:
    """The image's record (None: none made, or it cannot be read: the audit says so, medium)."""
    try:
        facts = from_document(json.loads(_path(image_id, directory).read_bytes()))
    except (OSError, ValueError):
        return None
    return facts if facts.image == image_id else None


def keep(facts: VenvFacts, directory: Path | None = None) -> None:
    path = _path(facts.image, directory)
    host.ensure_private_dir(path.parent)
    host.write_atomically(path, json.dumps(to_document(facts)).encode())


def record(runtime: Runtime, image: str) -> VenvFacts | None:
    """The record of ``image`` (a tag or id), made now when there is none; None when the image is
    gone or its probe fails (the audit then says its environments' own files are not verified)."""
    image_id = runtime.image_id(image)
    if image_id is None:
        return None
    known = load(image_id)
    if known is not None:
        return known
    try:
        facts = facts_of(image_id, _probe(runtime, image_id))
    except (EngineError, APIError, ValueError, KeyError, TypeError, OSError, zipfile.BadZipFile):
        return None  # no record: the audit says the environments' own files are not verified (medium)
    keep(facts)
    return facts


def _probe(runtime: Runtime, image_id: str) -> str:
    script = (packaged.PACKAGE_ROOT / "adapters" / "venv_probe_script.py").read_text()
    spec = ContainerSpec(name=f"dejima-venv-probe-{secrets.token_hex(3)}", image=image_id,
                         command=("python3", "-c", script), user="0:0", network_mode="none",
                         labels={labels.SCOPE: host.scope(), labels.ROLE: "venv-probe",
                                 labels.LAUNCHER: host.launcher_token()})
    container = runtime.create(spec)
    try:
        out: list[bytes] = []
        stream = runtime.attach(container)
        runtime.start(container)
        for data, _ in stream:
            if data:
                out.append(data)
        status = runtime.wait(container, timeout=PROBE_TIMEOUT)
        if status != 0:
            raise EngineError(f"the venv probe of {image_id[:19]} ended with status {status}")
        return b"".join(out).decode("utf-8", "replace")
    finally:
        runtime.remove(container)
