"""The public API (dejima/api/, docs/api.md) without an engine: its surface is its ``__all__``, importing it costs
nothing, its render is the command line's, its failures are dejima's typed errors, a session's output reaches the
caller's sinks, and the command line reaches the layers below only through it (or the documented list)."""

from __future__ import annotations

import ast
import io
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import dejima.errors
from dejima import api
from dejima.api.session import _sink
from dejima.cli.launch import main
from dejima.errors import ExitStatus
from dejima.orchestration.executor import Streams, _pump, signals_raise
from tests.unit.test_layering import imports_of

ROOT = Path(__file__).parents[2]
API_MODULES = sorted((ROOT / "dejima" / "api").glob("*.py"))  # the package's files, __init__.py among them
PUBLIC = [
    "Request", "Rendered", "render", "render_kubernetes", "load_settings", "Settings", "SessionPlan", "StartPlan",
    "Session", "run", "OutputTarget", "Reporter", "QuietReporter",
    "RunningSession", "running_sessions", "running_session", "live", "grant", "revoke", "persist_grants",
    "check_grant_entry", "check_duration",
    "recorded_sessions", "violations", "ledger", "Finding", "findings", "findings_by_id", "acknowledge", "restore",
    "SessionInfo", "sessions", "stop", "clean", "DoctorCheck", "doctor", "SessionCheck", "doctor_session",
    "ImageInfo", "BaseImage", "images", "build_images", "bootstrap_base", "prune_images",
    "ImageUse", "images_in_use",
    "settings_path", "settings_reference",
    "ManifestInfo", "Manifest", "MANIFEST_KINDS", "manifests", "manifest", "manifest_reference",
    "DejimaError", "DiagnosticError", "InputError", "SettingsError", "UsageError", "EngineError", "ImageError",
    "SessionError", "FilterError", "SessionEnded", "GrantRefused", "ExitStatus",
]


def test_the_public_surface_is_all_and_only_all() -> None:
    """A change to the surface is deliberate: it changes this list and docs/api.md."""
    assert api.__all__ == PUBLIC
    for name in api.__all__:
        assert getattr(api, name) is not None, name
    # a module of the package named as a public name would replace it on the package once imported
    assert {path.stem for path in API_MODULES} & set(api.__all__) == set()
    bodies = [node for path in API_MODULES for node in ast.parse(path.read_text()).body]
    defined = {node.name for node in bodies if isinstance(node, ast.FunctionDef | ast.ClassDef)}
    assigned = {target.id for node in bodies if isinstance(node, ast.Assign) for target in node.targets
                if isinstance(target, ast.Name)} - {"__all__"}
    public = {name for name in defined | assigned if not name.startswith("_")}
    assert public <= set(api.__all__), "a public name of dejima/api/ that __all__ leaves out"
    with pytest.raises(AttributeError):
        api.NoSuchName  # noqa: B018
    docs = (ROOT / "docs" / "api.md").read_text()
    assert [name for name in api.__all__ if f"`{name}" not in docs] == []


def test_the_errors_are_dejimas_own() -> None:
    for name in ("DejimaError", "DiagnosticError", "InputError", "SettingsError", "UsageError", "EngineError",
                 "ImageError", "SessionError", "FilterError", "SessionEnded", "GrantRefused", "ExitStatus"):
        assert getattr(api, name) is getattr(dejima.errors, name)


def test_the_lazy_types_are_the_layers_own() -> None:
    from dejima.adapters.control_client import RunningSession
    from dejima.adapters.findings import Stored
    from dejima.adapters.image_builds import Base
    from dejima.core.manifest import KINDS, Manifest
    from dejima.core.plan import SessionPlan
    from dejima.core.settings import Settings
    from dejima.orchestration.doctor import Check
    from dejima.orchestration.manage_sessions import SessionInfo
    from dejima.orchestration.session_reporter import SessionReporter
    from dejima.orchestration.start_plan import StartPlan

    assert (api.Settings, api.SessionPlan, api.StartPlan, api.Reporter, api.RunningSession, api.Finding) == (
        Settings, SessionPlan, StartPlan, SessionReporter, RunningSession, Stored)
    assert (api.SessionInfo, api.DoctorCheck, api.BaseImage, api.Manifest, api.MANIFEST_KINDS) == (
        SessionInfo, Check, Base, Manifest, KINDS)


def test_importing_the_api_loads_nothing_of_dejima_but_its_errors() -> None:
    probe = "import json, sys; import dejima.api; print(json.dumps(sorted(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60,
                            env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert result.returncode == 0, result.stderr
    own = [f"dejima.api.{path.stem}" for path in API_MODULES if path.stem != "__init__"]
    assert [m for m in json.loads(result.stdout) if m.split(".")[0] == "dejima"] == [
        "dejima", "dejima.api", *own, "dejima.errors"]


def owned(path: Path) -> Path:
    """Run as root, dejima refuses a root-owned workspace without --as-root: give it to a user."""
    if os.getuid() == 0:
        os.chown(path, 4242, 4242)
    return path


@pytest.mark.parametrize("args", [
    [],
    ["--allow", "pypi.org", "--allow", "*.pythonhosted.org:443", "--", "python3", "-c", "print(1)"],
    ["--harness", "codex", "--workflow", "python"],
    ["--publish", "3000", "--publish", "8080:3001"],
])
def test_render_is_the_command_lines_render(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                            args: list[str]) -> None:
    workspace = owned(tmp_path)
    assert main([str(workspace), "--render", "--dns-upstream", "192.0.2.53", *args]) == ExitStatus.SUCCESS
    printed = capsys.readouterr().out
    options, command = (args[:args.index("--")], args[args.index("--") + 1:]) if "--" in args else (args, None)
    values: dict[str, list[str]] = {}
    for flag, value in zip(options[::2], options[1::2], strict=True):
        values.setdefault(flag.removeprefix("--"), []).append(value)
    request = api.Request(workspace, command, harness=values.get("harness", ["shell"])[0],
                          workflows=values.get("workflow", []), allow=values.get("allow", []),
                          dns_upstreams=["192.0.2.53"], publish=values.get("publish", []))
    rendered = api.render(request)
    assert printed == rendered.text + "\n"
    assert [p.canonical for p in rendered.plan.filter.ports] == [f"127.0.0.1:{p if ':' in p else f'{p}:{p}'}"
                                                                 for p in values.get("publish", [])]
    assert rendered.plan.session_id == "render" and rendered.plan.workspace == str(workspace)
    assert "record" in [action.name for action in rendered.actions]
    assert rendered.actions == rendered.start.actions and rendered.plan is rendered.start.session


def test_the_render_reports_to_the_callers_reporter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "config"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(config))
    broken = config / "dejima" / "harnesses" / "mine.toml"
    broken.parent.mkdir(parents=True)
    broken.write_text("schema = 1\n")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    reporter = api.QuietReporter()
    api.render(api.Request(owned(workspace), dns_upstreams=["192.0.2.53"]), reporter)
    assert reporter.messages == [("warning", f"{broken} is broken and not used here; `dejima manifests check` "
                                             "says why")]


def test_bad_input_is_an_input_error_in_the_apis_words(tmp_path: Path) -> None:
    workspace = owned(tmp_path)
    with pytest.raises(api.UsageError, match=r"^allow is not a valid egress entry \('\*\.com'\)"):
        api.render(api.Request(workspace, allow=["*.com"]))
    with pytest.raises(api.UsageError, match=r"^--allow is not a valid egress entry \('\*\.com'\)"):
        api.render(api.Request(workspace, allow=["*.com"], spelling="flags"))  # as the command line asks
    with pytest.raises(api.UsageError, match="workspace '/definitely/not/here' does not exist"):
        api.render(api.Request("/definitely/not/here"))
    with pytest.raises(api.UsageError, match="harness='no-such-agent': no such harness"):
        api.render(api.Request(workspace, harness="no-such-agent", dns_upstreams=["192.0.2.53"]))
    with pytest.raises(api.InputError, match="command is a string"):
        api.Request(workspace, "echo hello")
    with pytest.raises(api.InputError, match="allow is a string"):
        api.Request(workspace, allow="pypi.org")
    with pytest.raises(api.InputError, match="command is empty"):
        api.Request(workspace, [])
    with pytest.raises(api.SettingsError, match="does not exist"):
        api.load_settings(tmp_path / "nope.toml")
    bad = tmp_path / "settings.toml"
    bad.write_text("[session]\nnetwrok = 1\n")
    with pytest.raises(api.SettingsError, match="'session.netwrok' is not a known key"):
        api.load_settings(bad)
    with pytest.raises(api.InputError, match="the entry is not grantable live"):
        api.check_grant_entry("10.0.0.0/8")
    with pytest.raises(api.InputError, match="duration is out of range"):
        api.check_duration("31d")
    assert api.check_duration("30m") == 1800 and api.check_grant_entry("Example.COM.") == "example.com"


def test_the_records_refuse_what_does_not_exist() -> None:
    with pytest.raises(api.UsageError, match="no running session 'nosuchid'"):
        api.grant("nosuchid", ["example.com"])
    with pytest.raises(api.UsageError, match="no running session 'nosuchid'"):
        api.live("nosuchid")
    with pytest.raises(api.UsageError, match="no session 'nosuchid' on record"):
        api.ledger("nosuchid")
    with pytest.raises(api.UsageError, match="no finding 999"):
        api.findings_by_id([999])
    with pytest.raises(api.UsageError, match="the note is empty"):
        api.acknowledge(None, "  ")
    with pytest.raises(api.UsageError, match="no severity 'worst'"):
        api.findings(minimum="worst")
    assert api.violations("nosuchid") == [] and api.running_sessions() == [] and api.findings() == []


def test_a_session_that_cannot_start_raises_and_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No engine: entering raises EngineError; nothing of a start is left in the state directory."""
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    owned(workspace)
    session = api.Session(api.Request(workspace, ["true"], dns_upstreams=["192.0.2.53"]))
    with pytest.raises(api.UsageError, match="has not started"):
        session.run()
    with pytest.raises(api.EngineError, match="cannot reach the Docker engine"):
        with session:
            raise AssertionError("the block must not run")
    with pytest.raises(api.UsageError, match="has not started"):
        _ = session.session_id
    sessions = Path(os.environ["XDG_STATE_HOME"]) / "dejima" / "sessions"
    assert not any(p.name in ("run", "gate", "workspace") for p in sessions.rglob("*")) if sessions.exists() else True
    session.close()
    session.close()  # closing again does nothing


def test_output_reaches_a_callable_a_binary_and_a_text_file() -> None:
    """The session's output pump with the API's sinks: chunks in order, UTF-8 split across chunks decoded once."""
    chunks: list[bytes] = []
    binary, text = io.BytesIO(), io.StringIO()
    stream = iter([(b"one ", None), (None, b"caf\xc3"), (b"two", b"\xa9 \xff")])
    _pump(stream, Streams(_sink(chunks.append), _sink(text)))
    assert chunks == [b"one ", b"two"] and text.getvalue() == "café \ufffd"
    _pump(iter([(b"x", None), (b"y", None)]), Streams(_sink(binary), _sink(chunks.append)))
    assert binary.getvalue() == b"xy"
    with pytest.raises(api.UsageError, match="must be a file or a callable"):
        _sink(42)  # type: ignore[arg-type]


def test_signals_are_left_to_the_program_off_the_main_thread() -> None:
    """A session run on a thread of the caller's (signal handlers can only be set on the main one)."""
    failures: list[BaseException] = []

    def body() -> None:
        try:
            with signals_raise():
                pass
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(exc)

    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    assert failures == []


def test_the_quiet_reporter_keeps_every_message() -> None:
    seen: list[tuple[str, str]] = []
    reporter = api.QuietReporter(on_message=lambda kind, text: seen.append((kind, text)))
    reporter.info("a")
    reporter.warn("b")
    reporter.error(api.SessionError("c", hint="d"))
    with reporter.step("building", log="/x.log") as progress:
        progress.line("step 1")
    assert reporter.messages == seen == [("info", "a"), ("warning", "b"), ("error", "c\nhint: d"),
                                         ("step", "building (log: /x.log)")]


# What the command line imports from the layers below the API, and why (docs/api.md says the same): everything
# else goes through dejima.api. (CLI module, module below) -> reason.
LAYERS_BELOW = ("dejima.core", "dejima.adapters", "dejima.proxy", "dejima.orchestration", "dejima.filter")
CLI_IMPORTS_BELOW = {
    ("launch.py", "dejima.orchestration.prestart"): "the filter starts before the API is even imported",
    ("launch.py", "dejima.adapters.session_dirs"): "the prestarted filter's run directory, removed by its launcher",
    ("launch.py", "dejima.adapters.fork_workers"): "the collector paused during a start: the process's choice",
    ("audit.py", "dejima.adapters.findings"): "the terminal walk holds one store open across its prompts",
    ("audit.py", "dejima.adapters.restore"): "the terminal walk restores one file at a time",
    ("audit_review.py", "dejima.adapters.findings"): "the walk's store and its findings' type",
    ("audit_review.py", "dejima.core.audit"): "the walk's order: worst severity first",
    ("launch.py", "dejima.core.schema"): "`dejima sesions`: did you mean, before the API is imported",
    ("manage.py", "dejima.adapters.tomledit"): "settings and manifests shown as TOML that dejima reads back",
}


def imports_below(path: Path) -> set[str]:
    """The modules of the layers below that a module imports (a package only when nothing in it is named)."""
    found = {name for name in imports_of(path) if name.startswith(tuple(p + "." for p in LAYERS_BELOW))}
    return {name for name in found if not any(other.startswith(name + ".") for other in found)}


def test_the_command_line_reaches_the_layers_below_only_through_the_api() -> None:
    cli = ROOT / "dejima" / "cli"
    found = {(path.name, module) for path in sorted(cli.glob("*.py")) for module in imports_below(path)}
    assert found == set(CLI_IMPORTS_BELOW), "go through dejima.api, or list the import here and in docs/api.md"
    docs = (ROOT / "docs" / "api.md").read_text()
    assert [module for _, module in CLI_IMPORTS_BELOW if f"`{module}`" not in docs] == []
    for name in ("launch.py", "allow.py", "audit.py", "manage.py"):
        assert "dejima.api" in imports_of(cli / name), name


def test_the_import_check_sees_a_private_import(tmp_path: Path) -> None:
    """Control: a CLI module reaching orchestration or the core directly is caught."""
    probe = tmp_path / "probe.py"
    probe.write_text("from dejima.orchestration import start\n"
                     "def f():\n    from dejima.core.kinds import ALLOW_ENTRY\n    from dejima import api\n")
    assert imports_below(probe) == {"dejima.orchestration.start", "dejima.core.kinds"}
