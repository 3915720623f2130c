"""The corporate proxy a session's connections leave through: ``[network] upstream_proxy``, or else the
host's ``HTTPS_PROXY`` (``https_proxy``, ``HTTP_PROXY``, ``http_proxy``) read at start.

Pure: which of them decides, and what a proxy URL may be. The launcher resolves the proxy's name
(orchestration/start_request.py); the filter's relay (filter/relay.py) and the credential proxy's
upstreams (proxy/upstream.py) go through it with ``CONNECT name:port``. Only a plain http:// proxy
without credentials in its URL: a user name and password would travel into the filter's configuration.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from dejima.core.schema import shown

SETTING = "network.upstream_proxy"
DIRECT = "direct"  # the setting that ignores the host's variables: connections go direct
ENV_NAMES = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy")  # read in this order, the first set wins
DEFAULT_PORT = 80  # an http:// URL's


@dataclass(frozen=True, slots=True)
class UpstreamProxy:
    """The proxy as host:port, and where it was said (for the card)."""

    host: str
    port: int
    origin: str
    address: ipaddress.IPv4Address | None = None  # the host's answer for ``host``, found at start

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"


def proxy_problem(text: str) -> str | None:
    """What is wrong with ``text`` as an upstream proxy URL (or "direct"), or None."""
    if text == DIRECT:
        return None
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as exc:
        return f"is not a URL ({exc}): {shown(text)}"
    if parts.scheme != "http":
        return (f"must be an http:// URL (the proxy is spoken to in plain HTTP, CONNECT carries the TLS), not "
                f"{shown(text)}")
    if parts.username is not None or parts.password is not None:
        return "must not carry a user name or password (proxy authentication is not supported)"
    if not parts.hostname:
        return f"names no host: {shown(text)}"
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        return f"must be http://HOST:PORT, without a path, not {shown(text)}"
    if port == 0:
        return f"names port 0: {shown(text)}"
    return None


def parse_proxy(text: str, origin: str) -> UpstreamProxy:
    """``text`` as a proxy; raises ValueError with the problem (the caller names the place)."""
    problem = proxy_problem(text)
    if problem:
        raise ValueError(problem)
    parts = urlsplit(text)
    return UpstreamProxy(parts.hostname or "", parts.port or DEFAULT_PORT, origin)


def chosen_proxy(setting: str, environment: Mapping[str, str], settings_source: str) -> UpstreamProxy | None:
    """The setting when it is set, else the first of the host's variables that is; None: connections go
    direct (the setting "direct" says so whatever the host's variables hold). Raises ValueError naming where
    a malformed one came from."""
    if setting == DIRECT:
        return None
    if setting:
        where = f"{settings_source} {SETTING}"
        candidates = [(setting, where)]
    else:
        candidates = [(environment[name], f"the host's ${name}") for name in ENV_NAMES if environment.get(name)]
    for text, where in candidates[:1]:
        try:
            return parse_proxy(text.strip(), where)
        except ValueError as exc:
            raise ValueError(f"{where}: the upstream proxy {exc}") from None
    return None
