"""A session's own certificate authority, for the credential proxy's TLS fallback.

    authority = SessionAuthority.create(["api.github.com"])   # on the host, in the launcher's memory
    authority.ca_pem                                           # public: what the session trusts
    context = authority.server_context(refused)                # a leaf per SNI; any other name refused

Tools that take no base URL (``gh`` for github.com) keep talking TLS to their usual host; for the
hosts a manifest marks (``intercept = true``) the proxy answers that TLS itself, with a leaf this
CA signs. The CA's private key is made in memory and never serialized: it is not in a file, an
environment, a container or a log, and it dies with the launcher. The CA is name-constrained
(critical NameConstraints: only the marked hosts as dNSName subtrees, every IP address excluded),
so a verifier refuses whatever else its key might sign; ``leaf`` refuses to sign other names at all.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import secrets
import ssl
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = datetime.timedelta(days=30)  # longer than a session; the key dies with the launcher anyway
SKEW = datetime.timedelta(hours=1)  # clocks of containers and hosts differ a little
ALPN = ["http/1.1"]  # the proxy speaks HTTP/1.1: clients that offer h2 fall back

OnRefusedName = Callable[[str | None], None]  # told of every handshake for a name no route intercepts


class NotIntercepted(ValueError):
    """A leaf was asked for a name this session's CA may not sign."""


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "dejima"),
                      x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _constraints(hosts: Iterable[str]) -> x509.NameConstraints:
    return x509.NameConstraints(
        permitted_subtrees=[x509.DNSName(host) for host in hosts],
        excluded_subtrees=[x509.IPAddress(ipaddress.ip_network("0.0.0.0/0")),
                           x509.IPAddress(ipaddress.ip_network("::/0"))])


def make_ca(hosts: Iterable[str], label: str) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """A CA key and certificate that may only vouch for ``hosts``; the key never leaves memory."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    public = key.public_key()
    cert = (x509.CertificateBuilder()
            .subject_name(_name(label)).issuer_name(_name(label))
            .public_key(public).serial_number(x509.random_serial_number())
            .not_valid_before(now - SKEW).not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                         crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(_constraints(hosts), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
            .sign(key, hashes.SHA256()))
    return key, cert


def sign_leaf(ca_key: ec.EllipticCurvePrivateKey, ca_cert: x509.Certificate,
              host: str) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """A server certificate for ``host``, signed by the CA (no check of the CA's constraints here)."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder()
            .subject_name(_name(host)).issuer_name(ca_cert.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - SKEW).not_valid_after(now + VALIDITY)
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(host)]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False, key_cert_sign=False,
                                         crl_sign=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    return key, cert


def pem(cert: x509.Certificate) -> str:
    return cert.public_bytes(serialization.Encoding.PEM).decode("ascii")


def leaf_context(key: ec.EllipticCurvePrivateKey, cert: x509.Certificate) -> ssl.SSLContext:
    """A server context holding one leaf. ssl loads keys only from paths: the key goes through an
    anonymous memory file (or, where there is none, a private temporary file), encrypted with a
    password that exists only here."""
    password = secrets.token_bytes(32)
    data = pem(cert).encode() + key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                  serialization.BestAvailableEncryption(password))
    context = _server_context()
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("dejima-leaf")
        try:
            os.write(fd, data)
            context.load_cert_chain(f"/proc/self/fd/{fd}", password=password)
        finally:
            os.close(fd)
        return context
    with tempfile.TemporaryDirectory() as private:  # 0700
        path = Path(private) / "leaf.pem"
        path.write_bytes(data)
        context.load_cert_chain(str(path), password=password)
    return context


def _server_context() -> ssl.SSLContext:
    """What every server side of the fallback speaks: TLS 1.2 or later, HTTP/1.1 by ALPN."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.set_alpn_protocols(ALPN)
    return context


@dataclass(slots=True)
class SessionAuthority:
    """The CA of one session and a server context per intercepted host (made once, at the start)."""

    hosts: tuple[str, ...]
    ca_cert: x509.Certificate
    _key: ec.EllipticCurvePrivateKey = field(repr=False)
    _contexts: dict[str, ssl.SSLContext] = field(default_factory=dict, repr=False)

    @classmethod
    def create(cls, hosts: Iterable[str], label: str = "dejima session CA") -> SessionAuthority:
        names = tuple(dict.fromkeys(h.lower().rstrip(".") for h in hosts))
        if not names:
            raise ValueError("a session CA needs at least one host to vouch for")
        key, cert = make_ca(names, label)
        authority = cls(names, cert, key)
        for host in names:
            authority._contexts[host] = leaf_context(*authority.leaf(host))
        return authority

    @property
    def ca_pem(self) -> str:
        return pem(self.ca_cert)

    def leaf(self, host: str) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
        if host not in self.hosts:
            raise NotIntercepted(f"{host!r} is not an intercepted host of this session")
        return sign_leaf(self._key, self.ca_cert, host)

    def host_of(self, context: ssl.SSLContext) -> str | None:
        """The host whose leaf a finished handshake used (the SNI chose it)."""
        return next((host for host, ctx in self._contexts.items() if ctx is context), None)

    def server_context(self, refused: OnRefusedName) -> ssl.SSLContext:
        """The listening context: no certificate of its own; the SNI callback picks the marked host's
        leaf, and a handshake without SNI or for any other name ends with an alert."""
        base = _server_context()

        def choose(connection: ssl.SSLObject, name: str | None, _initial: ssl.SSLContext) -> int | None:
            context = self._contexts.get((name or "").lower().rstrip("."))
            if context is None:
                refused(name)
                return ssl.ALERT_DESCRIPTION_UNRECOGNIZED_NAME
            connection.context = context
            return None

        base.sni_callback = choose
        return base
