"""A Python environment made in a real session is held to what the session image's own python3 -m venv
writes (issue 32): the launcher records it from the image (a throwaway container of it) and the exit
audit renders each template for the environment's path in the session. The benign venv is low with
its own files verified; one line appended to its bin/activate is high, named, and runs when the user
sources it on the host."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.integration.conftest import Images, user_workspace
from tests.integration.test_real_installs import settings_for
from tests.integration.test_tree_attacks import Session, on_host, session, tree_finding
from tests.world import User

PLANTED = "echo PLANTED-ACTIVATE"


@dataclass(frozen=True)
class Made:
    benign: Session  # `python3 -m venv --without-pip .venv`, one with ensurepip's pip, one uv venv makes
    tampered: Session  # the same, then a line appended to its activate


@pytest.fixture(scope="module")
def made(images: Images, user: User, world_dir: Path) -> Made:
    settings = settings_for(world_dir, None)
    done = "&& echo SESSION-DONE"
    benign = session(user, user_workspace(world_dir, user, "venv-benign"), settings,
                     f"python3 -m venv --without-pip .venv && python3 -m venv seeded && uv venv --quiet uvenv {done}",
                     set(),
                     "--workflow", "python")  # the workflow that brings python3-venv
    tampered = session(user, user_workspace(world_dir, user, "venv-tampered"), settings,
                       f"python3 -m venv --without-pip .venv && echo '{PLANTED}' >> .venv/bin/activate {done}",
                       set(), "--workflow", "python")
    return Made(benign, tampered)


def test_a_venv_made_in_a_session_is_low_its_own_files_verified_against_the_image(made: Made) -> None:
    venv = tree_finding(made.benign.found, path=".venv")
    assert venv["severity"] == "low", venv
    assert str(venv["evidence"]).startswith("its own files (") and \
        "are what the session image's python3 -m venv (Python 3." in str(venv["evidence"]), venv


def test_a_venv_with_ensurepip_s_pip_is_low_its_own_files_pip_and_its_bytecode_verified(made: Made) -> None:
    """pip's files are the image's seed wheel's; its bytecode, compiled by the image's Python 3.13, is
    the image's record's (whatever the host's Python: 3.11 here), so low."""
    seeded = tree_finding(made.benign.found, path="seeded")
    evidence = str(seeded["evidence"])
    assert seeded["severity"] == "low", evidence
    assert "against the wheels ensurepip seeds in the session image" in evidence, seeded
    assert evidence.startswith("its own files (") and "own file(s)" not in evidence, seeded  # none unverified
    assert "no lockfile pins" not in evidence and "not the content" not in evidence, seeded  # pip: the seed's


def test_a_line_appended_to_a_venv_s_activate_is_high_and_runs_when_the_user_sources_it(made: Made) -> None:
    venv = tree_finding(made.tampered.found, path=".venv")
    assert venv["severity"] == "high" and ".venv/bin/activate: not what python3 -m venv" in str(venv["evidence"]), \
        venv
    assert "PLANTED-ACTIVATE" in on_host(made.tampered.workspace, "sh", "-c", ". .venv/bin/activate")


def test_an_environment_uv_venv_makes_in_a_session_is_low_against_the_image_s_uv(made: Made) -> None:
    uvenv = tree_finding(made.benign.found, path="uvenv")
    assert uvenv["severity"] == "low", uvenv
    assert "are what the session image's uv 0." in str(uvenv["evidence"]), uvenv
