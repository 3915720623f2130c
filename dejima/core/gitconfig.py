"""A git-config reader that follows git's own rules, for auditing (never runs git).

Section and key names are case-insensitive, subsection names are not; values may be quoted, may
continue over lines with a trailing backslash, and lose trailing comments. The result is a list
of (``section[.subsection].key``, value) pairs with section and key lower-cased, in file order.
"""

from __future__ import annotations

import re

_SECTION = re.compile(r'^\s*\[\s*([A-Za-z0-9.-]+)(?:\s+"((?:[^"\\]|\\.)*)")?\s*\]\s*(.*)$')
_KEY = re.compile(r"^\s*([A-Za-z][A-Za-z0-9-]*)\s*(?:=\s*(.*))?$")


class GitConfigError(ValueError):
    pass


def _value(raw: str) -> str:
    out: list[tuple[str, bool]] = []  # (character, was it quoted or escaped)
    quoted, i = False, 0
    while i < len(raw):
        ch = raw[i]
        if ch == "\\" and i + 1 < len(raw):
            nxt = raw[i + 1]
            out.append(({"n": "\n", "t": "\t", "b": "\b"}.get(nxt, nxt), True))
            i += 2
            continue
        if ch == '"':
            quoted = not quoted
        elif ch in "#;" and not quoted:
            break
        else:
            out.append((ch, quoted))
        i += 1
    if quoted:
        raise GitConfigError("unterminated quote")
    # Whitespace outside quotes at either end is not part of the value.
    while out and out[-1][0].isspace() and not out[-1][1]:
        out.pop()
    while out and out[0][0].isspace() and not out[0][1]:
        out.pop(0)
    return "".join(ch for ch, _ in out)


def parse_git_config(text: str) -> list[tuple[str, str]]:
    """Raises GitConfigError where git itself would refuse the file (the audit fails closed)."""
    lines = text.replace("\r\n", "\n").split("\n")
    pairs: list[tuple[str, str]] = []
    section: str | None = None
    index = 0
    while index < len(lines):
        line = lines[index]
        index += 1
        # Continuation: a backslash at the very end joins the next line (inside values).
        while line.endswith("\\") and not line.endswith("\\\\") and index < len(lines):
            line = line[:-1] + lines[index]
            index += 1
        stripped = line.strip()
        if not stripped or stripped[0] in "#;":
            continue
        match = _SECTION.match(line)
        if match:
            name, sub, rest = match.groups()
            if "." in name and sub is None:  # legacy [section.subsection]: subsection lower-cased
                head, _, tail = name.partition(".")
                section = f"{head.lower()}.{tail.lower()}"
            else:
                section = name.lower() + (f".{sub}" if sub is not None else "")
            if rest.strip() and rest.strip()[0] not in "#;":
                line = rest
            else:
                continue
        if section is None:
            raise GitConfigError(f"key outside any section: {stripped[:40]!r}")
        key = _KEY.match(line)
        if not key:
            raise GitConfigError(f"not a key = value line: {stripped[:40]!r}")
        name, raw = key.groups()
        pairs.append((f"{section}.{name.lower()}", "true" if raw is None else _value(raw)))
    return pairs
