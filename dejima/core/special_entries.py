"""Allowed address entries that reach special places: refused unless an override names them.

An IPv4 literal on the allow list becomes a static accept rule in the filter. A literal that
covers cloud metadata, this host or the engine's gateway would hand the session what promise 3
keeps from allowed names' answers; one shorter than /8 covers so much of the internet that the
allow list stops meaning anything. Such an entry is refused unless an override names the same
entry exactly (``--allow-special ENTRY`` or ``[network] allow_special``); the boundary card
shows every override in use.

A live grant of an address (`dejima-allow ADDRESS`) is held to the same rule, ``why_special``, in
the filter: the host's addresses and the gateway it refuses are the ones the start found, and the
grant's override is `dejima-allow ADDRESS --allow-special ADDRESS`.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass

from dejima.core.egress import _METADATA, Entry, IPNetwork, PolicyError
from dejima.errors import ExitStatus

BROADEST_PREFIX = 8  # an IPv4 network shorter than /8 holds more than 1/256 of all addresses
LINK_LOCAL = ipaddress.ip_network("169.254.0.0/16")


class SpecialEntryError(PolicyError):
    reference = "special-egress-entry"

    def __init__(self, message: str, *, hint: str) -> None:
        super().__init__(message, hint=hint, exit_code=ExitStatus.USAGE)  # bad input, wherever it was written


@dataclass(frozen=True, slots=True)
class Place:
    network: IPNetwork
    what: str


@dataclass(frozen=True, slots=True)
class Unlocked:
    """A special entry the user let through with an override, for the boundary card."""

    entry: Entry
    reason: str
    override_origin: str


def special_places(host_addresses: Sequence[IPNetwork], gateway: IPNetwork | None) -> tuple[Place, ...]:
    """Where no allowed literal may reach without an override. The host's loopback is left out:
    127.0.0.0/8 in the session is the shared namespace's own, not the host's."""
    places = [Place(LINK_LOCAL, "link-local, where clouds serve instance metadata and credentials")]
    places += [Place(n, "a cloud metadata service") for n in _METADATA]
    if gateway is not None:
        places.append(Place(gateway, "the container engine's gateway (the host, seen from containers)"))
    places += [Place(n, "an address of this host") for n in host_addresses
               if not n.network_address.is_loopback and n != gateway]
    return tuple(places)


def _spelled(network: IPNetwork) -> str:
    return str(network.network_address) if network.num_addresses == 1 else str(network)


def why_special(entry: Entry, places: Sequence[Place]) -> str | None:
    """Why ``entry`` needs an override, or None when it is an ordinary literal (or a name)."""
    network = entry.network
    if network is None:
        return None
    if network.version == 4 and network.prefixlen < BROADEST_PREFIX:
        return (f"covers {network.num_addresses:,} addresses, more than 1/256 of the internet "
                f"(networks shorter than /{BROADEST_PREFIX} are refused)")
    for place in places:
        if place.network.version != network.version or not network.overlaps(place.network):
            continue
        inside = network.subnet_of(place.network) and network != place.network  # type: ignore[arg-type]
        return f"{'is in' if inside else 'reaches'} {_spelled(place.network)}, {place.what}"
    return None


def grant_places(denied_addresses: Sequence[IPNetwork]) -> tuple[Place, ...]:
    """The special places as a session's filter knows them: its policy's denied addresses are the
    host's own and the engine's gateway (the gateway is the host's too, on its bridge)."""
    return special_places(denied_addresses, None)


def _hint(entry: Entry, settings_source: str) -> str:
    return (f"remove it, or narrow it to what the session needs; if the session really must reach it, name "
            f"the same entry as an override: --allow-special {entry.canonical} "
            f"(or allow_special = [\"{entry.canonical}\"] under [network] in {settings_source})")


def check_special(allowed: Sequence[Entry], overrides: Sequence[Entry], places: Sequence[Place],
                  settings_source: str) -> tuple[Unlocked, ...]:
    """The special entries that overrides unlock; raises on a special entry without its override
    and on an override that names no allowed entry (a typo would otherwise pass unnoticed)."""
    by_canonical = {o.canonical: o for o in overrides}
    unlocked: dict[str, Unlocked] = {}
    for entry in allowed:
        reason = why_special(entry, places)
        if reason is None:
            continue
        override = by_canonical.get(entry.canonical)
        if override is None:
            raise SpecialEntryError(f"{entry.origin}: egress entry {entry.text!r} {reason}; such an entry "
                                    "needs an override that names it", hint=_hint(entry, settings_source))
        unlocked.setdefault(entry.canonical, Unlocked(entry, reason, override.origin))
    used = {e.canonical for e in allowed}
    for override in overrides:
        if override.canonical not in used:
            raise SpecialEntryError(
                f"{override.origin}: {override.text!r} overrides nothing: no allowed entry is exactly "
                f"{override.canonical}",
                hint=f"an override unlocks the allow entry written the same way: add --allow {override.canonical} "
                "(or the same entry to [network] allow), or remove the override",
            )
    return tuple(unlocked.values())
