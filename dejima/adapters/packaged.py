"""Reads dejima's own files: the image templates from docker/, the filter's source code, the session's tools."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import dejima

PACKAGE_ROOT = Path(dejima.__file__).resolve().parent


def docker_file(role: str, name: str) -> bytes:
    """A file of an image role's directory in docker/, from the installed package or the checkout."""
    try:
        return (resources.files("dejima.assets.docker") / role / name).read_bytes()
    except ModuleNotFoundError:
        # Running from a source checkout without installing: docker/ sits beside the package.
        return (PACKAGE_ROOT.parent / "docker" / role / name).read_bytes()


def docker_template(role: str) -> str:
    """The Dockerfile template of an image role."""
    return docker_file(role, "Dockerfile.j2").decode()


def session_tools() -> dict[str, bytes]:
    """What the session image holds of dejima's, by path in its build context: the notice that tells an
    agent it is in a sandbox, and dejima-why (one standard-library file)."""
    return {"notice": docker_file("session", "notice"), "dejima-why": (PACKAGE_ROOT / "filter" / "why.py").read_bytes()}


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
