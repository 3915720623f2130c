from typing import Any

import pytest

from dejima.core.ruleset import DENY_ALL_EXPECTATION
from dejima.filter.nft import NftError, verify_table

EXPECT = DENY_ALL_EXPECTATION.to_json()


def chain(name: str, hook: str | None, policy: str | None) -> dict[str, object]:
    body: dict[str, object] = {"family": "inet", "table": "dejima", "name": name}
    if hook:
        body.update(hook=hook, policy=policy, type="filter", prio=0)
    return {"chain": body}


def rule(chain_name: str) -> dict[str, object]:
    return {"rule": {"family": "inet", "table": "dejima", "chain": chain_name, "expr": []}}


GOOD: list[dict[str, Any]] = [  # nft's JSON objects, typed as verify_table reads them
    {"table": {"family": "inet", "name": "dejima"}},
    chain("output", "output", "drop"),
    chain("input", "input", "drop"),
    chain("forward", "forward", "drop"),
    *({"set": {"family": "inet", "table": "dejima", "name": name}}
      for name in ("allow4", "allow4_port", "revoked4", "upstream4")),
    rule("output"),
]


def test_matching_read_back_passes() -> None:
    verify_table(GOOD, EXPECT)


@pytest.mark.parametrize(
    ("objects", "message"),
    [
        ([o for o in GOOD if o != chain("forward", "forward", "drop")], "missing chain(s) forward"),
        ([chain("output", "output", "accept") if o == chain("output", "output", "drop") else o for o in GOOD],
         "chain output: kernel has hook=output policy=accept"),
        (GOOD + [chain("sneaky", "prerouting", "accept")], "unexpected base chain(s) sneaky"),
        ([o for o in GOOD if "rule" not in o], "output chain has no rules"),
        ([o for o in GOOD if o.get("set", {}).get("name") != "allow4"], "missing set(s) allow4"),
    ],
)
def test_any_difference_fails_verification(objects: list[dict[str, object]], message: str) -> None:
    with pytest.raises(NftError, match=message.replace("(", r"\(").replace(")", r"\)")):
        verify_table(objects, EXPECT)
