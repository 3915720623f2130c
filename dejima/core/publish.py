"""Published ports: a TCP port of the session reachable from the host (``--publish``, ``[session] publish``).

    3000                 the session's port 3000 on the host's 127.0.0.1:3000
    "8080:3000"          the session's port 3000 on the host's 127.0.0.1:8080
    "0.0.0.0:3000:3000"  on every address of the host: said explicitly, warned about on the boundary card

The host side is the engine's port binding on the filter's container (whose network namespace the
session shares); the filter's ruleset accepts new inbound TCP to the published session ports and to
nothing else (core/ruleset.py). Egress is unchanged: replies ride the inbound connection's conntrack
entry, and nothing new goes out.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from dejima.core.schema import Invalid, shown
from dejima.errors import UsageError

LOOPBACK = "127.0.0.1"
SESSION_PORT_FLOOR = 1024  # below it the session cannot listen (no NET_BIND_SERVICE): those ports are the filter's
FORMS = "write PORT, HOST_PORT:PORT or ADDRESS:HOST_PORT:PORT, e.g. 3000 or \"8080:3000\""
_PORT = re.compile(r"^[0-9]{1,5}\Z")


@dataclass(frozen=True, slots=True)
class Published:
    """One published port: the host's address and port, the session's port, and where it was asked for."""

    host_address: str
    host_port: int
    session_port: int
    origin: str = ""

    @property
    def canonical(self) -> str:
        return f"{self.host_address}:{self.host_port}:{self.session_port}"

    @property
    def local_only(self) -> bool:
        """Reachable from this machine only (a loopback address of the host)."""
        return ipaddress.IPv4Address(self.host_address).is_loopback

    @property
    def shown(self) -> str:
        """As the card, the summary line and the render say it."""
        return f"host {self.host_address}:{self.host_port} -> session port {self.session_port}"


def _port(text: str, which: str, low: int = 1) -> int:
    if not _PORT.match(text):
        raise Invalid(f"has a {which} that is not a number ({shown(text)})", FORMS)
    port = int(text)
    if not low <= port <= 65535:
        if low > 1 and 1 <= port < low:
            raise Invalid(f"publishes session port {port}: the session cannot listen below {low} (no "
                          "capabilities; those ports are the filter's)", "let the server listen on a port from 1024 "
                          f"up and publish that one (a host port below {low} is fine: \"{port}:{port + 8000}\")")
        raise Invalid(f"has a {which} out of range ({port}): ports are 1 to 65535", FORMS)
    return port


def parse_published(value: int | str, origin: str = "") -> Published:
    """``value`` as written in a flag or the settings; ``Invalid`` with the fix when it is not one."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise Invalid(f"must be a port number or a string, not {shown(value)}", FORMS)
    text = str(value).strip()
    parts = text.split(":")
    if len(parts) > 3 or not text:
        raise Invalid(f"is not a published port ({shown(value)})", FORMS)
    address = parts[0] if len(parts) == 3 else LOOPBACK
    if len(parts) == 3:
        try:
            parsed = ipaddress.ip_address(address)
        except ValueError:
            raise Invalid(f"has a host address that is not an IP address ({shown(address)})",
                          "write the host's IPv4 address it listens on, e.g. \"127.0.0.1:3000:3000\"; leave it "
                          "out for 127.0.0.1 (this machine only)") from None
        if parsed.version != 4:
            raise Invalid(f"has an IPv6 host address ({shown(address)}): sessions have no IPv6",
                          "write an IPv4 address, or leave it out for 127.0.0.1")
        address = str(parsed)
    session_port = _port(parts[-1], "session port", SESSION_PORT_FLOOR)
    host_port = _port(parts[-2], "host port") if len(parts) >= 2 else session_port
    return Published(address, host_port, session_port, origin)


def published_ports(settings: Iterable[int | str], settings_origin: str, flags: Iterable[str]) -> tuple[Published, ...]:
    """The settings' ports, then the command line's; a host port published twice is refused, naming both."""
    try:
        ports = [*(parse_published(v, f"{settings_origin} session.publish") for v in settings),
                 *(parse_published(v, "--publish") for v in flags)]
    except Invalid as exc:  # the flags and the settings were checked already: a caller's own request
        raise UsageError(f"a published port {exc.problem}", hint=exc.fix) from None
    seen: dict[int, Published] = {}
    for port in ports:
        earlier = seen.setdefault(port.host_port, port)
        if earlier is not port:
            raise UsageError(
                f"host port {port.host_port} is published twice: {earlier.canonical} ({earlier.origin}) and "
                f"{port.canonical} ({port.origin})",
                hint=f"leave one out: {earlier.origin} publishes it already" if earlier.canonical == port.canonical
                else "publish each host port once; to reach one session port on two host ports, give them "
                "different host ports (\"8080:3000\" and \"8081:3000\")",
                reference="port-published-twice")
    return tuple(ports)


Bindings = dict[str, set[tuple[str, str]]]  # "3000/tcp" -> {(host address, host port)}


def _listed(bindings: Bindings) -> str:
    return "; ".join(f"{key} on {', '.join(sorted(f'{a}:{p}' for a, p in hosts))}"
                     for key, hosts in sorted(bindings.items())) or "nothing"


def binding_problem(planned: Iterable[Published], bound: Mapping[str, object] | None) -> str | None:
    """What differs between the planned ports and what the engine says it bound (its inspect's
    ``NetworkSettings.Ports``: ``{"3000/tcp": [{"HostIp": ..., "HostPort": ...}], ...}``); None when nothing does.
    The card says where each port is reachable: a start goes on only when the engine bound just that."""
    want: Bindings = {}
    for port in planned:
        want.setdefault(f"{port.session_port}/tcp", set()).add((port.host_address, str(port.host_port)))
    have: Bindings = {}
    for key, bindings in (bound or {}).items():
        if isinstance(bindings, list) and bindings:
            have[key] = {(str(b.get("HostIp", "")), str(b.get("HostPort", ""))) for b in bindings
                         if isinstance(b, dict)}
    if want == have:
        return None
    return f"the engine bound {_listed(have)}, where the plan publishes {_listed(want)}"
