"""The proxy tests' shared fixtures: ``world`` (a fake forge, the proxy with a git route to it, a clone)."""

from tests.unit.proxy.gitworld import world  # noqa: F401 - a fixture, found here by pytest
