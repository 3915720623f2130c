"""`dejima doctor` runs the same boundary self-test as the suite and says so."""

from __future__ import annotations

import json
from pathlib import Path

from dejima.adapters.runtime import Runtime
from tests.world import User, containers_of, run_dejima


def test_doctor_passes_on_a_working_machine(runtime: Runtime, images: object, user: User, scope: str,
                                            workspace: Path) -> None:
    # A project with no toolchain: a start there uses the images the suite built (dejima's own checkout is a
    # Python project, whose session image has the python workflow's layers).
    result = run_dejima(user, scope, "doctor", str(workspace), "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    checks = {c["check"]: c for c in map(json.loads, result.stdout.splitlines())}
    for name in ("engine", "exit audit walk", "images", "decoy reachable without dejima", "nftables in a namespace",
                 "session has no egress"):
        assert checks[name]["ok"], checks[name]
    assert "TCP blocked" in checks["session has no egress"]["detail"]
    assert "with its C parts" in checks["exit audit walk"]["detail"]  # the suite runs where dejima is built
    assert containers_of(runtime, scope) == []
