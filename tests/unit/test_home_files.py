"""What a previous session plants in its home never stops the next start: every file dejima writes there
(a harness's settings, the decoy AWS credentials, the session CA) replaces whatever is in the way, with a
warning, and follows no link out of the home."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from dejima.adapters.home_settings import merge_settings
from dejima.core.route_plan import BUNDLE_FILE, CA_FILE
from dejima.proxy.runner import DECOY_MARK, _plant_decoy_file, write_trust

SETTINGS: dict[str, dict[str, Any]] = {
    ".gemini/settings.json": {"security": {"auth": {"selectedType": "gemini-api-key"}}},
    ".codex/config.toml": {"openai_base_url": "http://127.0.0.1:700/r/openai"}}


def plant_deep_json(path: Path, depth: int = 100_000) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("[" * depth + "]" * depth)


def plant_deep_toml(path: Path, depth: int = 100_000) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("a = " + "[" * depth + "]" * depth + "\n")


def plant_directory(path: Path) -> None:
    (path / "inside").mkdir(parents=True)
    (path / "inside" / "file").write_text("planted")


def plant_file(path: Path) -> None:  # a file where the directory above goes
    path.parent.parent.mkdir(parents=True, exist_ok=True)
    path.parent.write_text("planted")


def plant_fifo(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path)


def plant_fifo_above(path: Path) -> None:
    path.parent.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path.parent)


def plant_dangling_link(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to("/nonexistent/dejima-test")


def plant_loop(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(path.name)


PLANTS = {"nested 100,000 deep": None, "a directory": plant_directory, "a file above": plant_file,
          "a FIFO": plant_fifo, "a FIFO above": plant_fifo_above, "a dangling link": plant_dangling_link,
          "a link to itself": plant_loop}


@pytest.mark.parametrize("plant", list(PLANTS))
@pytest.mark.parametrize("path", list(SETTINGS))
def test_a_harness_settings_file_replaces_whatever_a_session_planted(tmp_path: Path, path: str, plant: str) -> None:
    target = tmp_path / path
    planter = PLANTS[plant] or (plant_deep_json if path.endswith(".json") else plant_deep_toml)
    planter(target)
    notes = merge_settings(str(tmp_path), {path: SETTINGS[path]}, None)
    assert notes and all(path.split("/")[0] in note for note in notes), notes
    assert stat.S_ISREG(target.lstat().st_mode)
    text = target.read_text()
    if path.endswith(".json"):
        assert json.loads(text) == SETTINGS[path]
    else:
        assert text == 'openai_base_url = "http://127.0.0.1:700/r/openai"\n'
    assert sorted(p.name for p in target.parent.iterdir()) == [target.name]  # no temporary file left


def test_the_deep_file_is_said_to_be_too_deep(tmp_path: Path) -> None:
    plant_deep_json(tmp_path / ".gemini/settings.json")
    notes = merge_settings(str(tmp_path), {".gemini/settings.json": {"a": 1}}, None)
    assert notes == ["~/.gemini/settings.json could not be read as JSON (nested too deep to read); replaced by the "
                     "harness's settings"]


def test_a_directory_where_the_settings_go_is_said_once(tmp_path: Path) -> None:
    plant_directory(tmp_path / ".codex/config.toml")
    notes = merge_settings(str(tmp_path), {".codex/config.toml": {"b": 2}}, None)
    assert notes == ["~/.codex/config.toml could not be read as TOML (it is a directory); replaced by the harness's "
                     "settings"]


def test_the_decoy_follows_no_link_out_of_the_home(tmp_path: Path) -> None:
    """A session that points ~/.aws at a host directory: the launcher (root on the host) must neither
    write there nor hand that directory to the session's user."""
    home, host_dir = tmp_path / "home", tmp_path / "host-etc"
    home.mkdir()
    host_dir.mkdir(mode=0o755)
    (home / ".aws").symlink_to(host_dir)
    before = host_dir.stat()
    notes = _plant_decoy_file(home, "[default]\naws_access_key_id = AKIADECOY\n", (4242, 4242))
    assert list(host_dir.iterdir()) == [] and (host_dir.stat().st_uid, host_dir.stat().st_mode) == (
        before.st_uid, before.st_mode)
    assert notes == ["~/.aws was a link; replaced by a directory"]
    assert (home / ".aws/credentials").read_text().startswith(DECOY_MARK)


@pytest.mark.parametrize("plant", [plant_directory, plant_fifo, plant_dangling_link, plant_file])
def test_the_decoy_replaces_what_is_in_its_way(tmp_path: Path, plant: object) -> None:
    plant(tmp_path / ".aws/credentials")  # type: ignore[operator]
    notes = _plant_decoy_file(tmp_path, "[default]\n", None)
    assert len(notes) == 1 and "~/.aws" in notes[0]
    assert (tmp_path / ".aws/credentials").read_text() == DECOY_MARK + "[default]\n"


def test_a_credentials_file_that_is_no_decoy_is_left_alone(tmp_path: Path) -> None:
    (tmp_path / ".aws").mkdir()
    (tmp_path / ".aws/credentials").write_text("[mine]\n")
    assert _plant_decoy_file(tmp_path, "[default]\n", None) == []
    assert (tmp_path / ".aws/credentials").read_text() == "[mine]\n"


@pytest.mark.parametrize("plant", [plant_directory, plant_fifo, plant_file, plant_loop])
def test_the_session_ca_replaces_what_is_in_its_way(tmp_path: Path, plant: object) -> None:
    plant(tmp_path / ".dejima/tls" / CA_FILE)  # type: ignore[operator]
    notes = write_trust(tmp_path, (".dejima", "tls"), "CERT\n", None)
    assert len(notes) == 1 and "~/.dejima/tls" in notes[0], notes
    assert (tmp_path / ".dejima/tls" / CA_FILE).read_text() == "CERT\n"
    assert (tmp_path / ".dejima/tls" / BUNDLE_FILE).read_text().endswith("CERT\n")
