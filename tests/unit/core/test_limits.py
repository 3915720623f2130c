import pytest

from dejima.core.kinds import MEMORY
from dejima.core.limits import ContainerLimits, describe, format_bytes, parse_size, resolve_memory
from dejima.core.plan import resolve_limits
from dejima.core.schema import Invalid
from dejima.core.settings import LimitSettings

GIB = 1024**3


@pytest.mark.parametrize(("text", "size"), [("512m", 512 * 1024**2), ("4g", 4 * GIB), ("64k", 65536),
                                             ("1048576", 1048576), (" 2G ", 2 * GIB)])
def test_sizes(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "4gb", "0", "-1g", "1.5g", "08m", "75%", "g"])
def test_bad_sizes(text: str) -> None:
    with pytest.raises(ValueError, match="is not a size"):
        parse_size(text)


@pytest.mark.parametrize(("text", "problem"), [("75%", None), ("100%", None), ("4g", None), ("0%", "not a size"),
                                                ("101%", "not a size"), ("16m", "at least 32 MiB")])
def test_memory_is_a_size_or_a_share(text: str, problem: str | None) -> None:
    if problem is None:
        assert MEMORY.check(text) == text
        return
    with pytest.raises(Invalid) as caught:
        MEMORY.check(text)
    assert problem in caught.value.problem and "75%" in caught.value.fix


def test_shares_resolve_against_the_engines_memory_and_never_below_the_floor() -> None:
    assert resolve_memory("50%", 8 * GIB) == 4 * GIB
    assert resolve_memory("1%", 1024) == 32 * 1024**2
    assert resolve_memory("3g", 8 * GIB) == 3 * GIB


def test_default_limits_bound_both_containers_and_the_filter_outweighs_the_session() -> None:
    filter_limits, session_limits = resolve_limits(LimitSettings(), 16 * GIB)
    assert filter_limits == ContainerLimits(512, 256 * 1024**2, 1024)
    assert session_limits == ContainerLimits(4096, 12 * GIB, 512, GIB)
    assert filter_limits.cpu_shares > session_limits.cpu_shares


def test_a_share_without_the_engines_memory_leaves_memory_unlimited_but_the_rest_applies() -> None:
    filter_limits, session_limits = resolve_limits(LimitSettings(), None)
    assert session_limits.memory is None and session_limits.pids == 4096
    assert filter_limits.memory == 256 * 1024**2  # a size needs no facts
    assert describe(session_limits) == "4096 processes, memory not limited, CPU weight 512, /tmp 1 GiB"


def test_descriptions() -> None:
    assert format_bytes(1536 * 1024**2) == "1.5 GiB"
    assert describe(ContainerLimits(64, 96 * 1024**2, 256)) == "64 processes, 96 MiB memory (no swap), CPU weight 256"
