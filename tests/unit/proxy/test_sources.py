"""Credential sources on the host: env, file, helper command; missing ones name the manifest and the source."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from dejima.core.secret import Secret
from dejima.proxy.source_kinds import resolve_source
from dejima.proxy.sources import CommandSource, CredentialError, CredentialSource, SourceUnavailable

ORIGIN = "backends/anthropic.toml credentials[0] (anthropic-api-key)"
CANARY = "sk-ant-api03-CANARYcanaryCANARYcanaryCANARY"


def value(source: CredentialSource) -> str:
    return asyncio.run(source.current()).reveal()


def test_env_source_reads_the_host_variable() -> None:
    assert value(resolve_source(("env", ("KEY",)), ORIGIN, {"KEY": CANARY + "\n"})) == CANARY


def test_missing_env_names_manifest_and_variable() -> None:
    with pytest.raises(CredentialError) as err:
        resolve_source(("env", ("ANTHROPIC_API_KEY",)), ORIGIN, {})
    assert ORIGIN in err.value.message and "env ANTHROPIC_API_KEY" in err.value.message
    assert "export ANTHROPIC_API_KEY" in (err.value.hint or "")


def test_empty_env_is_refused() -> None:
    with pytest.raises(CredentialError, match="is empty"):
        resolve_source(("env", ("K",)), ORIGIN, {"K": "  "})


def test_file_source_expands_home(tmp_path: Path) -> None:
    (tmp_path / ".token").write_text(CANARY + "\n")
    assert value(resolve_source(("file", ("~/.token",)), ORIGIN, {}, tmp_path)) == CANARY


def test_missing_file_names_the_path(tmp_path: Path) -> None:
    with pytest.raises(CredentialError) as err:
        resolve_source(("file", ("~/nope",)), ORIGIN, {}, tmp_path)
    assert "file ~/nope does not exist" in err.value.message and str(tmp_path / "nope") in (err.value.hint or "")


def test_multi_line_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "t").write_text("a\nb\n")
    with pytest.raises(CredentialError, match="more than one line"):
        resolve_source(("file", (str(tmp_path / "t"),)), ORIGIN, {}, tmp_path)


def test_command_source_reads_stdout() -> None:
    src = resolve_source(("command", (sys.executable, "-c", "import os; print(os.environ['X'])")), ORIGIN,
                         {"X": CANARY})
    assert value(src) == CANARY and CANARY not in src.description


def test_failing_command_reports_status_and_stderr() -> None:
    argv = (sys.executable, "-c", "import sys; sys.stderr.write('not logged in\\n'); sys.exit(4)")
    with pytest.raises(CredentialError) as err:
        resolve_source(("command", argv), ORIGIN, {})
    assert "exited with status 4: not logged in" in err.value.message and ORIGIN in err.value.message


def test_absent_command_is_named() -> None:
    with pytest.raises(CredentialError, match="'no-such-helper-xyz' is not installed"):
        resolve_source(("command", ("no-such-helper-xyz",)), ORIGIN, {"PATH": "/usr/bin"})


def test_command_times_out() -> None:
    with pytest.raises(CredentialError, match="did not finish within 0.5 s"):
        CommandSource((sys.executable, "-c", "import time; time.sleep(5)"), ORIGIN, {}, timeout=0.5)


def test_command_is_run_again_when_old(tmp_path: Path) -> None:
    counter = tmp_path / "n"
    counter.write_text("0")
    script = ("import pathlib; p = pathlib.Path(%r); n = int(p.read_text()) + 1; p.write_text(str(n)); "
              "print('token-%%d' %% n)") % str(counter)
    src = CommandSource((sys.executable, "-c", script), ORIGIN, {}, max_age=0.0)
    assert value(src) == "token-2"  # the first run at start, the second because max_age is 0


def test_failing_rerun_is_unavailable_not_stale(tmp_path: Path) -> None:
    flag = tmp_path / "fail"
    script = f"import os, sys; sys.exit(3) if os.path.exists({str(flag)!r}) else print('tok')"
    src = CommandSource((sys.executable, "-c", script), ORIGIN, {}, max_age=0.0)
    flag.write_text("")
    with pytest.raises(SourceUnavailable, match="status 3"):
        value(src)


def test_secret_never_shows_its_value() -> None:
    secret = Secret(CANARY)
    for text in (repr(secret), str(secret), f"{secret}", f"{secret!r}", "%s" % secret, str([secret])):
        assert CANARY not in text
    assert secret == Secret(CANARY) and secret != Secret("other")
    with pytest.raises(TypeError):
        hash(secret)
    import pickle

    with pytest.raises(TypeError):
        pickle.dumps(secret)
