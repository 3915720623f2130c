"""A regular (non-editable) install carries the package data: image templates and manifests."""

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).parents[2]

CHECK = """
import dejima, dejima.adapters.packaged as p, dejima.adapters.manifest_files as m
assert dejima.__file__.startswith(TARGET), dejima.__file__
assert "FROM" in p.docker_template("filter") and "FROM" in p.docker_template("session")
assert b"dejima-allow" in p.session_tools()["notice"], "the session notice is package data"
catalog = m.load_catalog(include_user=False)
assert ("harnesses", "shell") in catalog.manifests, sorted(catalog.manifests)
assert all(mf.source.startswith(TARGET) for mf in catalog.manifests.values())
import dejima.core.ruleset as r
assert r.__file__.startswith(TARGET) and "table inet dejima {" in r.render_ruleset("x")
print("ok", len(catalog.manifests))
"""


def test_installed_wheel_finds_templates_and_manifests(tmp_path: Path) -> None:
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                    "--target", str(target), str(REPO)], check=True, capture_output=True)
    result = subprocess.run([sys.executable, "-c", f"TARGET = {str(target)!r}\n" + CHECK], cwd=tmp_path,
                            env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"},
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("ok ")
