"""Config readers for the exit audit: any watched format in, a flat ``key path -> text`` map out.

The audit diffs config files key by key, so every format is reduced to the same shape:

- JSON (JSONC), TOML, YAML: nested keys joined with ``.``, list items as their index
  (``hooks.SessionStart.0.hooks.0.command``). Keys that already contain dots stay as they are
  (VS Code's ``chat.tools.autoApprove``, ``"[python]"`` blocks give ``[python].editor.x``).
  Scalars as text: strings as is, ``true``/``false``, ``null``, numbers and dates via ``str()``.
  An empty mapping or list below the root is kept as ``{}`` / ``[]`` so its key stays visible;
  a scalar document has the key ``""``.
- YAML: empty documents are skipped; keys of document N > 0 are prefixed with ``N.``
  (``1.services.web.image``). Only the safe loader is used, so tags never construct objects.
  Booleans are YAML 1.2's (``true``/``false`` only): a workflow's ``on:`` stays ``on``.
- INI: ``section.key``; keys before any section (npmrc, .yarnrc) have no prefix
  (``//registry.example/:_authToken``). Case kept, no interpolation, inline ``;``/``#`` kept
  in the value, a bare key is ``true``, ``[DEFAULT]`` is an ordinary section.
- dotenv: the variable name (``NODE_OPTIONS``); a repeated name keeps the last value, as tools do.
- XML: element local names (namespaces dropped) from the root, ``.``-joined; a tag repeated among
  its siblings gets a 0-based ``[i]``; attributes as ``@name`` on the element's path; text
  stripped (``project.build.plugins.plugin[1].artifactId``, ``project.build.plugins.plugin[1]@id``).

Everything fails closed with ConfigParseError: a file that cannot be read with certainty is
reported by the audit rather than silently skipped. That includes two entries that flatten to
the same key path, since one would otherwise hide the other.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from functools import cache
from itertools import islice
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # each parser's library is imported when a file of its format is read (yaml ~15 ms)
    import configparser
    import xml.etree.ElementTree as ElementTree

FORMATS = ("json", "toml", "yaml", "ini", "dotenv", "xml")
MAX_BYTES = 4 * 1024 * 1024
MAX_DEPTH = 64
MAX_KEYS = 20_000

Pairs = Iterator[tuple[str, str]]


class ConfigParseError(ValueError):
    pass


def parse_config(fmt: str, data: bytes) -> dict[str, str]:
    """Raises ValueError for an unknown format (a caller bug) and ConfigParseError for a bad file."""
    if fmt not in _READERS:
        raise ValueError(f"unknown config format {fmt!r} (known: {', '.join(FORMATS)})")
    if len(data) > MAX_BYTES:
        raise ConfigParseError(f"larger than {MAX_BYTES // (1024 * 1024)} MiB")
    try:
        text = data.decode("utf-8-sig")  # strict; a leading BOM is accepted and dropped
    except UnicodeDecodeError as error:
        raise ConfigParseError(f"not UTF-8 (byte {error.start})") from None
    try:
        return _collect(_READERS[fmt](text))
    except RecursionError:  # the stdlib parsers recurse per nesting level
        raise ConfigParseError(f"nested deeper than {MAX_DEPTH} levels") from None


def _collect(pairs: Iterable[tuple[str, str]]) -> dict[str, str]:
    flat: dict[str, str] = {}
    for key, value in pairs:  # consumed lazily, so alias bombs stop at the bound
        if key in flat:
            raise ConfigParseError(f"two entries flatten to the same key {key!r}")
        if len(flat) >= MAX_KEYS:
            raise ConfigParseError(f"more than {MAX_KEYS} keys")
        flat[key] = value
    return flat


def _text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    return value if isinstance(value, str) else str(value)


def _check_depth(levels: int) -> None:
    # Also stops YAML's self-referencing aliases, which are otherwise endless.
    if levels > MAX_DEPTH:
        raise ConfigParseError(f"nested deeper than {MAX_DEPTH} levels")


def _walk(value: object, path: tuple[str, ...]) -> Pairs:
    if isinstance(value, (set, frozenset)):  # a YAML !!set is a mapping to nulls
        value = dict.fromkeys(value)
    if isinstance(value, (dict, list, tuple)):
        _check_depth(len(path) + 1)
    if isinstance(value, dict):
        if not value and path:
            yield ".".join(path), "{}"
        for key, item in value.items():
            yield from _walk(item, (*path, _text(key)))
    elif isinstance(value, (list, tuple)):
        if not value and path:
            yield ".".join(path), "[]"
        for index, item in enumerate(value):
            yield from _walk(item, (*path, str(index)))
    else:
        yield ".".join(path), _text(value)


# --- JSON with comments -------------------------------------------------------------------------

# Strings are matched first, so "//" or "/*" inside them (URLs, globs) is left alone. Every token
# is possessive and runs to its end or the end of the text (an unterminated string is then refused
# by json.loads), so each character is scanned once even on hostile input.
_JSON_STRING = r'"(?:[^"\\]++|\\.)*+"?'
_JSON_COMMENT = re.compile(_JSON_STRING + r"|//[^\n]*+|/\*(?:[^*]++|\*(?!/))*+(?:\*/)?", re.S)
_JSON_TRAILING_COMMA = re.compile(_JSON_STRING + r"|,(?=\s*+[}\]])", re.S)


def _uncomment(token: str) -> str:
    if token.startswith("/*"):
        if len(token) < 4 or not token.endswith("*/"):
            raise ConfigParseError("invalid JSON: unterminated /* comment")
        return " "
    return " " if token.startswith("//") else token


def _strip_jsonc(text: str) -> str:
    plain = _JSON_COMMENT.sub(lambda m: _uncomment(m.group()), text)
    return _JSON_TRAILING_COMMA.sub(lambda m: "" if m.group() == "," else m.group(), plain)


def _read_json(text: str) -> Pairs:
    plain = _strip_jsonc(text)
    try:
        tree = json.loads(plain)  # a duplicate key keeps the last value, as VS Code does
    except json.JSONDecodeError as error:
        raise ConfigParseError(f"invalid JSON: {error.msg} (line {error.lineno})") from None
    except ValueError as error:  # e.g. an integer literal beyond Python's digit limit
        raise ConfigParseError(f"invalid JSON: {error}") from None
    return _walk(tree, ())


# --- TOML and YAML ------------------------------------------------------------------------------


# tomllib's time grows with the square of a dotted key's length (hours for one 4 MiB key), so
# dotted chains are measured first by a linear scan (possessive; dots in strings count too).
_TOML_DOTTED = re.compile(r"""(?<![\w-])(?:(?:[\w-]++|"(?:[^"\\\n]|\\.)*+"|'[^'\n]*+')\s*+\.\s*+)++""")
_TOML_DOTS_BUDGET = 4_000_000  # sum of squared chain lengths: about a second of tomllib work


def _check_toml_dotted_keys(text: str) -> None:
    cost = 0
    for chain in _TOML_DOTTED.finditer(text):
        dots = chain.group().count(".")
        if dots >= MAX_DEPTH:
            raise ConfigParseError(f"nested deeper than {MAX_DEPTH} levels")
        cost += dots * dots
    if cost > _TOML_DOTS_BUDGET:
        raise ConfigParseError("too many long dotted keys")


def _read_toml(text: str) -> Pairs:
    _check_toml_dotted_keys(text)
    try:
        tree = tomllib.loads(text)
    except ValueError as error:
        raise ConfigParseError(f"invalid TOML: {error}") from None
    return _walk(tree, ())


_BOOL_TAG = "tag:yaml.org,2002:bool"


@cache
def _safe_loader() -> Any:
    import yaml

    class SafeLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]  # C: faster
        # YAML 1.2 booleans only, as GitHub Actions and docker compose read them: with YAML 1.1's
        # yes/no/on/off a workflow's "on:" key would become "true".
        yaml_implicit_resolvers = {
            first: [(tag, regexp) for tag, regexp in resolvers if tag != _BOOL_TAG]
            for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
        }

    SafeLoader.add_implicit_resolver(_BOOL_TAG, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))
    return SafeLoader


def _read_yaml(text: str) -> Pairs:
    import yaml

    try:
        # Aliases are shared, not copied, so a "billion laughs" document loads small; its
        # flattening is what explodes, and _collect stops that at MAX_KEYS.
        documents = list(islice(yaml.load_all(text, Loader=_safe_loader()), MAX_KEYS + 1))
    except (yaml.YAMLError, ValueError) as error:  # ValueError: e.g. a timestamp like 2024-13-01
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise ConfigParseError(f"invalid YAML: {reason}") from None
    if len(documents) > MAX_KEYS:  # a million empty "---" documents would take seconds to read
        raise ConfigParseError(f"more than {MAX_KEYS} YAML documents")
    return _yaml_pairs(documents)


def _yaml_pairs(documents: list[object]) -> Pairs:
    for index, document in enumerate(documents):
        if document is not None:
            yield from _walk(document, (str(index),) if index else ())


# --- INI ----------------------------------------------------------------------------------------

# Section names no file can use, since NUL is refused in INI input: one holds the keys before any
# header, the other replaces configparser's DEFAULT, whose keys it would copy into every section.
_TOP = "\x00"
_NO_DEFAULT = "\x00default"


@cache
def _ini_parser() -> type[configparser.RawConfigParser]:
    import configparser

    class IniParser(configparser.RawConfigParser):
        # A delimiter is "=", or ":" followed by a space or the line end. npmrc keys contain ":"
        # (//registry.example/:_authToken=..., @scope:registry=...) and must stay whole. Possessive
        # (configparser strips the key): the stdlib's lazy pattern is quadratic in inner whitespace.
        OPTCRE_NV = re.compile(r"(?P<option>(?:[^=:]|:(?!\s|$))*+)(?:(?P<vi>=|:(?=\s|$))\s*(?P<value>.*))?$")

    return IniParser


def _read_ini(text: str) -> Pairs:
    import configparser

    if "\x00" in text:
        raise ConfigParseError("NUL character in INI file")
    parser = _ini_parser()(
        allow_no_value=True, strict=False, interpolation=None, default_section=_NO_DEFAULT
    )
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # keep key case
    try:
        parser.read_string(f"[{_TOP}]\n{text}")
    except configparser.ParsingError as error:
        line_number = error.errors[0][0] - 1  # not counting the header line added above
        line = text.split("\n")[line_number - 1].strip()[:60]
        raise ConfigParseError(f"invalid INI line {line_number}: {line!r}") from None
    except configparser.Error as error:  # not raised by a non-strict parser; fail closed anyway
        raise ConfigParseError(f"invalid INI: {error.message}") from None
    except AttributeError:  # configparser's own failure on a bare key followed by an indented line
        raise ConfigParseError("invalid INI: an indented line continues a key that has no value") from None
    return _ini_pairs(parser)


def _ini_pairs(parser: configparser.RawConfigParser) -> Pairs:
    for section in parser.sections():
        prefix = "" if section == _TOP else f"{section}."
        for key, value in parser.items(section, raw=True):
            yield prefix + key, "true" if value is None else value  # a bare key means true (npm)


# --- dotenv -------------------------------------------------------------------------------------

_DOTENV_SKIP = re.compile(r"[ \t\r]*(?:#[^\n]*)?(?:\n|\Z)")
_DOTENV_ENTRY = re.compile(
    r"""[ \t]*(?:export[ \t]+)?(?P<key>[^\s=#'"]+)[ \t]*=[ \t]*
    (?:'(?P<single>[^']*)'|"(?P<double>(?:[^"\\]++|\\.)*+)"|(?P<bare>(?!['"])[^\n]*))
    [ \t\r]*(?:\#[^\n]*)?(?:\n|\Z)""",
    re.S | re.X,
)
_DOTENV_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "\\": "\\", "$": "$", "'": "'"}


def _unescape(value: str) -> str:
    return re.sub(r"\\(.)", lambda m: _DOTENV_ESCAPES.get(m.group(1), m.group()), value, flags=re.S)


def _dotenv_value(entry: re.Match[str]) -> str:
    if entry.group("single") is not None:
        return entry.group("single")
    if entry.group("double") is not None:
        return _unescape(entry.group("double"))
    return re.sub(r"\s#.*", "", entry.group("bare")).strip()  # " #" after a bare value: comment


def _read_dotenv(text: str) -> Pairs:
    values: dict[str, str] = {}
    position = 0
    while position < len(text):
        match = _DOTENV_SKIP.match(text, position)
        if not match:
            match = _DOTENV_ENTRY.match(text, position)
            if not match:
                line = text.count("\n", 0, position) + 1
                raise ConfigParseError(f"dotenv line {line} is not KEY=value")
            values[match.group("key")] = _dotenv_value(match)
        position = match.end()
    return iter(values.items())


# --- XML ----------------------------------------------------------------------------------------


def _read_xml(text: str) -> Pairs:
    import xml.etree.ElementTree as ElementTree

    # expat fetches no external entities; internal ones can still expand exponentially.
    if "<!DOCTYPE" in text and "<!ENTITY" in text:
        raise ConfigParseError("XML entity declarations are refused")
    try:
        root = ElementTree.fromstring(text)
    except ElementTree.ParseError as error:
        raise ConfigParseError(f"invalid XML: {error}") from None
    return _xml_pairs(root, (_local(root.tag),))


def _local(name: str) -> str:
    return name.rpartition("}")[2]  # "{namespace}tag" -> "tag"


def _xml_pairs(element: ElementTree.Element, path: tuple[str, ...]) -> Pairs:
    _check_depth(len(path))
    key = ".".join(path)
    for name, value in element.attrib.items():
        yield f"{key}@{_local(name)}", value
    text = "".join([element.text or "", *(child.tail or "" for child in element)]).strip()
    if text or (not len(element) and not element.attrib):  # an empty element still shows up
        yield key, text
    repeated = Counter(_local(child.tag) for child in element)
    seen: Counter[str] = Counter()
    for child in element:
        name = _local(child.tag)
        step = f"{name}[{seen[name]}]" if repeated[name] > 1 else name
        seen[name] += 1
        yield from _xml_pairs(child, (*path, step))


_READERS: dict[str, Callable[[str], Pairs]] = {
    "json": _read_json,
    "toml": _read_toml,
    "yaml": _read_yaml,
    "ini": _read_ini,
    "dotenv": _read_dotenv,
    "xml": _read_xml,
}
