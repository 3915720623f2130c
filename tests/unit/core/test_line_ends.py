"""Validators hold the whole text: Python's ``$`` also matches before a final line feed, so a name ending in one
passed checks written with it (found by the HTTP and DNS differential tests). Each check here failed before."""

from __future__ import annotations

import pytest

from dejima.core.credentials import RouteError, parse_upstream
from dejima.core.egress import normalise_name
from dejima.core.kinds import ENV_NAME
from dejima.core.schema import check_flag
from dejima.errors import InputError


@pytest.mark.parametrize("name", ["example\n.com", "api.example\n.com"])
def test_a_name_with_a_line_feed_in_a_label_is_not_a_host_name(name: str) -> None:
    with pytest.raises(ValueError, match="label"):
        normalise_name(name)


def test_an_environment_variable_name_ending_in_a_line_feed_is_refused() -> None:
    with pytest.raises(InputError):
        check_flag(ENV_NAME, "ANTHROPIC_API_KEY\n", "--test")


def test_a_route_name_ending_in_a_line_feed_is_refused() -> None:
    from dejima.core.credentials import Route

    upstream = parse_upstream("https://api.example.com", "x")
    with pytest.raises(RouteError):
        Route("anthropic-api-key\n", upstream, "x-api-key", "raw", "placeholder-value-123456")
