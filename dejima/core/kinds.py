"""The value kinds settings, manifests and flags share: each a type, its check and its wording.

A kind checks one value and returns what the code uses (a tuple, a float, seconds); a bad value
raises ``Invalid`` with the problem and the fix, and the schema engine adds where it was written.
Add a kind here when a second place needs the same check: one rule, one message.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable
from typing import Any

from dejima.core.egress import ENTRY_HINT, Entry, PolicyError, normalise_name, parse_entry
from dejima.core.limits import MIN_MEMORY, format_bytes, is_share, parse_size
from dejima.core.publish import parse_published
from dejima.core.schema import Invalid, Kind, shown

_KEBAB = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*\Z")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
_DURATION = re.compile(r"^(\d+)(s|m|h|d)\Z")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def checked(name: str, check: Callable[[str], str | None], plural: str = "", fix: str = "") -> Kind:
    """A string kind with one check: ``check`` returns the problem, or None; ``fix`` says how to mend it."""
    def convert(value: str) -> str:
        problem = check(value)
        if problem:
            raise Invalid(problem, fix)
        return value

    return Kind(name, "a string", (str,), convert, plural)


STR = Kind("string", "a string", (str,))
TEXT = checked("string", lambda v: "must not be empty" if not v.strip() else None)
BOOL = Kind("boolean", "true or false", (bool,))


def one_of(*choices: str) -> Kind:
    listed = ", ".join(map(repr, choices))
    return checked(f"one of {listed}", lambda v: None if v in choices else f"must be one of {listed}, not {shown(v)}",
                   f"any of {listed}")


def integer(low: int, high: int) -> Kind:
    def convert(value: int) -> int:
        if not low <= value <= high:
            raise Invalid(f"must be a whole number from {low} to {high}, not {value}")
        return value

    return Kind(f"integer ({low}-{high})", "a whole number", (int,), convert)


def seconds(high: float) -> Kind:
    def convert(value: float) -> float:
        if not 0 < value <= high:
            raise Invalid(f"must be a number of seconds between 0 and {high:g}, not {value}")
        return float(value)

    return Kind("number (seconds)", "a number", (int, float), convert)


def duration(high: int) -> Kind:
    """``90s``, ``30m``, ``2h``, ``1d`` -> seconds, from 1 s to ``high``."""
    def convert(text: str) -> int:
        match = _DURATION.match(text.strip())
        if not match:
            raise Invalid(f"is not a duration ({shown(text)})", "write a number and a unit: 90s, 30m, 2h or 1d")
        value = int(match.group(1)) * _UNITS[match.group(2)]
        if not 1 <= value <= high:
            raise Invalid(f"is out of range ({shown(text)})", f"from 1s to {high // 86400}d")
        return value

    return Kind("duration", "a duration such as 30m", (str,), convert)


def _entry(text: str) -> Entry:
    try:
        return parse_entry(text)
    except PolicyError as exc:
        raise Invalid(f"is not a valid egress entry ({shown(text)}): {exc.rule}", ENTRY_HINT) from None


def _allow(text: str) -> str:
    entry = _entry(text)
    if entry.network is not None and entry.network.version == 6:
        raise Invalid(f"is an IPv6 entry ({shown(text)}), but sessions have IPv6 disabled",
                      "allow the IPv4 address, or a name that resolves to IPv4")
    return text


def _grant(text: str) -> str:
    entry = _entry(text)
    if entry.network is not None and (entry.network.version != 4 or entry.network.num_addresses != 1):
        raise Invalid(f"is not grantable live ({shown(text)}): a live grant takes a name, a *.wildcard or one "
                      "IPv4 address", "networks and IPv6 are allowed at the start only (dejima PATH --allow)")
    return entry.canonical


def _ok(convert: Callable[[str], Any]) -> Callable[[str], str]:
    def check(text: str) -> str:
        convert(text)
        return text

    return check


# Entries keep their spelling (the plan parses them again, with their origin): checked, not converted.
EGRESS_ENTRY = Kind("egress entry", "a string", (str,), _ok(_entry), "egress entries")
ALLOW_ENTRY = Kind("egress entry", "a string", (str,), _allow, "egress entries")
GRANT_ENTRY = Kind("egress entry", "a string", (str,), _grant, "egress entries")  # -> canonical form


def _domain(text: str) -> str:
    try:
        return normalise_name(text)
    except ValueError as exc:
        raise Invalid(f"is not a host name ({shown(text)}): {exc}", "e.g. github.com") from None


DOMAIN = Kind("host name", "a string", (str,), _domain)  # -> normalised (case, trailing dot, IDNA)


def _resolver(text: str) -> str:
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        raise Invalid(f"is not an IP address ({shown(text)})", "give the resolver's IPv4 address, e.g. 10.0.0.2") \
            from None
    if address.version != 4:
        raise Invalid(f"is an IPv6 resolver ({text}): only IPv4 resolvers are supported (sessions have no IPv6)",
                      "give the resolver's IPv4 address")
    if address.is_loopback:
        raise Invalid(f"is a loopback address ({text}): a loopback resolver on the host is not reachable from a "
                      "container", "give the address the resolver listens on in the host's network, or its upstream")
    return text


RESOLVER = Kind("IPv4 resolver", "a string", (str,), _resolver)


def _ipv4_network(text: str) -> str:
    try:
        network = ipaddress.ip_network(text, strict=True)
    except ValueError as exc:
        raise Invalid(f"is not a network ({shown(text)}): {exc}", "write it as 10.20.0.0/16") from None
    if network.version != 4:
        raise Invalid(f"is an IPv6 network ({text}): sessions have no IPv6", "write an IPv4 network")
    return text


IPV4_NETWORK = Kind("IPv4 network", "a string", (str,), _ipv4_network)


def _size(minimum: int, share_ok: bool) -> Callable[[str], str]:
    forms = 'a number with k, m or g, e.g. "512m" or "4g"' + (
        ", or a share of the engine's memory, e.g. \"75%\"" if share_ok else "")

    def check(text: str) -> str:
        if share_ok and is_share(text):
            return text
        try:
            size = parse_size(text)
        except ValueError:
            raise Invalid(f"is not a size ({shown(text)})", f"write {forms}") from None
        if size < minimum:
            raise Invalid(f"must be at least {format_bytes(minimum)}, not {shown(text)}", f"write {forms}")
        return text

    return check


def size(minimum: int) -> Kind:
    return Kind("size", "a string", (str,), _size(minimum, share_ok=False))


MEMORY = Kind("size or share", "a string", (str,), _size(MIN_MEMORY, share_ok=True))
HTTP_URL = checked("URL", lambda v: None if v.startswith(("http://", "https://")) else
                   f"must be an http:// or https:// URL, not {shown(v)}")
ABSOLUTE_PATH = checked("path", lambda v: None if v.startswith("/") else f"must be an absolute path, not {shown(v)}")


HTTPS_URL = checked("https:// URL", lambda v: None if v.startswith("https://") else
                    f"must be an https:// URL, not {shown(v)}", fix="secrets only travel to their service over TLS")
WORKSPACE_PATH = checked("workspace path", lambda v: f"must be a path inside the workspace, not {shown(v)}"
                         if v.startswith("/") or ".." in v.split("/") else None,
                         fix="write it relative to the workspace root")
ENV_NAME = checked("variable name", lambda v: None if _ENV_NAME.match(v) else
                   f"is not an environment variable name ({shown(v)})",
                   fix="letters, digits and '_', not starting with a digit")
KEBAB = checked("kebab-case name", lambda v: None if _KEBAB.match(v) else f"must be kebab-case, not {shown(v)}",
                fix='lower-case words joined by "-", e.g. "github-token"')


# Kubernetes names: an object's name (RFC 1123 label) and an image reference, either empty (unset).
_K8S_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\Z")
_IMAGE_REF = re.compile(r"^[a-z0-9]+([._-][a-z0-9]+)*(\.[a-z0-9-]+)*(:[0-9]+)?(/[a-z0-9]+([._-]+[a-z0-9]+)*)*"
                        r"(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(@sha256:[0-9a-f]{64})?\Z")
K8S_NAME = checked("Kubernetes name", lambda v: None if not v or _K8S_NAME.match(v) else
                   f"is not a Kubernetes name ({shown(v)})",
                   fix='lower-case letters, digits and "-", at most 63, e.g. "agents"')
IMAGE_REF = checked("image reference", lambda v: None if not v or _IMAGE_REF.match(v) else
                    f"is not an image reference ({shown(v)})",
                    fix='e.g. "registry.example.com/team/dejima-filter:1.4" (as `docker push` took it)')


def _published(value: int | str) -> int | str:
    parse_published(value)
    return value  # kept as written: the plan parses it again, with where it came from


PUBLISH = Kind("published port", "a port number or a string such as \"8080:3000\"", (int, str), _published,
               "published ports")


def is_kebab(text: str) -> bool:
    return _KEBAB.match(text) is not None


def reasons_name_denied(values: dict[str, Any]) -> None:
    """A table rule: every ``deny_reasons`` key is an entry of the same table's ``deny``."""
    deny = values.get("deny", ())
    for entry in values.get("deny_reasons", {}):
        if entry not in deny:
            raise Invalid("is a reason for an entry that is not in deny",
                          "add the entry to deny, or remove the reason", ("deny_reasons", entry))
