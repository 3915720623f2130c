"""The record of what this Python's ``python -m venv`` (and the test extras' uv) writes in an
environment, made as dejima makes the session image's (venv_probe_script.py run by the interpreter),
here by the interpreter the tests run on instead of the image's."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from pathlib import Path

from dejima.adapters import packaged
from dejima.adapters.venv_record import facts_of
from dejima.core.audit.venv_facts import VenvFacts


@functools.cache
def here(uv: str | None = None) -> VenvFacts:
    """This Python's record (with ``uv``'s, when given), as the image build's probe makes it."""
    path = os.pathsep.join([str(Path(uv).parent)] if uv else []) or "/nonexistent"
    return probed({"PATH": f"{path}{os.pathsep}/usr/bin:/bin" if uv else "/usr/bin:/bin"})


def probed(env: dict[str, str]) -> VenvFacts:
    """The record the probe makes when run by this Python with ``env`` over the environment."""
    script = (packaged.PACKAGE_ROOT / "adapters" / "venv_probe_script.py").read_text()
    out = subprocess.run([sys.executable, "-c", script], check=True, capture_output=True, text=True, timeout=300,
                         env={**os.environ, **env})
    return facts_of("sha256:here", out.stdout)
