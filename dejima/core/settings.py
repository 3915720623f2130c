"""The user's settings file: parsed strictly into a frozen ``Settings``.

A settings file that is absent means "defaults". A file that is present must be valid: empty,
unreadable, malformed TOML, unknown keys and wrong types are errors naming the file, the key and
the fix. dejima never falls back to defaults behind the user's back.
"""

from __future__ import annotations

import difflib
import tomllib
from dataclasses import dataclass, field
from typing import Any, Callable

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


@dataclass(frozen=True, slots=True)
class Settings:
    images: ImageSettings = field(default_factory=ImageSettings)
    session: SessionSettings = field(default_factory=SessionSettings)


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


def _seconds(value: float) -> str | None:
    return None if 0 < value <= 3600 else "must be a number of seconds between 0 and 3600"


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
    },
}

_DEFAULTS = {"images": ImageSettings(), "session": SessionSettings()}


def _suggest(word: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(word, choices, n=1)
    known = ", ".join(choices)
    return f"did you mean '{close[0]}'? Known keys: {known}" if close else f"known keys: {known}"


def _check_type(value: object, kind: type) -> bool:
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, kind) and not isinstance(value, bool)


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
            expected = "a number" if spec.kind is float else f"a {spec.kind.__name__}"
            raise SettingsError(
                f"{source}: '{table}.{key}' must be {expected}, not {type(value).__name__} {value!r}",
                hint=f"{table}.{key}: {spec.help}",
            )
        problem = spec.check(value)
        if problem:
            raise SettingsError(
                f"{source}: '{table}.{key}' {problem} (got {value!r})",
                hint=f"{table}.{key}: {spec.help}",
            )
        values[key] = float(value) if spec.kind is float else value
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
    return Settings(
        images=ImageSettings(**sections.get("images", {})),
        session=SessionSettings(**sections.get("session", {})),
    )


def render_settings_reference() -> str:
    """Markdown reference of every settings key, generated from SCHEMA (docs/settings.md)."""
    lines = ["| key | type | default | meaning |", "| --- | --- | --- | --- |"]
    for table, keys in SCHEMA.items():
        for key, spec in keys.items():
            default = getattr(_DEFAULTS[table], key)
            kind = "number" if spec.kind is float else "string"
            lines.append(f"| `{table}.{key}` | {kind} | `{default!r}` | {spec.help} |")
    return "\n".join(lines) + "\n"
