"""The walk's racy window, shortened for unit tests (the rule is the same; a test need not wait
3 s): a module imports ``short_racy_window`` (autouse, so importing it applies it) and ``tick``."""

from __future__ import annotations

import time

import pytest

from dejima.adapters import tree_walk


@pytest.fixture(autouse=True)
def short_racy_window(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tree_walk, "RACY_NS", 20_000_000)


def tick() -> None:
    time.sleep(0.05)  # past the (shortened) racy window: a walk now trusts what was written before
