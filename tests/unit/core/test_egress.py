import ipaddress

import pytest

from dejima.core.egress import PolicyError, address_class, parse_entry, parse_ipv4_spelling, parse_policy, ttl_timeout


@pytest.mark.parametrize(("text", "canonical"), [
    ("example.com", "example.com"),
    ("Example.COM.", "example.com"),
    ("example.com:443", "example.com:443"),
    ("*.example.com", "*.example.com"),
    ("bücher.example", "xn--bcher-kva.example"),
    ("203.0.113.7", "203.0.113.7"),
    ("0xcb.0.113.7", "203.0.113.7"),
    ("3405803783", "203.0.113.7"),
    ("0313.0.0161.7", "203.0.113.7"),
    ("203.0.28935", "203.0.113.7"),
    ("203.0.113.0/24:80", "203.0.113.0/24:80"),
    ("[2001:DB8::1]", "[2001:db8::1]"),
    ("[2001:db8:0:0::1]:443", "[2001:db8::1]:443"),
    ("[2001:db8::/32]", "[2001:db8::/32]"),
])
def test_every_spelling_normalises_to_one_canonical_entry(text: str, canonical: str) -> None:
    assert parse_entry(text).canonical == canonical


@pytest.mark.parametrize(("text", "rule"), [
    ("*", "'*' alone would allow everything"),
    ("*.com", "at least two labels after '*.'"),
    ("*.co.uk", "public suffix"),
    ("*.github.io", "public suffix"),
    ("foo*.example.com", "'*' may only be the whole first label"),
    ("a.*.example.com", "'*' may only be the whole first label"),
    ("localhost", "needs a dot"),
    ("https://example.com", "not a URL"),
    ("example.com:0", "port '0' must be a number from 1 to 65535"),
    ("example.com:080", "without leading zeros"),
    ("example.com:65536", "from 1 to 65535"),
    ("2001:db8::1", "must be bracketed"),
    ("[2001:db8::1", "closing ']'"),
    ("[zz::1]", "not an IPv6 address"),
    ("203.0.113.7/24", "not a valid network"),
    ("-bad.example.com", "label '-bad'"),
    ("", "cannot be empty"),
    ("999.1.1.1", "looks like an address"),
])
def test_invalid_entries_name_the_rule(text: str, rule: str) -> None:
    with pytest.raises(PolicyError) as caught:
        parse_entry(text, "settings.toml network.allow")
    assert caught.value.message.startswith(f"settings.toml network.allow: invalid egress entry {text!r}: ")
    assert rule in caught.value.message


def test_inet_aton_spellings() -> None:
    assert parse_ipv4_spelling("127.1") == ipaddress.IPv4Address("127.0.0.1")
    assert parse_ipv4_spelling("0x7f.0.0.1") == ipaddress.IPv4Address("127.0.0.1")
    assert parse_ipv4_spelling("2130706433") == ipaddress.IPv4Address("127.0.0.1")
    assert parse_ipv4_spelling("1.2.3.256") is None
    assert parse_ipv4_spelling("example") is None


POLICY = parse_policy(
    ["example.com", "api.example.org:443", "*.cdn.example.net", "*.example.org:8443", "203.0.113.9"],
    [("evil.example.com", "known exfiltration host"), ("*.ads.cdn.example.net", "")],
)


@pytest.mark.parametrize(("qname", "allowed", "ports"), [
    ("example.com", True, None),
    ("EXAMPLE.com.", True, None),
    ("www.example.com", False, None),  # a name entry is that name only
    ("api.example.org", True, frozenset({443, 8443})),  # ports of every matching entry
    ("x.example.org", True, frozenset({8443})),
    ("example.org", False, None),  # *.x does not match x
    ("a.cdn.example.net", True, None),
    ("cdn.example.net", False, None),
    ("tracker.ads.cdn.example.net", False, None),  # deny beats allow
])
def test_name_verdicts(qname: str, allowed: bool, ports: frozenset[int] | None) -> None:
    verdict = POLICY.name_verdict(qname)
    assert verdict.allowed is allowed
    if allowed:
        assert verdict.ports == ports


def test_deny_reasons_are_kept() -> None:
    assert POLICY.name_verdict("evil.example.com").reason == "known exfiltration host"
    assert POLICY.name_verdict("x.ads.cdn.example.net").reason == "*.ads.cdn.example.net is on the deny list"
    assert POLICY.name_verdict("other.test").reason == "other.test is not on the allow list"


@pytest.mark.parametrize(("address", "klass"), [
    ("127.0.0.1", "loopback"), ("0.0.0.0", "unspecified"), ("169.254.169.254", "link-local (cloud metadata)"),
    ("10.1.2.3", "private"), ("172.16.0.1", "private"), ("192.168.1.1", "private"), ("100.64.0.1", "CGNAT"),
    ("224.0.0.1", "multicast"), ("100.100.100.200", "cloud metadata"), ("168.63.129.16", "cloud metadata"),
    ("::1", "loopback"), ("fe80::1", "link-local (cloud metadata)"), ("fd00:ec2::254", "cloud metadata"),
    ("fc00::1", "unique-local (private)"), ("::ffff:127.0.0.1", "loopback"), ("64:ff9b::a9fe:a9fe",
                                                                              "link-local (cloud metadata)"),
    ("2002:7f00:1::", "loopback"), ("93.184.216.34", None), ("2606:4700::1111", None),
    # the stdlib calls these "private"; each is named for what it is (still refused)
    ("203.0.113.80", "documentation (TEST-NET-3, RFC 5737)"), ("192.0.2.1", "documentation (TEST-NET-1, RFC 5737)"),
    ("198.51.100.7", "documentation (TEST-NET-2, RFC 5737)"), ("2001:db8::1", "documentation (RFC 3849)"),
    ("198.18.0.1", "benchmarking (RFC 2544)"), ("0.1.2.3", "this-network (0.0.0.0/8)"),
    ("240.0.0.1", "reserved (240.0.0.0/4)"), ("255.255.255.255", "broadcast"),
    ("192.0.0.1", "IETF protocol assignment (192.0.0.0/24)"),
])
def test_address_classes(address: str, klass: str | None) -> None:
    assert address_class(ipaddress.ip_address(address)) == klass


def test_answers_in_denied_classes_are_refused_unless_that_address_is_allowed() -> None:
    policy = parse_policy(["10.0.0.5"], [], denied_addresses=(ipaddress.ip_network("198.51.100.1/32"),))
    assert not policy.address_verdict(ipaddress.ip_address("10.0.0.6")).allowed
    assert policy.address_verdict(ipaddress.ip_address("10.0.0.5")).allowed
    assert not policy.address_verdict(ipaddress.ip_address("198.51.100.1")).allowed
    assert policy.address_verdict(ipaddress.ip_address("93.184.216.34")).allowed


def test_ttl_is_bounded() -> None:
    assert ttl_timeout(0) == 60 and ttl_timeout(300) == 300 and ttl_timeout(86400) == 3600
