"""What bench/run prints beside a verdict agrees with it: a ratio is never rounded across its goal."""

from __future__ import annotations

import pytest

from bench.common import Row


@pytest.mark.parametrize(("value", "better", "goal", "shown", "passed"), [
    (0.2457, "higher", 0.25, "0.246 ×", False),  # 2 digits would print 0.25 beside FAIL
    (0.2504, "higher", 0.25, "0.25 ×", True),
    (1.0049, "lower", 1.0, "1.005 ×", False),
    (0.9951, "lower", 1.0, "1.00 ×", True),  # shown 1.00 still meets ≤ 1
    (3.14159, "higher", 3.0, "3.14 ×", True),
])
def test_the_ratio_shown_agrees_with_the_verdict(value: float, better: str, goal: float, shown: str,
                                                 passed: bool) -> None:
    row = Row("m", "q/s", value, 1.0, "anchor", goal, better=better)
    assert row.passed is passed
    assert row.ratio_text() == shown


def test_every_phase_bench_times_names_that_exist() -> None:
    """bench/phases.py wraps functions by module and name as the launcher imports them; a renamed or
    moved module would silently time nothing (its rows come out empty)."""
    import importlib

    from bench.phases import TIMED

    for (module_name, class_name), (names, _prefix) in TIMED.items():
        owner: object = importlib.import_module(module_name)
        if class_name:
            owner = getattr(owner, class_name)
        missing = [name for name in names.split() if not hasattr(owner, name)]
        assert not missing, f"{module_name}.{class_name}: {missing}"
