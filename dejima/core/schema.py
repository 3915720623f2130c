"""One typed validation path for what people write: settings, manifests, project files and flags.

A document is declared as data: tables of keys, each key a value kind and its help. One engine
checks a document against its declaration. Unknown keys are refused with the closest known one;
wrong types and bad values are refused naming the file, the key path and the fix. Flags take
the same kinds (egress entries, resolvers, durations), so a value means the same wherever it is
written. The docs' reference tables are rendered from the same declarations.

    Key(kind, help)            one key; ``key(...)`` declares it on a dataclass field
    Kind                       a value type: str, bool, bounded int, list of X, an egress entry...
    Table(keys)                a TOML table; ``record(cls)`` is the table a dataclass declares
    parse_toml(...)            TOML text -> data, or the caller's InputError (then check_data)
    check_flag(kind, v, flag)  one flag's value -> its checked value, or a UsageError
"""

from __future__ import annotations

import difflib
import json
import re
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import MISSING, dataclass, field, fields
from typing import Any

from dejima.errors import InputError, UsageError

Path = tuple[str | int, ...]
_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+\Z")


class Invalid(Exception):
    """What is wrong with a value and how to fix it. The engine prefixes the key path as it
    unwinds, so the message names the whole path (``credentials[0].source.command``)."""

    def __init__(self, problem: str, fix: str = "", path: Path = ()) -> None:
        super().__init__(problem)
        self.problem, self.fix, self.path = problem, fix, path
        self.help = ""  # the help of the key the value belongs to: the hint when there is no fix

    @property
    def hint(self) -> str | None:
        return self.fix or (f"{key_path(self.path)}: {self.help}" if self.help else None)

    def under(self, part: str | int) -> Invalid:
        self.path = (part, *self.path)
        return self


def key_path(path: Path) -> str:
    """``("network", "deny_reasons", "x.example")`` -> ``network.deny_reasons."x.example"``."""
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            quoted = part if _BARE_KEY.match(part) else json.dumps(part)  # escapes control and non-ASCII
            text += ("." if text else "") + quoted
    return text


def shown(value: object, limit: int = 60) -> str:
    """A value quoted for a message: repr (so control characters are escaped), capped."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def did_you_mean(word: str, known: Iterable[str]) -> str:
    """"did you mean 'X'? " when ``word`` is close to one of ``known`` (a typo), else ""."""
    close = difflib.get_close_matches(word, list(known), n=1)
    return f"did you mean '{close[0]}'? " if close else ""


def type_name(value: object) -> str:
    return {bool: "bool", int: "int", float: "float", str: "str", list: "list", dict: "table"}.get(
        type(value), type(value).__name__)


def _same(value: Any) -> Any:
    return value


@dataclass(frozen=True, slots=True)
class Kind:
    """A value type: what the docs call it, what an error says it must be, which TOML types it
    takes (bool only when named) and the check that turns a value into what the code uses."""

    name: str
    expect: str
    accepts: tuple[type, ...]
    convert: Callable[[Any], Any] = _same
    plural: str = ""  # the docs' and errors' name for a list of these; default: name + "s"

    def check(self, value: object) -> Any:
        takes = isinstance(value, self.accepts) and (bool in self.accepts or not isinstance(value, bool))
        if not takes:
            raise Invalid(f"must be {self.expect}, not {type_name(value)} {shown(value)}")
        return self.convert(value)


@dataclass(frozen=True, slots=True)
class Key:
    """One key of a table: its kind, its help (docs and hints), whether it must be there."""

    kind: Kind
    help: str
    required: bool = False


_KEY = "dejima.schema.key"


def key(kind: Kind, help: str, default: Any = MISSING, *, factory: Callable[[], Any] | None = None,
        doc_default: str | None = None) -> Any:
    """Declare a dataclass field as a key: ``stop_timeout: float = key(SECONDS, "...", 5.0)``.
    Without a default (or ``factory``) the key is required; mutable defaults are copied."""
    metadata = {_KEY: Key(kind, help, required=default is MISSING and factory is None), "doc_default": doc_default}
    if factory is not None:
        return field(default_factory=factory, metadata=metadata)
    if isinstance(default, (dict, list)):
        return field(default_factory=lambda: type(default)(default), metadata=metadata)
    return field(default=default, metadata=metadata)


@dataclass(frozen=True, slots=True)
class Table:
    """A TOML table: its keys, where an unknown key is said to be ("[images]", "a backend
    manifest"), keys that belong to other documents of the family, cross-key rules that run on
    the checked values (each raises Invalid with a path inside the table), and what the checked
    values become (a dict, or ``build(values)``)."""

    keys: Mapping[str, Key]
    title: str
    elsewhere: Mapping[str, str] = field(default_factory=dict)  # key -> where it belongs instead
    rules: tuple[Callable[[dict[str, Any]], None], ...] = ()
    build: Callable[[dict[str, Any]], Any] | None = None

    def check(self, data: Mapping[str, Any]) -> Any:
        values: dict[str, Any] = {}
        for name, value in data.items():
            spec = self.keys.get(name)
            if spec is None:
                raise self._unknown(name)
            try:
                values[name] = spec.kind.check(value)
            except Invalid as exc:
                exc.help = exc.help or spec.help
                raise exc.under(name) from None
        for name, spec in self.keys.items():
            if spec.required and name not in values:
                raise Invalid("is missing", f"add it to {self.title}: {spec.help}", (name,))
        for rule in self.rules:
            rule(values)
        return values if self.build is None else self.build(values)

    def _unknown(self, name: str) -> Invalid:
        if name in self.elsewhere:
            return Invalid(f"does not belong in {self.title}", self.elsewhere[name], (name,))
        known = list(self.keys)
        guess = did_you_mean(name, known)
        listed = ", ".join(known) if known else "none"
        return Invalid("is not a known key", f"{guess}known keys in {self.title}: {listed}", (name,))


def table(value_table: Table, expect: str = "") -> Kind:
    """A table as the value of a key (a section)."""
    return Kind("table", expect or f"a table, written {value_table.title}", (dict,), value_table.check)


def record(cls: type, title: str, rules: tuple[Callable[[dict[str, Any]], None], ...] = ()) -> Table:
    """The table a dataclass declares with ``key(...)`` fields, checked into an instance of it."""
    return Table(keys_of(cls), title, rules=rules, build=lambda values: cls(**values))


def keys_of(cls: type) -> dict[str, Key]:
    return {f.name: f.metadata[_KEY] for f in fields(cls) if _KEY in f.metadata}


def declared_default(cls: type, name: str) -> str:
    """The default of a ``key(...)`` field as the docs show it."""
    (spec,) = [f for f in fields(cls) if f.name == name]
    if spec.metadata.get("doc_default") is not None:
        return str(spec.metadata["doc_default"])
    value = spec.default_factory() if callable(spec.default_factory) else spec.default
    return f"`{list(value) if isinstance(value, tuple) else value!r}`"


def list_of(item: Kind, non_empty: bool = False, expect: str = "") -> Kind:
    """A list whose items are each checked as ``item``; the result is a tuple."""
    plural = item.plural or item.name + "s"

    def convert(values: list[Any]) -> tuple[Any, ...]:
        if non_empty and not values:
            raise Invalid("must not be empty")
        checked = []
        for index, value in enumerate(values):
            try:
                checked.append(item.check(value))
            except Invalid as exc:
                raise exc.under(index) from None
        return tuple(checked)

    return Kind(f"list of {plural}", expect or f"a list of {plural}", (list,), convert)


def array_of(item: Table) -> Kind:
    """An array of tables (``[[caches]]``): each one checked against ``item``."""
    return list_of(Kind("table", f"a table, written {item.title}", (dict,), item.check),
                   expect=f"an array of tables, written {item.title}")


def table_of(value: Kind, names: Kind | None = None) -> Kind:
    """A free-form table (``NAME = value``): each value checked as ``value``, each name as ``names``."""
    def convert(data: dict[str, Any]) -> dict[str, Any]:
        checked = {}
        for name, item in data.items():
            try:
                if names is not None:
                    names.check(name)
                checked[name] = value.check(item)
            except Invalid as exc:
                raise exc.under(name) from None
        return checked

    return Kind(f"table of {value.plural or value.name + 's'}", f"a table of {value.plural or value.name + 's'}",
                (dict,), convert)


def one_key(kinds: Mapping[str, Kind], example: str) -> Kind:
    """A table that names exactly one of ``kinds`` (``{ env = "VAR" }``) -> (name, checked value)."""
    *most, last = kinds
    choices = f"{', '.join(most)} or {last}" if most else last

    def convert(data: dict[str, Any]) -> tuple[str, Any]:
        if len(data) != 1 or next(iter(data)) not in kinds:
            raise Invalid(f"must name exactly one of {choices}, not {shown(data)}", f"e.g. {example}")
        ((name, value),) = data.items()
        try:
            return name, kinds[name].check(value)
        except Invalid as exc:
            raise exc.under(name) from None

    return Kind(f"one of {choices}", f"a table naming one of {choices}", (dict,), convert)


def parse_toml(text: str, source: str, error: type[InputError],
               hint: str = "fix the syntax at that line") -> dict[str, Any]:
    """TOML ``text`` as data; ``source`` names the file in messages and ``error`` is the caller's
    InputError (exit 2 wherever it is caught), worded the same for every file dejima reads: the
    file, line and column (``FILE:LINE:COLUMN``), the line itself, and the fix for that mistake."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        lines = text.split("\n")  # as tomllib counts them (str.splitlines also splits at \f, \u2028...)
        problem, line, column = _syntax_error(str(exc), lines)
        shown_line = lines[line - 1].rstrip("\r") if line <= len(lines) else ""
        context = f"  {line} | {shown_line}\n  {' ' * len(str(line))} | {' ' * (column - 1)}^" if shown_line else None
        fix = next((f for pattern, f in _SYNTAX_FIXES if pattern in problem), "")
        if problem.endswith(_AT_END) and not shown_line.rstrip().endswith("="):
            fix = "close what is still open at the end of the file: a string's quote, a [list]'s ], a { table }'s }"
        raise error(f"{source}:{line}:{column}: not valid TOML: {problem}", context=context,
                    hint=f"{fix}; {hint}" if fix else hint) from exc


# What each of tomllib's complaints usually means, and its fix (the first that matches).
_SYNTAX_FIXES = (
    ("Unterminated string", 'close the string on the line it starts: "value" (a multi-line string is """...""")'),
    ("Illegal character '\\n'", 'close the string on the line it starts: "value" (a multi-line string is """...""")'),
    ("Illegal character", "a control character cannot be written as it is: inside a string, write it as \\u001b"),
    ("twice", "declare each [table] once: merge the two into one"),
    ("Cannot overwrite", "write each key once in its table: remove or rename one of them"),
    ("Expected '=' after a key", "write key = value; a key with spaces or dots in it is quoted: \"my key\" = 1"),
    ("Invalid value", 'give the key a value: a "string", a number, true or false, a [list] or an { inline = "table" }'),
    ("Unclosed array", "close the list with ]"),
    ("Unclosed inline table", "close the table with }, on the line it starts"),
    ("Invalid initial character for a key", "write key = value; a key with other characters is quoted: \"k\" = 1"),
    ("Expected newline or end of document", "one key = value per line; a comment starts with #"),
    ("at the end of a table declaration", "close the [table] name with ] on its line"),
    ("Invalid statement", "each line is a key = value, a [table] or a # comment"),
)
_AT_END = " at the end of the file"
_TOML_WHERE = re.compile(r"\s*\(at line (\d+), column (\d+)\)$")


def _syntax_error(message: str, lines: list[str]) -> tuple[str, int, int]:
    """tomllib's message, and the line and column (1-based) it is about. Python's TOML parser says "at end of
    document" for what is left open at the end (a string, a list): that is the last line with text, after it."""
    where = _TOML_WHERE.search(message)
    if where:
        return message[:where.start()], int(where.group(1)), int(where.group(2))
    line = max((number for number, text in enumerate(lines, 1) if text.strip()), default=1)
    return message.removesuffix(" (at end of document)") + _AT_END, line, len(lines[line - 1]) + 1


def check_data(data: Mapping[str, Any], schema: Kind, source: str, error: type[InputError]) -> Any:
    try:
        return schema.check(dict(data))
    except Invalid as exc:
        where = f"'{key_path(exc.path)}' " if exc.path else ""
        raise error(f"{source}: {where}{exc.problem}", hint=exc.hint) from None


def check_flag(kind: Kind, value: str, flag: str, error: type[InputError] = UsageError) -> Any:
    """One command-line value, checked as the same kind a file would be: ``--allow '*.com' ...``."""
    try:
        return kind.check(value)
    except Invalid as exc:
        raise error(f"{flag} {exc.problem}", hint=exc.fix or exc.help or None) from None
