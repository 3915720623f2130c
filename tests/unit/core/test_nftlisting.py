"""The filter's read-back compares the kernel's listing with the ruleset text it applied."""

from pathlib import Path

import pytest

from dejima.core.nftlisting import difference, normalise

GOLDEN = Path(__file__).parents[2] / "golden" / "ruleset"


def test_the_kernels_listing_of_a_real_render_matches_it() -> None:
    """deny-all.listed.nft is what nft printed in a real session namespace for the ruleset of a
    session whose upstream is 192.0.2.53 (recorded by tests/integration/test_no_egress.py)."""
    import ipaddress

    from dejima.core.ruleset import render_ruleset

    listed = (GOLDEN / "deny-all.listed.nft").read_text().replace(" packets N bytes N", "")
    assert difference(render_ruleset("s", None, (ipaddress.IPv4Address("192.0.2.53"),)), listed) is None


@pytest.mark.parametrize(("changed", "why"), [
    ("\t\tip daddr . tcp dport @allow4_port accept\n\t\tcounter goto refuse\n", "a rule dropped"),
    ("policy drop;", "the output policy changed"),
])
def test_any_change_is_a_difference(changed: str, why: str) -> None:
    ruleset = (GOLDEN / "policy.nft").read_text()
    tampered = ruleset.replace(changed, "\t\taccept\n" if "rule" in why else "policy accept;", 1)
    assert tampered != ruleset, why
    problem = difference(ruleset, tampered)
    assert problem is not None and "differs" in problem, why


def test_an_output_chain_that_is_a_single_accept_is_caught() -> None:
    ruleset = (GOLDEN / "deny-all.nft").read_text()
    start = ruleset.index("\tchain output {")
    end = ruleset.index("\t}", start)
    gutted = ruleset[:start] + "\tchain output {\n\t\ttype filter hook output priority filter; policy drop;\n" \
        "\t\taccept\n" + ruleset[end:]
    assert difference(ruleset, gutted) is not None


def test_normalisation_ignores_comments_prelude_wrapping_and_protocol_names() -> None:
    text = "# c\ntable inet t\ndelete table inet t\ntable inet t {\n\tset s {\n\t\telements = { 1.2.3.4,\n" \
           "\t\t\t     5.6.7.8 }\n\t}\n\tchain c {\n\t\tmeta l4proto { tcp, udp } accept\n\t}\n}\n"
    assert normalise(text) == "table inet t { set s { elements = { 1.2.3.4, 5.6.7.8 } } chain c { " \
                              "meta l4proto { 6, 17 } accept } }"
