"""The end audit's cost follows the change: a tree five times as large (10,000 then 50,000 new files in
node_modules, npm-shaped: packages of a hundred files) costs about five times as much, not
twenty-five, and the audit's memory stays bounded. Each size runs in a fresh interpreter, whose
peak resident size is read from the kernel (VmHWM: its own memory's high-water mark; getrusage's
ru_maxrss would start at the pytest process's size, as Linux keeps it across fork and exec)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

AUDIT_OF_A_NEW_TREE = """
import json, sys, tempfile, time
from pathlib import Path
from dejima.orchestration.exit_audit import Mount, audit_mount, capture
files = int(sys.argv[1])
root = Path(tempfile.mkdtemp(dir=sys.argv[2]))
(root / "package.json").write_text("{}")
state = capture(Mount("workspace", root))
for package in range(files // 100):
    directory = root / "node_modules" / f"pkg{package}"
    (directory / "lib").mkdir(parents=True)
    (directory / "package.json").write_text(f'{{"name": "pkg{package}", "version": "1.0.0"}}')
    for module in range(99):
        (directory / "lib" / f"m{module}.js").write_text(f"module.exports = {module};\\n")
(root / "node_modules" / ".package-lock.json").write_text("{}")  # npm's record: a tree, not stray code
started = time.perf_counter()
found, _ = audit_mount(state)
peak = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(json.dumps({"seconds": time.perf_counter() - started, "peak_mib": peak / 1024,
                  "findings": [[f.rule, f.severity, f.path] for f in found]}))
"""


def audit_of(files: int, tmp_path: Path) -> dict[str, object]:
    result = subprocess.run([sys.executable, "-c", AUDIT_OF_A_NEW_TREE, str(files), str(tmp_path)], cwd=ROOT,
                            capture_output=True, text=True, timeout=600, check=True)
    return json.loads(result.stdout.splitlines()[-1])  # type: ignore[no-any-return]


def test_fifty_thousand_new_files_cost_five_times_ten_thousand(tmp_path: Path) -> None:
    # the faster of two runs each: a machine shared with other work slows one run, not both
    small = min((audit_of(10_000, tmp_path) for _ in range(2)), key=lambda run: float(run["seconds"]))  # type: ignore[arg-type]
    large = min((audit_of(50_000, tmp_path) for _ in range(2)), key=lambda run: float(run["seconds"]))  # type: ignore[arg-type]
    # medium: the tree's packages are in no cache, so they cannot be verified (npm_verify)
    assert small["findings"] == large["findings"] == [["B07", "medium", "node_modules"]]
    ratio = float(large["seconds"]) / float(small["seconds"])  # type: ignore[arg-type]
    assert ratio < 8, f"{large['seconds']:.2f} s for 50k files, {small['seconds']:.2f} s for 10k: {ratio:.1f} ×"
    assert float(large["peak_mib"]) < 256, large["peak_mib"]  # type: ignore[arg-type]
    print(f"end audit of a new tree: 10k files {small['seconds']:.2f} s, 50k files {large['seconds']:.2f} s "
          f"({ratio:.1f} ×), peak {large['peak_mib']:.0f} MiB")
