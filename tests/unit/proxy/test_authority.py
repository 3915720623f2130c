"""The session CA: name-constrained to the intercepted hosts, checked by the stdlib ssl module in real handshakes."""

from __future__ import annotations

import ssl

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from dejima.proxy.authority import NotIntercepted, SessionAuthority, leaf_context, sign_leaf

HOSTS = ("api.github.com", "uploads.github.com")


@pytest.fixture(scope="module")
def authority() -> SessionAuthority:
    return SessionAuthority.create(HOSTS)


def handshake(server: ssl.SSLContext, ca_pem: str, name: str | None) -> ssl.SSLObject:
    """A full TLS handshake between two in-memory endpoints; the client trusts ``ca_pem`` alone."""
    client_ctx = ssl.create_default_context(cadata=ca_pem)
    if name is None:
        client_ctx.check_hostname = False
    c_in, c_out, s_in, s_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
    client = client_ctx.wrap_bio(c_in, c_out, server_hostname=name)
    srv = server.wrap_bio(s_in, s_out, server_side=True)
    done = [False, False]
    for _ in range(20):  # a TLS 1.3 handshake needs 2-3 flights; bounded all the same
        for index, (end, out, peer_in) in enumerate(((client, c_out, s_in), (srv, s_out, c_in))):
            if not done[index]:
                try:
                    end.do_handshake()
                    done[index] = True
                except ssl.SSLWantReadError:
                    pass
            peer_in.write(out.read())
        if all(done):
            return client
    raise AssertionError("the handshake did not finish")


def san(client: ssl.SSLObject) -> object:
    cert = client.getpeercert()
    assert cert is not None
    return cert["subjectAltName"]


def test_ca_is_a_name_constrained_ca(authority: SessionAuthority) -> None:
    cert = authority.ca_cert
    basic = cert.extensions.get_extension_for_class(x509.BasicConstraints)
    assert basic.critical and basic.value.ca and basic.value.path_length == 0
    constraints = cert.extensions.get_extension_for_class(x509.NameConstraints)
    assert constraints.critical
    assert {n.value for n in constraints.value.permitted_subtrees or []} == set(HOSTS)
    assert {str(n.value) for n in constraints.value.excluded_subtrees or []} == {"0.0.0.0/0", "::/0"}


def test_leaf_for_an_intercepted_host_verifies(authority: SessionAuthority) -> None:
    client = handshake(leaf_context(*authority.leaf("api.github.com")), authority.ca_pem, "api.github.com")
    assert san(client) == (("DNS", "api.github.com"),)


def test_no_leaf_for_an_unmarked_name(authority: SessionAuthority) -> None:
    with pytest.raises(NotIntercepted):
        authority.leaf("evil.example")


def test_a_forged_leaf_for_an_unmarked_name_fails_verification(authority: SessionAuthority) -> None:
    """Even the CA's own key, signing outside its constraints, makes nothing a client accepts."""
    forged = leaf_context(*sign_leaf(authority._key, authority.ca_cert, "evil.example"))
    with pytest.raises(ssl.SSLCertVerificationError, match="(?i)name constraint|permitted"):
        handshake(forged, authority.ca_pem, "evil.example")
    # control: the same forging path for a permitted name verifies, so the refusal above is the constraint's
    handshake(leaf_context(*sign_leaf(authority._key, authority.ca_cert, "uploads.github.com")), authority.ca_pem,
              "uploads.github.com")


def test_the_listening_context_picks_the_leaf_by_sni_and_refuses_the_rest(authority: SessionAuthority) -> None:
    refused: list[str | None] = []
    context = authority.server_context(refused.append)
    for host in HOSTS:
        assert san(handshake(context, authority.ca_pem, host)) == (("DNS", host),)
    with pytest.raises(ssl.SSLError):
        handshake(context, authority.ca_pem, "evil.example")
    with pytest.raises(ssl.SSLError):
        handshake(context, authority.ca_pem, None)
    assert refused == ["evil.example", None]


def test_the_key_is_never_serialized_in_the_clear(authority: SessionAuthority) -> None:
    """Nothing the authority hands out carries its key; only the object in memory holds it."""
    secret = authority._key.private_numbers().private_value.to_bytes(32, "big")
    public = authority.ca_cert.public_bytes(serialization.Encoding.DER)
    assert secret not in public and secret.hex() not in authority.ca_pem.lower()
    assert "PRIVATE KEY" not in authority.ca_pem and "PRIVATE KEY" not in repr(authority)
