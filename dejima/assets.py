"""Reads dejima's own files: the image templates from docker/ and the filter's source code."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import dejima

PACKAGE_ROOT = Path(dejima.__file__).resolve().parent


def docker_template(role: str) -> str:
    """The Dockerfile template of an image role, from the installed package or the checkout."""
    try:
        return (resources.files("dejima.assets.docker") / role / "Dockerfile.j2").read_text()
    except ModuleNotFoundError:
        # Running from a source checkout without installing: docker/ sits beside the package.
        return (PACKAGE_ROOT.parent / "docker" / role / "Dockerfile.j2").read_text()


def filter_sources() -> dict[str, bytes]:
    """The code the filter image runs: dejima/__init__.py and dejima/filter/*.py."""
    files = {"dejima/__init__.py": (PACKAGE_ROOT / "__init__.py").read_bytes()}
    for source in sorted((PACKAGE_ROOT / "filter").glob("*.py")):
        files[f"dejima/filter/{source.name}"] = source.read_bytes()
    return files
