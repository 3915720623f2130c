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


# The filter runs the same policy code as the launcher (stdlib only), so verdicts cannot drift.
FILTER_SHARED = ("__init__.py", "errors.py", "core/__init__.py", "core/egress.py", "core/nftlisting.py",
                 "core/grants.py", "core/special_entries.py")


# A pod's credential proxy runs from the filter's image too (`python3 -m dejima.proxy.pod`, one image to
# push for a cluster), so the image also holds the proxy and what it imports; the filter never imports
# them (tests/unit/test_layering.py holds it to FILTER_SHARED).
POD_PROXY_PACKAGES = ("core", "proxy", "adapters", "templates")


def filter_sources() -> dict[str, bytes]:
    """The code the filter image holds: dejima/filter/*.py and the stdlib-only modules it shares, and
    the pod proxy's packages."""
    files = {f"dejima/{name}": (PACKAGE_ROOT / name).read_bytes() for name in FILTER_SHARED}
    for package in ("filter", *POD_PROXY_PACKAGES):
        for source in sorted((PACKAGE_ROOT / package).rglob("*.py")):
            files[f"dejima/{source.relative_to(PACKAGE_ROOT)}"] = source.read_bytes()
    return files
