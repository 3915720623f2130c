"""Settings a harness needs, merged into files of the session's home before each session.

The home is the session's to change: dejima.adapters.home_files opens the way and writes the
result without following anything planted there. A file the program left that cannot be read as
its format (not UTF-8, broken, nested too deep, not a file at all) is replaced by the settings
alone, and the caller is told.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from dejima.adapters.home_files import Owner, open_within, read_existing, replace
from dejima.adapters.tomledit import merged_text
from dejima.core.connect import merge_into, settings_format

MAX_BYTES = 4 * 1024 * 1024  # a settings file larger than this is not one dejima merges into


def _with(fmt: str, data: bytes | None, values: Mapping[str, Any]) -> bytes:
    """The file's text with ``values`` merged in; ValueError when it cannot be read as ``fmt``
    (json's, tomlkit's and UnicodeDecodeError all are, and so is nesting too deep to parse)."""
    text = data.decode("utf-8") if data else ""
    try:
        if fmt == "toml":
            return merged_text(text, values).encode()
        current = json.loads(text) if text.strip() else {}
    except RecursionError:  # the parsers recurse per nesting level
        raise ValueError("nested too deep to read") from None
    if not isinstance(current, dict):
        raise ValueError("its top level is not an object")
    return (json.dumps(merge_into(current, values), indent=2, ensure_ascii=False) + "\n").encode()


def merge_settings(home: str, files: Mapping[str, Mapping[str, Any]], owner: Owner) -> list[str]:
    """Merge ``files`` (path in the home -> settings) into the home; returns one line per thing that was
    replaced rather than merged into (a file that could not be read, whatever stood in the way)."""
    replaced: list[str] = []
    for path, values in files.items():
        *parents, name = path.split("/")
        fmt = settings_format(path)
        directory = open_within(home, parents, owner, replaced)
        try:
            try:
                text = _with(fmt, read_existing(directory, name, MAX_BYTES), values)
            except ValueError as exc:
                replaced.append(f"~/{path} could not be read as {fmt.upper()} ({exc}); replaced by the harness's "
                                "settings")
                text = _with(fmt, None, values)
            replace(directory, name, text, 0o600, owner, None, f"~/{path}")
        finally:
            os.close(directory)
    return replaced


__all__ = ["merge_settings"]
