"""Compare a ruleset with the kernel's own listing of it (stdlib only: it runs in the filter too).

The filter applies the ruleset it was given, lists its table back (``nft -s list table``) and
refuses to report ready unless the listing says exactly what the ruleset said. The template is
written in the form nft lists it, so the comparison is of text after a light normalisation: the
replace prelude and comments removed, protocol names as numbers (nft prints names only where
/etc/protocols exists), and every run of whitespace one space (nft wraps long element lists).
"""

from __future__ import annotations

import re

_PROTOCOLS = {"tcp": "6", "udp": "17", "icmp": "1"}
_PRELUDE = re.compile(r"^(delete )?table \S+ \S+$")
_L4PROTO = re.compile(r"meta l4proto (\{[^}]*\}|\w+)")


def _numbers(match: re.Match[str]) -> str:
    return "meta l4proto " + re.sub(r"\b(tcp|udp|icmp)\b", lambda m: _PROTOCOLS[m.group(1)], match.group(1))


def normalise(text: str) -> str:
    """A ruleset or a listing, reduced to what both must share."""
    lines = []
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#") or _PRELUDE.match(stripped):
            continue
        lines.append(stripped)
    return _L4PROTO.sub(_numbers, re.sub(r"\s+", " ", " ".join(lines))).strip()


def difference(ruleset: str, listing: str) -> str | None:
    """None when the kernel's listing matches the ruleset; else where they first part, in words."""
    expected, actual = normalise(ruleset), normalise(listing)
    if expected == actual:
        return None
    at = next((i for i, (a, b) in enumerate(zip(expected, actual, strict=False)) if a != b),
              min(len(expected), len(actual)))
    start = max(0, at - 60)
    return (f"the kernel's listing differs from the ruleset at character {at}: "
            f"expected …{expected[start:at + 60]}… but the kernel holds …{actual[start:at + 60]}…")
