"""Editing TOML text a person or a program also writes, keeping its comments and order, and writing
values out as TOML a person reads and dejima reads back (tomlkit, imported only here and only when
a file is edited or shown: reading needs tomllib alone)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from dejima.core.connect import merge_into


def merged_text(text: str, values: Mapping[str, Any]) -> str:
    """``values`` laid over the document ``text`` (core/connect.py's merge_into). Raises
    ValueError (tomlkit's parse errors are ValueErrors) for text that is not TOML."""
    import tomlkit

    document = tomlkit.parse(text)
    merge_into(document, values)
    return tomlkit.dumps(document)


def with_entries(text: str, table: str, key: str, entries: Iterable[str]) -> str:
    """``text`` with each of ``entries`` appended to the list ``[table] key`` unless already there."""
    import tomlkit

    document = tomlkit.parse(text)
    section = document.setdefault(table, tomlkit.table())
    listed = section.setdefault(key, tomlkit.array())
    for entry in entries:
        if entry not in listed:
            listed.append(entry)
    return tomlkit.dumps(document)


_LINE = 100  # a list longer than this on one line is written one item per line


def toml_text(data: Mapping[str, Any]) -> str:
    """``data`` (strings, numbers, booleans, lists, tables; None left out) as TOML: top-level tables as
    [sections] after the plain keys, deeper ones inline. Characters that draw on a terminal or reorder
    text (controls, bidi marks) are written as \\uXXXX escapes, which TOML reads back as the same value."""
    import tomlkit

    document = tomlkit.document()
    plain = {k: v for k, v in data.items() if v is not None and not isinstance(v, Mapping)}
    for name, value in plain.items():
        document[name] = _item(value)
    for name, value in data.items():
        if isinstance(value, Mapping):
            section = tomlkit.table()
            for key, inner in value.items():
                if inner is not None:
                    section[key] = _item(inner)
            document[name] = section
    return "".join(_visible(ch) for ch in tomlkit.dumps(document))


def _item(value: Any) -> Any:
    import tomlkit

    if isinstance(value, Mapping):
        table = tomlkit.inline_table()
        table.update({k: _item(v) for k, v in value.items() if v is not None})
        return table
    if isinstance(value, (list, tuple)):
        array = tomlkit.array()
        array.extend(_item(v) for v in value)
        return array.multiline(len(tomlkit.dumps({"k": array})) > _LINE)
    return value


def _visible(ch: str) -> str:
    import unicodedata

    if ch == "\n" or unicodedata.category(ch) not in ("Cc", "Cf", "Zl", "Zp"):
        return ch
    return f"\\u{ord(ch):04x}"


__all__ = ["merged_text", "toml_text", "with_entries"]
