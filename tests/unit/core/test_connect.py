"""How a harness reaches its backend: manifest checks, templates filled, settings merged (pure),
and the home files written without following what the session left (real files)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from dejima.adapters.home_settings import merge_settings
from dejima.adapters.manifest_files import shipped_dir
from dejima.core.connect import Connect, connection, merge_into
from dejima.core.manifest import Manifest, ManifestError, parse_manifest

HEAD = 'schema = 1\ndescription = "x"\n[harness]\ncommand = ["c"]\napis = ["openai"]\n'


def _harness(text: str) -> Manifest:
    return parse_manifest(HEAD + text, "harnesses", "h", "h.toml")


@pytest.mark.parametrize(("text", "said"), [
    ('[harness.connect.openai]\nenv = { CODEX_API_KEY = "sk-live-1" }', "may only take the placeholder"),
    ('[harness.connect.gemini]\nenv = { X = "{base_url}" }', "which the harness does not speak"),
    ('[harness.connect.openai]\nenv = { X = "{base}" }', "names {base}, which dejima does not fill"),
    ('[harness.connect.openai]\nenv = { X = "{base_url!r}" }', "with a conversion or spec"),
    ('[harness.connect.openai]\nenv = { X = "{" }', "is not a valid template"),
    ('[harness.files."/etc/x.json"]\na = 1', "a file in the session's home"),
    ('[harness.files."~/../x.json"]\na = 1', "a file in the session's home"),
    ('[harness.files."~/x.yaml"]\na = 1', "must end in .json or .toml"),
    ('[harness.connect.openai.files."~/x.json"]\na = "{nope}"', "names {nope}"),
])
def test_a_bad_connection_is_refused_naming_the_key(text: str, said: str) -> None:
    with pytest.raises(ManifestError) as caught:
        _harness(text)
    assert said in str(caught.value) and "h.toml" in str(caught.value)


def test_templates_are_filled_and_connect_files_lie_over_the_harness_files() -> None:
    connect = Connect({"CODEX_API_KEY": "{placeholder}", "URL": "{base_url}/v1"},
                      {"~/.codex/config.toml": {"openai_base_url": "{base_url}", "t": {"b": 2}}})
    got = connection({"~/.codex/config.toml": {"check": False, "t": {"a": 1}}}, connect, "http://p/r/x", "ph-1")
    assert got.env == {"CODEX_API_KEY": "ph-1", "URL": "http://p/r/x/v1"}
    assert got.files == {".codex/config.toml": {"check": False, "t": {"a": 1, "b": 2},
                                                "openai_base_url": "http://p/r/x"}}


def test_without_the_route_only_the_harness_files_are_given() -> None:
    connect = Connect({"K": "{placeholder}"}, {"~/a.json": {"u": "{base_url}"}})
    got = connection({"~/a.json": {"x": 1}}, connect, None, None)
    assert got.env == {} and got.files == {"a.json": {"x": 1}}
    plain = connection({}, Connect({"MODE": "fixed"}), None, None)  # needs no route: given
    assert plain.env == {"MODE": "fixed"}


def test_merge_replaces_scalars_and_merges_tables() -> None:
    assert merge_into({"a": {"b": 1, "c": 2}, "l": [1]}, {"a": {"b": 3}, "l": [2]}) == {"a": {"b": 3, "c": 2},
                                                                                     "l": [2]}


def test_every_shipped_harness_connection_parses() -> None:
    for path in sorted(shipped_dir("harnesses").glob("*.toml")):
        manifest = parse_manifest(path.read_text(), "harnesses", path.stem, str(path))
        for api, connect in manifest.connect.items():
            assert api in manifest.apis
            connection(manifest.files, connect, "http://127.0.0.1:700/r/route", "placeholder")


# --- the adapter, on real files -----------------------------------------------------------------

def test_settings_merge_into_what_the_program_left(tmp_path: Path) -> None:
    (tmp_path / ".codex").mkdir()
    (tmp_path / ".codex/config.toml").write_text('# mine\nmodel = "kept"\nopenai_base_url = "http://elsewhere"\n')
    (tmp_path / ".gemini").mkdir()
    (tmp_path / ".gemini/settings.json").write_text('{"ui": {"theme": "x"}, "security": {"auth": {"a": 1}}}')
    notes = merge_settings(str(tmp_path), {".codex/config.toml": {"openai_base_url": "http://proxy"},
                                           ".gemini/settings.json": {"security": {"auth": {"selectedType": "k"}}}},
                           None)
    assert notes == []
    toml = (tmp_path / ".codex/config.toml").read_text()
    assert toml.startswith("# mine\nmodel = \"kept\"\n") and 'openai_base_url = "http://proxy"' in toml
    assert "elsewhere" not in toml
    assert json.loads((tmp_path / ".gemini/settings.json").read_text()) == {
        "ui": {"theme": "x"}, "security": {"auth": {"a": 1, "selectedType": "k"}}}


def test_a_link_the_session_left_is_replaced_never_followed(tmp_path: Path) -> None:
    home, outside = tmp_path / "home", tmp_path / "outside"
    home.mkdir()
    outside.mkdir()
    (outside / "settings.json").write_text('{"host": "file"}')
    (home / ".gemini").symlink_to(outside)  # a directory on the way
    (home / ".codex").mkdir()
    (home / ".codex/config.toml").symlink_to(outside / "settings.json")  # the file itself
    notes = merge_settings(str(home), {".gemini/settings.json": {"a": 1}, ".codex/config.toml": {"b": 2}}, None)
    assert (outside / "settings.json").read_text() == '{"host": "file"}'  # untouched
    assert sorted(os.listdir(outside)) == ["settings.json"]
    assert not (home / ".gemini").is_symlink() and json.loads((home / ".gemini/settings.json").read_text()) == {"a": 1}
    assert not (home / ".codex/config.toml").is_symlink() and (home / ".codex/config.toml").read_text() == "b = 2\n"
    assert any("~/.gemini was a link" in n for n in notes) and any("~/.codex/config.toml" in n for n in notes)


def test_an_unreadable_file_is_replaced_and_said(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text("{not json")
    notes = merge_settings(str(tmp_path), {"a.json": {"x": 1}}, None)
    assert json.loads((tmp_path / "a.json").read_text()) == {"x": 1}
    assert len(notes) == 1 and "could not be read as JSON" in notes[0]



def test_a_hard_link_the_session_left_is_replaced_not_written_through(tmp_path: Path) -> None:
    """An agent that hard-links a settings file to a file it shares with the host (the workspace):
    the merge writes a new file and renames it over the name; the other name keeps its bytes."""
    home, shared = tmp_path / "home", tmp_path / "workspace-file.toml"
    (home / ".codex").mkdir(parents=True)
    shared.write_text('model = "the workspace\'s"\n')
    os.link(shared, home / ".codex/config.toml")
    merge_settings(str(home), {".codex/config.toml": {"openai_base_url": "http://proxy"}}, None)
    assert shared.read_text() == 'model = "the workspace\'s"\n'
    assert (home / ".codex/config.toml").stat().st_ino != shared.stat().st_ino
    assert 'openai_base_url = "http://proxy"' in (home / ".codex/config.toml").read_text()
