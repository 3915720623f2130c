"""The session image's record of what a Python environment's own files are (venv_facts.py,
venv_record.py): made from the probe's output, kept private under the image's id, and read back only
as written; a tool whose files hold the probe's values in a form not known is left out, saying why."""

from __future__ import annotations

import json
import stat
from pathlib import Path

from dejima.adapters.venv_record import keep, load
from dejima.core.audit.venv_facts import FORMAT, from_probe, render
from tests import venvs

NAME, PROMPT = "dejimavenvname", "dejimavenvprompt"


def listing(directory: str, activate: str, config: str) -> dict[str, object]:
    return {"dir": directory, "files": {"pyvenv.cfg": config, "bin/activate": activate}, "links": {}}


def test_the_probe_s_values_become_markers_and_a_form_not_known_leaves_the_tool_out() -> None:
    config = "home = /usr/bin\nversion = 3.13.5\n"
    made = {"plain": listing(f"/tmp/dejimavenvdirx/a/{NAME}", f"VIRTUAL_ENV=/tmp/dejimavenvdirx/a/{NAME}\nPS1={NAME}\n",
                             config),
            "prompted": listing(f"/tmp/dejimavenvdirx/b/{NAME}", f"VIRTUAL_ENV=/tmp/dejimavenvdirx/b/{NAME}\n"
                                f"PS1={PROMPT}\n", config + f"prompt = '{PROMPT}'\n"),
            "seeds": []}
    # a name the tool wrote in a form of its own (upper case): not turned back, so not rendered
    odd = {**made, "plain": listing(f"/tmp/dejimavenvdirx/d/{NAME}", f"NAME={NAME.upper()}\n",
                                    "home = /usr/bin\nuv = 0.1\n")}
    facts = from_probe("sha256:i", {"format": FORMAT, "name": NAME, "prompt": PROMPT,
                                    "tools": {"venv": made, "uv": odd}}, {})
    [tool] = facts.tools
    assert tool.name == "venv" and tool.quoted_prompt and tool.config == {"home": "/usr/bin", "version": "3.13.5"}
    assert render(tool.plain["bin/activate"], "/w/p/.venv", None) == "VIRTUAL_ENV=/w/p/.venv\nPS1=.venv\n"
    assert render(tool.prompted["bin/activate"], "/w/p/.venv", "proj") == "VIRTUAL_ENV=/w/p/.venv\nPS1=proj\n"
    assert render(tool.plain["bin/activate"], "/w/my project/.venv", None) is None  # would need quoting
    assert "its bin/activate holds the environment's path or prompt in a form not known here" in facts.missing["uv"]


def test_the_record_is_kept_private_under_the_image_s_id_and_read_back_only_as_written(tmp_path: Path) -> None:
    facts = venvs.here()
    keep(facts, tmp_path / "venv")
    assert stat.S_IMODE((tmp_path / "venv").stat().st_mode) == 0o700
    assert load(facts.image, tmp_path / "venv") == facts
    assert load("sha256:other", tmp_path / "venv") is None
    assert len(facts.tools[0].bytecode) > 100  # ensurepip's bytecode, as what its path does not decide
    path = tmp_path / "venv" / "here.json"
    document = json.loads(path.read_text())
    path.write_text(json.dumps({**document, "format": 1}))
    assert load(facts.image, tmp_path / "venv") is None  # a record made before the seeds' bytecode: made again
    document["tools"][0]["plain"] = ["not", "a", "table"]
    path.write_text(json.dumps(document))
    assert load(facts.image, tmp_path / "venv") is None  # unreadable: no record (the audit says so, medium)


def test_a_python_without_ensurepip_is_recorded_with_its_environments_own_files_and_no_seeds(tmp_path: Path) -> None:
    """Debian's python3 without python3-venv (a node-only session image): its venv makes environments
    without pip only. The probe records those rather than failing, so no start probes again."""
    shadow = tmp_path / "shadow" / "ensurepip"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'ensurepip'\")\n")
    facts = venvs.probed({"PYTHONPATH": str(tmp_path / "shadow")})
    [tool] = [tool for tool in facts.tools if tool.name == "venv"]
    [full] = [tool for tool in venvs.here().tools if tool.name == "venv"]  # the same python3, with ensurepip
    assert (tool.plain, tool.prompted, tool.links, tool.config) == (full.plain, full.prompted, full.links, full.config)
    assert tool.plain and full.seeds and not tool.seeds and not tool.bytecode
