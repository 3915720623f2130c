"""The filter's nft ruleset: rendered from the plan, and what its read-back must show.

Until the egress policy lands, the ruleset denies all egress; loopback inside the session's
network namespace is the only path. The expectation travels with the ruleset to the filter,
which reads the kernel's state back and refuses to report ready unless it matches.
"""

from __future__ import annotations

from dataclasses import dataclass

from dejima.core.render import render_package_template

TABLE = "dejima"


@dataclass(frozen=True, slots=True)
class ChainExpectation:
    name: str
    hook: str
    policy: str


@dataclass(frozen=True, slots=True)
class RulesetExpectation:
    """What the kernel must hold once the ruleset is applied: one table, these base chains."""

    family: str
    table: str
    chains: tuple[ChainExpectation, ...]

    def to_json(self) -> dict[str, object]:
        return {
            "family": self.family,
            "table": self.table,
            "chains": [{"name": c.name, "hook": c.hook, "policy": c.policy} for c in self.chains],
        }


DENY_ALL_EXPECTATION = RulesetExpectation(
    family="inet",
    table=TABLE,
    chains=(
        ChainExpectation("output", "output", "drop"),
        ChainExpectation("input", "input", "drop"),
        ChainExpectation("forward", "forward", "drop"),
    ),
)


def render_ruleset(session_id: str) -> str:
    """The nft ruleset (nft -f syntax) for a session with no allowed egress."""
    return render_package_template("ruleset.nft.j2", session_id=session_id, table=TABLE)
