"""A session plants what it likes in its home; the next start still starts. The home files dejima writes
there before each session (a harness's settings) replace whatever is in the way, with a warning, where
the launcher used to stop on every later start with 125 ("a bug in dejima")."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import TEST_SCOPE
from tests.world import User, run_dejima

# A harness of the user's own (a manifest layer) whose program keeps settings in the home, as
# gemini-cli and codex do; its command is a plain shell, so no image of its own is built.
HARNESS = """schema = 1
description = "a shell that keeps settings in the home, like gemini-cli and codex"

[network]
allow = []

[harness]
command = ["bash", "-l"]
apis = []

[harness.files."~/.gemini/settings.json"]
general = { enableAutoUpdate = false }

[harness.files."~/.codex/config.toml"]
model = "planted-home-test"
"""

PLANT = """
import os
home = os.path.expanduser("~")
with open(os.path.join(home, ".gemini/settings.json"), "w") as f:
    f.write("[" * 100000 + "]" * 100000)
os.remove(os.path.join(home, ".codex/config.toml"))
os.makedirs(os.path.join(home, ".codex/config.toml/inside"))
print("PLANTED")
"""


def test_a_planted_home_does_not_stop_the_next_start(user: User, workspace: Path, world_dir: Path) -> None:
    config = world_dir / "planted-home-config"
    (config / "dejima" / "harnesses").mkdir(parents=True)
    (config / "dejima" / "harnesses" / "planted.toml").write_text(HARNESS)
    for path in (config, config / "dejima", config / "dejima" / "harnesses"):
        path.chmod(0o755)
    configured = str(config)
    args = ("--harness", "planted", str(workspace), "--")
    first = run_dejima(user, TEST_SCOPE, *args, "python3", "-c", PLANT, XDG_CONFIG_HOME=configured)
    assert first.returncode == 0 and "PLANTED" in first.stdout, first.stderr[-2000:]
    second = run_dejima(user, TEST_SCOPE, *args, "sh", "-c",
                        "cat ~/.codex/config.toml; python3 -c 'import json,os; print(json.load(open("
                        "os.path.expanduser(\"~/.gemini/settings.json\"))))'", XDG_CONFIG_HOME=configured)
    assert second.returncode == 0, second.stderr[-2000:]
    assert 'model = "planted-home-test"' in second.stdout
    assert "{'general': {'enableAutoUpdate': False}}" in second.stdout
    assert "~/.gemini/settings.json could not be read as JSON (nested too deep to read)" in second.stderr
    assert "~/.codex/config.toml could not be read as TOML (it is a directory)" in second.stderr
