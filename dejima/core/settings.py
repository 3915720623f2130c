"""The user's settings file: parsed strictly into a frozen ``Settings``.

A settings file that is absent means "defaults". A file that is present must be valid: empty,
unreadable, malformed TOML, unknown keys and wrong types are errors naming the file, the key and
the fix. dejima never falls back to defaults behind the user's back.
"""

from __future__ import annotations

import difflib
import ipaddress
import tomllib
from dataclasses import dataclass, field
from typing import Any, Callable

from dejima.core.egress import PolicyError, parse_entry
from dejima.core.limits import MIN_TMP, check_memory, check_size
from dejima.errors import SettingsError

BASE_FALLBACKS = ("debootstrap", "none")


@dataclass(frozen=True, slots=True)
class ImageSettings:
    base: str = "debian:bookworm-slim"
    base_fallback: str = "debootstrap"
    bootstrap_mirror: str = "http://deb.debian.org/debian"
    bootstrap_suite: str = "bookworm"
    extra_ca_dir: str = "/usr/local/share/ca-certificates"


@dataclass(frozen=True, slots=True)
class SessionSettings:
    network: str = "bridge"
    stop_timeout: float = 5.0
    ready_timeout: float = 30.0
    protect_git_hooks: bool = True
    notify_denials: bool = True


@dataclass(frozen=True, slots=True)
class NetworkSettings:
    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()
    deny_reasons: dict[str, str] = field(default_factory=dict)
    upstream_dns: tuple[str, ...] = ()
    answer_networks: tuple[str, ...] = ()
    allow_special: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class LimitSettings:
    session_pids: int = 4096
    session_memory: str = "75%"
    session_cpu_shares: int = 512
    session_tmp_size: str = "1g"
    filter_pids: int = 512
    filter_memory: str = "256m"
    filter_cpu_shares: int = 1024


@dataclass(frozen=True, slots=True)
class CredentialSettings:
    upstreams: dict[str, str] = field(default_factory=dict)
    extra_ca_file: str = ""
    decoys: bool = True


@dataclass(frozen=True, slots=True)
class Settings:
    images: ImageSettings = field(default_factory=ImageSettings)
    session: SessionSettings = field(default_factory=SessionSettings)
    network: NetworkSettings = field(default_factory=NetworkSettings)
    limits: LimitSettings = field(default_factory=LimitSettings)
    credentials: CredentialSettings = field(default_factory=CredentialSettings)


@dataclass(frozen=True, slots=True)
class Key:
    """One settings key: its type, a check of its value, and the help shown in docs and errors."""

    name: str
    kind: type
    help: str
    check: Callable[[Any], str | None] = lambda value: None


def _non_empty(value: str) -> str | None:
    return "must not be empty" if not value.strip() else None


def _one_of(*choices: str) -> Callable[[Any], str | None]:
    def check(value: str) -> str | None:
        return None if value in choices else f"must be one of {', '.join(map(repr, choices))}"

    return check


def _http_url(value: str) -> str | None:
    return None if value.startswith(("http://", "https://")) else "must be an http:// or https:// URL"


def _absolute_path(value: str) -> str | None:
    return None if value.startswith("/") else "must be an absolute path"


def _egress_entries(value: list[str]) -> str | None:
    for index, text in enumerate(value):
        try:
            parse_entry(text, f"[{index}]")
        except PolicyError as exc:
            return f"entry {exc.message}"
    return None


def _ipv4_addresses(value: list[str]) -> str | None:
    for text in value:
        try:
            address = ipaddress.ip_address(text)
        except ValueError:
            return f"holds {text!r}, which is not an IP address"
        if address.version != 4:
            return f"holds {text!r}: only IPv4 resolvers are supported (sessions have no IPv6)"
        if address.is_loopback:
            return f"holds {text!r}: a loopback resolver on the host is not reachable from a container"
    return None


def _ipv4_networks(value: list[str]) -> str | None:
    for text in value:
        try:
            network = ipaddress.ip_network(text, strict=True)
        except ValueError as exc:
            return f"holds {text!r}, which is not a network ({exc})"
        if network.version != 4:
            return f"holds {text!r}: sessions have no IPv6"
    return None


def _seconds(value: float) -> str | None:
    return None if 0 < value <= 3600 else "must be a number of seconds between 0 and 3600"


def _between(low: int, high: int) -> Callable[[int], str | None]:
    def check(value: int) -> str | None:
        return None if low <= value <= high else f"must be a whole number from {low} to {high}"

    return check


def _upstream_urls(value: dict[str, str]) -> str | None:
    for route, url in value.items():
        if not url.startswith(("https://", "http://127.", "http://localhost")):
            return (f"sends route {route!r} to {url!r}: secrets travel over https://, or plain http to "
                    "this host's loopback (a local gateway, a test)")
    return None


def _tmp_size(value: str) -> str | None:
    return check_size(value, MIN_TMP)


SCHEMA: dict[str, dict[str, Key]] = {
    "images": {
        "base": Key("base", str, "Image the filter and session images are built on.", _non_empty),
        "base_fallback": Key(
            "base_fallback",
            str,
            "What to do when `base` cannot be pulled: `debootstrap` builds a Debian minbase on the host "
            "(needs root and debootstrap) and says so; `none` stops with an error.",
            _one_of(*BASE_FALLBACKS),
        ),
        "bootstrap_mirror": Key(
            "bootstrap_mirror", str, "Debian mirror debootstrap downloads from.", _http_url
        ),
        "bootstrap_suite": Key("bootstrap_suite", str, "Debian suite debootstrap installs.", _non_empty),
        "extra_ca_dir": Key(
            "extra_ca_dir",
            str,
            "Host directory of extra CA certificates (`*.crt`) that image builds must trust, "
            "e.g. a corporate TLS proxy's. The directory update-ca-certificates reads.",
            _absolute_path,
        ),
    },
    "session": {
        "network": Key(
            "network", str, "Docker network the filter container joins; the session only ever "
            "reaches it through the filter.", _non_empty,
        ),
        "stop_timeout": Key(
            "stop_timeout", float, "Seconds a command gets to exit after dejima forwards a signal, "
            "before its containers are removed.", _seconds,
        ),
        "ready_timeout": Key(
            "ready_timeout", float, "Seconds the filter may take to apply and verify its ruleset.", _seconds
        ),
        "protect_git_hooks": Key(
            "protect_git_hooks", bool, "Mount the workspace's .git/hooks read-only in the session, so no hook "
            "can be planted there (the exit audit still checks); false lets the session write hooks.",
        ),
        "notify_denials": Key(
            "notify_denials", bool, "In an interactive session, show each newly refused name in the terminal's "
            "title (it never draws over the agent's screen), with the `dejima-allow` command that grants it.",
        ),
    },
    "network": {
        "allow": Key(
            "allow", list, "Egress entries every session may reach: `example.com`, `*.example.com` (subdomains "
            "only), `example.com:443`, IPv4 addresses and networks. TCP only.", _egress_entries,
        ),
        "deny": Key("deny", list, "Entries no session may reach; they beat `allow`.", _egress_entries),
        "deny_reasons": Key(
            "deny_reasons", dict, "Reason shown to the agent and to you, per `deny` entry "
            "(`{ \"evil.example\" = \"known exfiltration host\" }`).",
        ),
        "upstream_dns": Key(
            "upstream_dns", list, "IPv4 resolvers the filter forwards allowed queries to (default: the "
            "host's, from /etc/resolv.conf). Corporate resolvers go here.", _ipv4_addresses,
        ),
        "answer_networks": Key(
            "answer_networks", list, "Private IPv4 networks an allowed name's answer may point into "
            "(an internal mirror at 10.20.0.0/16, say). Answers in private, loopback or metadata ranges "
            "are refused otherwise; the host's and the engine gateway's addresses always are.", _ipv4_networks,
        ),
        "allow_special": Key(
            "allow_special", list, "Overrides for allowed address entries that reach special places: networks "
            "shorter than /8, link-local and cloud metadata addresses, this host's addresses, the engine "
            "gateway. Such an `allow` entry is refused unless this list holds the same entry, written the "
            "same way (`allow = [\"169.254.169.254:80\"]` needs `allow_special = [\"169.254.169.254:80\"]`); "
            "the boundary card shows each one in use. `--allow-special` does the same for one run.",
            _egress_entries,
        ),
    },
    "limits": {
        "session_pids": Key("session_pids", int, "Most processes and threads the session may run at once "
                            "(a fork bomb stops here).", _between(16, 4194304)),
        "session_memory": Key("session_memory", str, "Memory of the session, /tmp included, with no swap beyond "
                              "it: a size (`\"4g\"`, `\"512m\"`) or a share of the engine's memory (`\"75%\"`). "
                              "Past it the kernel ends a process of the session (the largest, "
                              "usually the one allocating).", check_memory),
        "session_cpu_shares": Key("session_cpu_shares", int, "CPU weight of the session against other "
                                  "containers and services (the engine's default is 1024): under contention "
                                  "a busy session yields.", _between(2, 262144)),
        "session_tmp_size": Key("session_tmp_size", str, "Size of the session's /tmp (a tmpfs in memory).",
                                _tmp_size),
        "filter_pids": Key("filter_pids", int, "Most processes and threads of the filter (its resolver and "
                           "logger).", _between(16, 4194304)),
        "filter_memory": Key("filter_memory", str, "Memory of the filter, as for `session_memory`; it has its "
                             "own cgroup, so the session hitting its limit never takes the filter down.",
                             check_memory),
        "filter_cpu_shares": Key("filter_cpu_shares", int, "CPU weight of the filter; above the session's, so "
                                 "DNS keeps answering while the session is busy.", _between(2, 262144)),
    },
    "credentials": {
        "upstreams": Key(
            "upstreams", dict, "Where a credential route's secret goes instead of the manifest's upstream, per "
            "route name: a corporate gateway, a regional endpoint, a test world "
            "(`{ \"anthropic-api-key\" = \"https://llm-gateway.corp.example/anthropic\" }`). "
            "`dejima manifests list` shows the route names.", _upstream_urls,
        ),
        "extra_ca_file": Key(
            "extra_ca_file", str, "A PEM bundle the credential proxy trusts besides the system's, for "
            "upstreams behind a corporate TLS proxy (empty: the system store only).",
        ),
        "decoys": Key(
            "decoys", bool, "Plant decoy credentials in sessions (fake AWS keys and the like, in the "
            "environment and ~/.aws/credentials): any use of one is refused and recorded as a sign the agent "
            "went looking for secrets.",
        ),
    },
}

_DEFAULTS = {"images": ImageSettings(), "session": SessionSettings(), "network": NetworkSettings(),
             "limits": LimitSettings(), "credentials": CredentialSettings()}
_KIND_NAMES = {float: "a number", str: "a string", list: "a list of strings", dict: "a table of strings",
               bool: "true or false", int: "a whole number"}


def _suggest(word: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(word, choices, n=1)
    known = ", ".join(choices)
    return f"did you mean '{close[0]}'? Known keys: {known}" if close else f"known keys: {known}"


def _check_type(value: object, kind: type) -> bool:
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind is list:
        return isinstance(value, list) and all(isinstance(item, str) for item in value)
    if kind is dict:
        return isinstance(value, dict) and all(isinstance(item, str) for item in value.values())
    if kind is bool:
        return isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, kind) and not isinstance(value, bool)


def _type_name(value: object) -> str:
    return {bool: "bool", int: "int", float: "float", str: "str", list: "list", dict: "table"}.get(
        type(value), type(value).__name__)


def _parse_table(table: str, data: object, source: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise SettingsError(
            f"{source}: '{table}' must be a table",
            hint=f"write it as a [{table}] section",
        )
    schema = SCHEMA[table]
    values: dict[str, Any] = {}
    for key, value in data.items():
        if key not in schema:
            raise SettingsError(
                f"{source}: unknown key '{table}.{key}'",
                hint=f"remove it or fix its name; {_suggest(key, list(schema))}",
            )
        spec = schema[key]
        if not _check_type(value, spec.kind):
            expected = _KIND_NAMES[spec.kind] if spec.kind is not str else "a str"
            raise SettingsError(
                f"{source}: '{table}.{key}' must be {expected}, not {_type_name(value)} {value!r}",
                hint=f"{table}.{key}: {spec.help}",
            )
        problem = spec.check(value)
        if problem:
            raise SettingsError(
                f"{source}: '{table}.{key}' {problem} (got {value!r})",
                hint=f"{table}.{key}: {spec.help}",
            )
        values[key] = float(value) if spec.kind is float else tuple(value) if spec.kind is list else value
    return values


def parse_settings(text: str, source: str) -> Settings:
    """Parse the text of a settings file; ``source`` names the file in messages."""
    if not text.strip():
        raise SettingsError(
            f"{source}: the settings file is empty",
            hint="delete the file to use the defaults, or add settings, e.g. [images] base = \"debian:bookworm-slim\"",
            reference="empty-settings",
        )
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SettingsError(
            f"{source}: not valid TOML: {exc}",
            hint="fix the syntax at that line (see docs/settings.md for every key)",
        ) from exc
    if not data:
        raise SettingsError(
            f"{source}: the settings file holds only comments",
            hint="delete the file to use the defaults, or add settings",
            reference="empty-settings",
        )
    sections: dict[str, Any] = {}
    for table, body in data.items():
        if table not in SCHEMA:
            raise SettingsError(
                f"{source}: unknown section or key '{table}'",
                hint=f"settings live in sections; {_suggest(table, list(SCHEMA))}",
            )
        sections[table] = _parse_table(table, body, source)
    network = NetworkSettings(**sections.get("network", {}))
    unknown = sorted(set(network.deny_reasons) - set(network.deny))
    if unknown:
        raise SettingsError(
            f"{source}: 'network.deny_reasons' names {', '.join(map(repr, unknown))}, which is not in 'network.deny'",
            hint="a reason belongs to a deny entry: add the entry to network.deny, or remove the reason",
        )
    return Settings(
        images=ImageSettings(**sections.get("images", {})),
        session=SessionSettings(**sections.get("session", {})),
        network=network,
        limits=LimitSettings(**sections.get("limits", {})),
        credentials=CredentialSettings(**sections.get("credentials", {})),
    )


def render_settings_reference() -> str:
    """Markdown reference of every settings key, generated from SCHEMA (docs/settings.md)."""
    lines = ["| key | type | default | meaning |", "| --- | --- | --- | --- |"]
    for table, keys in SCHEMA.items():
        for key, spec in keys.items():
            default = getattr(_DEFAULTS[table], key)
            default = list(default) if isinstance(default, tuple) else default
            kind = {float: "number", str: "string", list: "list of strings", dict: "table", bool: "boolean",
                    int: "integer"}[spec.kind]
            lines.append(f"| `{table}.{key}` | {kind} | `{default!r}` | {spec.help} |")
    return "\n".join(lines) + "\n"
