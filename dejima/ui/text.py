"""Text that came from a session (names, paths, commands, values), made safe to show.

Whatever the agent chose is data: it is printed as rich ``Text`` (never parsed as markup, so
``[/]`` cannot crash a table and ``[link=x]`` cannot hide what was sent), with every character a
terminal would act on or that would hide or reorder text shown as an escape (``\\u001b`` for ESC,
``\\u202e`` for a bidi override, ``\\u000a`` for a line break: a value cannot print a line of its
own), undecodable bytes (``os.fsdecode``'s surrogates) as ``\\xNN``, and capped in length with a
marker saying how much was left out.
"""

from __future__ import annotations

import re
import unicodedata
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # rich is imported by ``plain`` alone: escaping needs none of it
    from rich.text import Text

LIMIT = 300  # characters shown of one value; a DNS name is at most 253
MESSAGE_LIMIT = 4000  # a launcher message: a few paths and values
# Control, format (bidi, zero-width), line/paragraph separators, surrogates, private use, unassigned.
_HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn"})
_ORDINARY = re.compile(r"[ -~]*")  # printable ASCII needs no look


def _shown(char: str, keep_tabs: bool) -> str:
    point = ord(char)
    if 0xDC80 <= point <= 0xDCFF:
        return f"\\x{point - 0xDC00:02x}"
    from dejima.core.audit.names import INVISIBLE  # the audit package: only for text beyond ASCII

    if (char == "\t" and keep_tabs) or (
            unicodedata.category(char) not in _HIDDEN_CATEGORIES and not INVISIBLE.match(char)):
        return char
    return f"\\u{point:04x}" if point <= 0xFFFF else f"\\U{point:08x}"


def escaped(value: object, limit: int | None = LIMIT, keep_tabs: bool = False) -> str:
    """``value`` as one line of plain text: hidden and control characters escaped, at most
    ``limit`` characters then ``…[N more]`` (N counts the value's characters left out)."""
    text = value if isinstance(value, str) else str(value)
    if _ORDINARY.fullmatch(text) and (limit is None or len(text) <= limit):
        return text
    parts: list[str] = []
    length = 0
    for index, char in enumerate(text):
        piece = _shown(char, keep_tabs)
        if limit is not None and length + len(piece) > limit:
            return "".join(parts) + f"…[{len(text) - index} more]"
        parts.append(piece)
        length += len(piece)
    return "".join(parts)


def plain(value: object, style: str = "", limit: int | None = LIMIT) -> Text:
    """A table cell or a line of session-controlled text: escaped, capped, never markup."""
    from rich.text import Text

    return Text(escaped(value, limit), style=style)


__all__ = ["LIMIT", "MESSAGE_LIMIT", "escaped", "plain"]
