from pathlib import Path

import pytest

from dejima.core.ruleset import DENY_ALL_EXPECTATION, render_ruleset

GOLDEN = Path(__file__).parents[2] / "golden" / "ruleset" / "deny-all.nft"


def test_deny_all_ruleset_matches_golden(update_golden: bool) -> None:
    text = render_ruleset("0123abcd")
    if update_golden:
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text()


def test_ruleset_replaces_its_own_table_atomically() -> None:
    lines = render_ruleset("s").splitlines()
    body = [line for line in lines if line and not line.startswith("#")]
    assert body[:2] == ["table inet dejima", "delete table inet dejima"]


@pytest.mark.parametrize("chain", DENY_ALL_EXPECTATION.chains, ids=lambda c: c.name)
def test_every_expected_chain_is_rendered_with_drop_policy(chain: object) -> None:
    text = render_ruleset("s")
    assert f"chain {chain.name} {{" in text  # type: ignore[attr-defined]
    assert f"type filter hook {chain.hook} priority filter; policy drop;" in text  # type: ignore[attr-defined]
