"""Shared fixtures. Docker tests run under their own DEJIMA_SCOPE and remove what they made."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

REQUIRE_DOCKER_ENV = "DEJIMA_REQUIRE_DOCKER"
TEST_SCOPE = f"test-{secrets.token_hex(3)}"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-golden", action="store_true", help="rewrite golden files from current output")


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-golden"))


@pytest.fixture(autouse=True)
def _isolated_dejima_env(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    """No test reads the developer's own settings or touches their sessions."""
    xdg = tmp_path_factory.mktemp("xdg")
    monkeypatch.setenv("DEJIMA_SCOPE", TEST_SCOPE)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(xdg / "config"))
    monkeypatch.setenv("XDG_DATA_HOME", str(xdg / "data"))
    monkeypatch.setenv("XDG_STATE_HOME", str(xdg / "state"))
    monkeypatch.delenv("DEJIMA_SETTINGS", raising=False)


@pytest.fixture(scope="session")
def runtime() -> Iterator[object]:
    from dejima.adapters.runtime import connect
    from dejima.errors import EngineError

    try:
        rt = connect()
    except EngineError as exc:
        if os.environ.get(REQUIRE_DOCKER_ENV):
            pytest.fail(f"{REQUIRE_DOCKER_ENV} is set but the Docker engine is unreachable: {exc.message}")
        pytest.skip(f"no Docker engine: {exc.message}")
    yield rt
    from tests.world import remove_scope

    remove_scope(rt, TEST_SCOPE)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    root = Path(__file__).parent
    for item in items:
        if (root / "integration") in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.docker)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """With DEJIMA_REQUIRE_DOCKER set, a skipped test fails the run: green must not hide a gap."""
    if not os.environ.get(REQUIRE_DOCKER_ENV):
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None:
        return
    skipped = len(reporter.stats.get("skipped", []))
    if skipped and session.exitstatus == 0:
        reporter.write_line(f"{REQUIRE_DOCKER_ENV} is set and {skipped} test(s) were skipped: failing the run",
                            red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
