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


def test_policy_inspection_denies_metadata_private_and_host_addresses() -> None:
    """Outside addresses are checked by policy, never by sending packets to them."""
    import ipaddress

    from dejima.core.egress import parse_policy

    host = ipaddress.ip_network("192.0.2.10/32")
    policy = parse_policy(["example.com"], [], denied_addresses=(host,))
    for address in ("169.254.169.254", "fd00:ec2::254", "fd20:ce::254", "10.0.0.1", "172.16.5.4",
                    "192.168.0.1", "100.64.1.1", "127.0.0.1", "192.0.2.10"):
        assert not policy.address_verdict(ipaddress.ip_address(address)).allowed, address


def test_every_accept_rule_is_loopback_the_resolver_or_an_allow_set() -> None:
    from dejima.core.egress import parse_policy

    text = render_ruleset("s", parse_policy(["example.com"], []))
    accepts = [line.strip() for line in text.splitlines() if line.strip().endswith("accept")]
    assert accepts == [
        'oif "lo" accept',
        "meta mark 0x0000646a ip daddr @upstream4 meta l4proto { 6, 17 } th dport 53 accept",
        "ct state established,related accept",
        "ip daddr @allow4 meta l4proto 6 accept",
        "ip daddr . tcp dport @allow4_port accept",
        'iif "lo" accept',
        "ct state established,related accept",
    ]
    assert "169.254" not in text and "10.0.0.0" not in text


POLICY_GOLDEN = GOLDEN.parent / "policy.nft"


def test_policy_ruleset_matches_golden(update_golden: bool) -> None:
    """Literals (allowed and denied), the upstream set and the allow sets, as nft will read them."""
    import ipaddress

    from dejima.core.egress import parse_policy

    policy = parse_policy(["pypi.org", "203.0.113.0/24:22", "198.51.100.7"],
                          [("198.51.100.9", "a test says no"), ("evil.example", "")])
    text = render_ruleset("0123abcd", policy, (ipaddress.IPv4Address("192.0.2.53"),))
    if update_golden:
        POLICY_GOLDEN.write_text(text)
    assert text == POLICY_GOLDEN.read_text()


def test_every_slot_of_the_template_renders_as_nft_lists_it() -> None:
    """The cases the goldens leave out: a denied network with a port, several upstreams."""
    import ipaddress

    from dejima.core.egress import parse_policy

    policy = parse_policy(["10.1.2.3:443"], [("192.0.2.0/24:25", "no mail")])
    text = render_ruleset("s", policy, (ipaddress.IPv4Address("192.0.2.53"), ipaddress.IPv4Address("192.0.2.54")))
    assert "\t\telements = { 192.0.2.53, 192.0.2.54 }\n\t}" in text
    assert "\n\t\tip daddr 192.0.2.0/24 tcp dport 25 counter goto refuse\n" in text
    assert "\n\t\tip daddr 10.1.2.3 tcp dport 443 accept\n" in text
    assert "$" not in text


def test_a_pods_proxy_gets_out_by_its_uid_only() -> None:
    """A pod's credential proxy (core/kubernetes.py): its uid may ask the upstream resolvers and reach its
    routes' ports; a local ruleset (no proxy in the namespace) has no such rule."""
    import ipaddress

    from dejima.core.ruleset import ProxyEgress

    upstream = (ipaddress.IPv4Address("10.96.0.10"),)
    local = render_ruleset("s", None, upstream)
    assert "skuid" not in local
    one = render_ruleset("s", None, upstream, ProxyEgress(10700, (443,)))
    assert "\t\tmeta skuid 10700 ip daddr @upstream4 meta l4proto { 6, 17 } th dport 53 accept\n" in one
    assert "\t\tmeta skuid 10700 tcp dport 443 accept\n" in one
    # before the rule that refuses everyone else the upstream resolvers
    assert one.index("meta skuid 10700 ip daddr @upstream4") < one.index("ip daddr @upstream4 counter goto refuse")
    two = render_ruleset("s", None, upstream, ProxyEgress(10700, (8443, 443)))
    assert "meta skuid 10700 tcp dport { 443, 8443 } accept" in two


def test_with_an_upstream_proxy_no_allowed_destination_is_reached_directly() -> None:
    """An upstream proxy (core/upstream_proxy.py): every accept rule is loopback, the resolver's, the
    relay's marked sockets to the proxy's address and port, or an established flow; allowed destinations
    are redirected to the relay by the nat chain, which lets the filter's own marked sockets and refused
    destinations pass untouched (the output chain refuses the latter)."""
    import ipaddress

    from dejima.core.egress import parse_policy
    from dejima.core.ruleset import RELAYED_EXPECTATION, RelayEgress

    policy = parse_policy(["example.com", "203.0.113.0/24:22"], [("203.0.113.9", "no")])
    text = render_ruleset("s", policy, (ipaddress.IPv4Address("192.0.2.53"),),
                          relay=RelayEgress(701, ipaddress.IPv4Address("10.20.0.5"), 3128))
    output = text[text.index("chain output"):text.index("chain input")]
    accepts = [line.strip() for line in output.splitlines() if line.strip().endswith("accept")]
    # a revoked grant's relayed flows are cut before the relay's port is accepted
    assert output.index("ct original ip daddr @revoked4 counter goto refuse") < output.index("dport 701 accept")
    assert accepts == [
        'oif "lo" accept',
        "meta mark 0x0000646a ip daddr @upstream4 meta l4proto { 6, 17 } th dport 53 accept",
        "ip daddr 127.0.0.1 tcp dport 701 accept",
        "meta mark 0x00006472 ip daddr 10.20.0.5 tcp dport 3128 accept",
        "ct state established,related accept",
    ]
    relay = text[text.index("chain relay"):]
    assert [line.strip() for line in relay.splitlines()[1:-2]] == [
        "type nat hook output priority dstnat; policy accept;",
        "meta mark { 0x0000646a, 0x00006472 } return",
        "ip daddr @revoked4 return",
        "ip daddr 203.0.113.9 return",
        "ip daddr @allow4 meta l4proto 6 redirect to :701",
        "ip daddr . tcp dport @allow4_port redirect to :701",
        "ip daddr 203.0.113.0/24 tcp dport 22 redirect to :701",
    ]
    assert [c.name for c in RELAYED_EXPECTATION.chains] == ["output", "input", "forward", "relay"]
    assert "chain relay" not in render_ruleset("s", policy)
