"""`dejima-allow --persist` writes into your policy for the project and keeps what you wrote."""

import re
from pathlib import Path

import pytest

from dejima.adapters import projects
from dejima.errors import SettingsError

GOLDEN = Path(__file__).parents[1] / "golden" / "projects"


def test_persist_keeps_comments_and_order_and_adds_once(tmp_path: Path, update_golden: bool) -> None:
    workspace = tmp_path / "ws"
    path = projects.policy_path(workspace)
    path.parent.mkdir(parents=True)
    path.write_text((GOLDEN / "commented.toml").read_text())
    projects.persist_allow(workspace, ["crates.io:443", "pypi.org"])
    projects.persist_allow(workspace, ["crates.io:443"])
    written = path.read_text()
    if update_golden:
        (GOLDEN / "commented.after.toml").write_text(written)
    assert written == (GOLDEN / "commented.after.toml").read_text()
    assert projects.read_allow(workspace)[0] == ("pypi.org", "*.pythonhosted.org:443", "crates.io:443")


def test_persist_makes_a_new_file_that_says_what_it_is(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    path = projects.persist_allow(workspace, ["crates.io"])
    assert path.read_text().startswith("# dejima: your policy for")
    assert projects.read_allow(workspace)[0] == ("crates.io",)


@pytest.mark.parametrize(("text", "why"), [
    ("[network]\nallow = 3\n", "'network.allow' must be a list of egress entries, not int 3"),
    ("[network]\nallow = [\"*.com\"]\n", "'network.allow[0]' is not a valid egress entry ('*.com')"),
    ("[network]\ndeny = []\n", "'network.deny' is not a known key"),
    ("[images]\n", "'images' is not a known key"),
    ("not toml", "not valid TOML"),
])
def test_a_broken_project_file_is_named_and_never_overwritten(tmp_path: Path, text: str, why: str) -> None:
    workspace = tmp_path / "ws"
    path = projects.policy_path(workspace)
    path.parent.mkdir(parents=True)
    path.write_text(text)
    with pytest.raises(SettingsError, match=re.escape(why)):
        projects.persist_allow(workspace, ["crates.io"])
    assert path.read_text() == text
