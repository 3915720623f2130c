"""The schema engine on its own: key paths, unknown keys, required keys, rules, flags, wording."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from dejima.core import kinds
from dejima.core.schema import (
    Invalid,
    Key,
    Table,
    array_of,
    check_data,
    check_flag,
    declared_default,
    key,
    key_path,
    list_of,
    one_key,
    parse_toml,
    record,
    shown,
    table,
    table_of,
)
from dejima.errors import InputError, UsageError

SOURCE = "/cfg/thing.toml"


def no_b_without_a(values: dict[str, Any]) -> None:
    if "b" in values and "a" not in values:
        raise Invalid("needs a", "add a = ...", ("b",))


INNER = Table({"a": Key(kinds.integer(1, 9), "a digit"), "b": Key(kinds.BOOL, "a flag")}, "[inner]",
              rules=(no_b_without_a,))
DOCUMENT = table(Table({
    "name": Key(kinds.KEBAB, "what it is called", required=True),
    "inner": Key(table(INNER), "the inner table"),
    "items": Key(array_of(Table({"path": Key(kinds.ABSOLUTE_PATH, "where", required=True)}, "[[items]]")), "items"),
    "env": Key(table_of(kinds.STR, names=kinds.ENV_NAME), "variables"),
    "entries": Key(list_of(kinds.ALLOW_ENTRY), "egress entries"),
    "source": Key(one_key({"env": kinds.TEXT, "command": list_of(kinds.STR, non_empty=True)}, 'source = { env = "X" }'),
                  "where"),
}, "a thing", elsewhere={"harness": "[harness] is for harnesses"}))


def error(data: dict[str, Any]) -> InputError:
    with pytest.raises(InputError) as caught:
        check_data({"name": "x", **data}, DOCUMENT, SOURCE, InputError)
    return caught.value


def test_valid_values_come_back_converted() -> None:
    values = check_data({"name": "thing", "inner": {"a": 3, "b": True}, "items": [{"path": "/p"}],
                         "entries": ["example.com:443"], "source": {"command": ["gh", "auth"]}}, DOCUMENT, SOURCE,
                        InputError)
    assert values["inner"] == {"a": 3, "b": True}
    assert values["items"] == ({"path": "/p"},) and values["entries"] == ("example.com:443",)
    assert values["source"] == ("command", ("gh", "auth"))


@pytest.mark.parametrize(("data", "message", "hint"), [
    ({"nmae": "x"}, "'nmae' is not a known key", "did you mean 'name'? known keys in a thing: name, inner"),
    ({"inner": {"c": 1}}, "'inner.c' is not a known key", "known keys in [inner]: a, b"),
    ({"harness": {}}, "'harness' does not belong in a thing", "[harness] is for harnesses"),
    ({"inner": {"a": 10}}, "'inner.a' must be a whole number from 1 to 9, not 10", "inner.a: a digit"),
    ({"inner": {"a": True}}, "'inner.a' must be a whole number, not bool True", "inner.a: a digit"),
    ({"inner": {"b": 1}}, "'inner.b' must be true or false, not int 1", "inner.b: a flag"),
    ({"inner": {"b": True}}, "'inner.b' needs a", "add a = ..."),
    ({"inner": 3}, "'inner' must be a table, written [inner], not int 3", "inner: the inner table"),
    ({"items": [{"path": "/p"}, {}]}, "'items[1].path' is missing", "add it to [[items]]: where"),
    ({"items": [{"path": "rel"}]}, "'items[0].path' must be an absolute path, not 'rel'", "items[0].path: where"),
    ({"items": {"path": "/p"}}, "'items' must be an array of tables, written [[items]], not table", "items: items"),
    ({"env": {"1X": "v"}}, "'env.1X' is not an environment variable name ('1X')", "letters, digits and '_'"),
    ({"env": {"A.B": 1}}, "'env.\"A.B\"' is not an environment variable name", "letters"),
    ({"entries": ["a.example", "[2001:db8::1]"]}, "'entries[1]' is an IPv6 entry ('[2001:db8::1]')", "allow the"),
    ({"entries": ["a.example", 7]}, "'entries[1]' must be a string, not int 7", "entries[1]: egress entries"),
    ({"source": {"env": "A", "command": ["x"]}}, "'source' must name exactly one of env or command, not",
     'e.g. source = { env = "X" }'),
    ({"source": {"command": []}}, "'source.command' must not be empty", "source.command: where"),
])
def test_each_mistake_names_the_file_the_key_path_and_the_fix(data: dict[str, Any], message: str, hint: str) -> None:
    exc = error(data)
    assert exc.message.startswith(f"{SOURCE}: {message}")
    assert hint in (exc.hint or "")


def test_a_missing_required_key_is_named() -> None:
    with pytest.raises(InputError, match="'name' is missing"):
        check_data({}, DOCUMENT, SOURCE, InputError)


@pytest.mark.parametrize(("text", "where", "fix"), [
    ("name = \n", "1:8", "give the key a value"),
    ("[a]\nname = ", "2:8", "give the key a value"),  # Python's parser says only "at end of document"
    ('[network]\nallow = ["a",\n\n', "2:14", "a [list]'s ]"),
    ('[images]\nbase = "x\n', "2:10", "close the string on the line it starts"),
    ('x = """abc\n', "1:11", "a string's quote"),
    ("a = 1\na = 2\nb = 3\n", "2:6", "write each key once"),
    ("[a]\n[a]\n", "2:3", "declare each [table] once"),
    ("bogus line\n", "1:7", "write key = value"),
    ('a = "x\x1by"\n', "1:7", "a control character cannot be written as it is"),
    ("a = 1\r\nb = \r\n", "2:5", "give the key a value"),
])
def test_toml_errors_name_the_file_line_and_column_and_the_fix(text: str, where: str, fix: str) -> None:
    with pytest.raises(InputError) as caught:
        parse_toml(text, SOURCE, InputError)
    assert caught.value.message.startswith(f"{SOURCE}:{where}: not valid TOML: ")
    assert fix in (caught.value.hint or "")
    line = int(where.split(":")[0])
    assert f"{line} | {text.splitlines()[line - 1]}" in (caught.value.context or "")  # the line itself, and a caret


def test_key_paths_are_written_as_toml_writes_them() -> None:
    assert key_path(("network", "deny_reasons", "x.example")) == 'network.deny_reasons."x.example"'
    assert key_path(("credentials", 0, "source", "command")) == "credentials[0].source.command"
    assert key_path(("a", 'q"b')) == 'a."q\\"b"'
    assert key_path(("env", "X\x1b[31m\u202e")) == 'env."X\\u001b[31m\\u202e"'  # a key never carries control


def test_values_in_messages_are_escaped_and_capped() -> None:
    assert shown("evil\x1b[31m\u202e") == "'evil\\x1b[31m\\u202e'"
    assert len(shown("x" * 500)) == 60 and shown("x" * 500).endswith("…")


def test_flags_take_the_same_kinds_and_say_the_flag() -> None:
    assert check_flag(kinds.duration(3600), "30m", "--for") == 1800
    assert check_flag(kinds.GRANT_ENTRY, "Example.COM.", "the entry") == "example.com"
    with pytest.raises(UsageError) as caught:
        check_flag(kinds.RESOLVER, "127.0.0.53", "--dns-upstream")
    assert caught.value.message.startswith("--dns-upstream is a loopback address (127.0.0.53)")
    assert caught.value.hint


@dataclass(frozen=True, slots=True)
class Declared:
    name: str = key(kinds.KEBAB, "its name")
    size: int = key(kinds.integer(1, 5), "how big", 2)
    tags: tuple[str, ...] = key(list_of(kinds.TEXT), "tags", ())
    extra: dict[str, str] = key(table_of(kinds.STR), "more", {})


def test_a_dataclass_declares_its_own_table() -> None:
    built = check_data({"name": "n", "tags": ["a"]}, table(record(Declared, "[declared]")), SOURCE, InputError)
    assert built == Declared("n", 2, ("a",), {})
    assert Declared("a").extra is not Declared("b").extra  # mutable defaults are copied
    with pytest.raises(InputError, match="'name' is missing"):
        check_data({}, table(record(Declared, "[declared]")), SOURCE, InputError)
    assert declared_default(Declared, "size") == "`2`" and declared_default(Declared, "tags") == "`[]`"


def test_every_declared_key_says_what_it_is_for() -> None:
    """The reference docs and the hints come from the declarations: none may be blank."""
    from dataclasses import fields

    from dejima.core.manifest import COMMON_TOP, SECTIONS
    from dejima.core.schema import keys_of
    from dejima.core.settings import Settings

    declared = [spec for section in fields(Settings) for spec in keys_of(type(getattr(Settings(), section.name)))
                .values()]
    declared += list(COMMON_TOP.values())
    declared += [spec for section in SECTIONS.values() if section.table for spec in section.table.keys.values()]
    assert len(declared) > 40
    assert all(spec.help.strip() and spec.kind.name for spec in declared)
