"""How a harness reaches its backend through dejima's proxy, when the backend's own variables are
not what the program reads (pure: manifests in, the session's variables and settings out).

Each program has its own way to take a base URL and a key: codex reads ``openai_base_url`` from
its config file and its key from CODEX_API_KEY, OpenCode's Anthropic SDK wants ``/v1`` in
ANTHROPIC_BASE_URL, Gemini CLI wants its auth type chosen in ~/.gemini/settings.json. A harness
says so per API family (``[harness.connect.<api>]``): variables and settings whose text may hold
``{base_url}`` (the backend's route through the proxy, as the session reaches it) and
``{placeholder}`` (the placeholder the session holds instead of the route's secret). Settings it
needs whatever the backend (update checks, first-run prompts) are ``[harness.files]``.

Settings files live in the session's home (``~/...``, JSON or TOML); the values are merged into
what is there, so the program's own state in the same file is kept.
"""

from __future__ import annotations

import copy
import string
from collections.abc import Iterator, Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any

from dejima.core.schema import Invalid

TEMPLATE_NAMES = ("base_url", "placeholder")
SETTINGS_FORMATS = {".json": "json", ".toml": "toml"}


@dataclass(frozen=True, slots=True)
class Connect:
    """``[harness.connect.<api>]``: what the program needs to reach a backend of that API."""

    env: Mapping[str, str] = field(default_factory=dict)
    files: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # "~/.codex/config.toml" -> values


@dataclass(frozen=True, slots=True)
class Connection:
    """What a session gets for its harness: variables, and settings merged into home files."""

    env: Mapping[str, str] = field(default_factory=dict)
    files: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # path relative to the home -> values


def template_names(text: str) -> list[str]:
    """The ``{name}`` fields of ``text``; raises Invalid for a malformed one or an unknown name."""
    try:
        parsed = [(name, spec or conv) for _, name, spec, conv in string.Formatter().parse(text) if name is not None]
    except ValueError as exc:
        raise Invalid(f"is not a valid template ({exc})",
                      "write {base_url} or {placeholder}; '{{' for a brace") from None
    fields = [name for name, formatted in parsed if not formatted]
    malformed = [name for name, formatted in parsed if formatted]
    if malformed:
        raise Invalid(f"formats {{{malformed[0]}}} with a conversion or spec, which dejima does not do",
                      "write the name alone: {base_url} or {placeholder}")
    unknown = sorted({name for name in fields if name not in TEMPLATE_NAMES})
    if unknown:
        raise Invalid(f"names {{{unknown[0]}}}, which dejima does not fill",
                      f"the names it fills: {', '.join('{' + n + '}' for n in TEMPLATE_NAMES)}")
    return fields


def check_templates(value: Any) -> Any:
    """Every string inside ``value`` (settings: tables, lists, scalars) is a valid template."""
    if isinstance(value, str):
        template_names(value)
    elif isinstance(value, dict):
        for name, item in value.items():
            try:
                check_templates(item)
            except Invalid as exc:
                raise exc.under(name) from None
    elif isinstance(value, list):
        for index, item in enumerate(value):
            try:
                check_templates(item)
            except Invalid as exc:
                raise exc.under(index) from None
    return value


def home_file(path: str) -> str:
    """``~/dir/file.json`` -> ``dir/file.json``; raises Invalid for anything outside the home or
    in a format dejima cannot merge."""
    inner = path[2:] if path.startswith("~/") else ""
    parts = inner.split("/")
    if not inner or any(p in ("", ".", "..") for p in parts):
        raise Invalid(f"must be a file in the session's home written ~/dir/file, not {path!r}",
                      "e.g. \"~/.codex/config.toml\"")
    if not any(inner.endswith(suffix) for suffix in SETTINGS_FORMATS):
        raise Invalid(f"must end in {' or '.join(SETTINGS_FORMATS)} (the formats dejima merges), not {path!r}")
    return inner


def settings_format(path: str) -> str:
    return next(fmt for suffix, fmt in SETTINGS_FORMATS.items() if path.endswith(suffix))


def _filled(value: Any, values: Mapping[str, str]) -> Any:
    if isinstance(value, str):
        return value.format_map(values)
    if isinstance(value, dict):
        return {name: _filled(item, values) for name, item in value.items()}
    if isinstance(value, list):
        return [_filled(item, values) for item in value]
    return value


def merge_into(target: MutableMapping[str, Any], values: Mapping[str, Any]) -> MutableMapping[str, Any]:
    """``values`` laid over ``target``, in place: tables merged key by key, anything else replaced.
    One rule for every settings file dejima merges into (JSON, and TOML documents as tomlkit keeps
    them, comments and order included)."""
    for name, value in values.items():
        current = target.get(name)
        if isinstance(value, Mapping) and isinstance(current, MutableMapping):
            merge_into(current, value)
        else:
            target[name] = value
    return target


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def uses_route(connect: Connect) -> bool:
    """Whether any text of ``connect`` needs the backend's route to be filled."""
    return any(template_names(text) for text in _strings({"env": connect.env, "files": connect.files}))


def connection(files: Mapping[str, Mapping[str, Any]], connect: Connect | None,
               base_url: str | None, placeholder: str | None) -> Connection:
    """The harness's settings for this session: ``files`` (always, taken as written) with
    ``connect``'s (for the backend's API, templates filled) laid over them. ``base_url``/``placeholder``: the
    backend's route as the session reaches it (None when the session has no such route: then a
    ``connect`` that needs them is left out, and the caller says so)."""
    values = {"base_url": base_url or "", "placeholder": placeholder or ""}
    # Copies: the manifest's own tables are merged into, never changed.
    settings: dict[str, dict[str, Any]] = {home_file(path): copy.deepcopy(dict(v)) for path, v in files.items()}
    env: dict[str, str] = {}
    if connect is not None and (base_url is not None or not uses_route(connect)):
        env = {name: text.format_map(values) for name, text in connect.env.items()}
        for path, more in connect.files.items():
            inner = home_file(path)
            merge_into(settings.setdefault(inner, {}), _filled(dict(more), values))
    return Connection(env, settings)


__all__ = ["Connect", "Connection", "check_templates", "connection", "home_file", "merge_into", "settings_format",
           "template_names", "uses_route"]
