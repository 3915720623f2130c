"""Editing TOML text a person or a program also writes, keeping its comments and order (tomlkit,
imported only here and only when a file is edited: reading needs tomllib alone)."""

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


__all__ = ["merged_text", "with_entries"]
