"""The walk with its C part and without it (tree_walk.NATIVE: a dejima installed where no compiler
was): a module imports ``either_walk_part`` (autouse, so importing it applies it) and each of its
tests runs both ways. The C way must be there: tests run where dejima is built, and a test that
passed only in Python would not say the shipped walk holds."""

from __future__ import annotations

import pytest

from dejima.adapters import tree_walk


@pytest.fixture(autouse=True, params=["C", "Python"])
def either_walk_part(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "C":
        assert tree_walk.NATIVE, "the walk's C part is not built: scripts/setup-venv builds it (gcc, Python's headers)"
    else:
        monkeypatch.setattr(tree_walk, "_same_directory", None)
        monkeypatch.setattr(tree_walk, "_lstat_all", None)
    return str(request.param)
