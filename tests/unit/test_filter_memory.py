"""The filter hands the heap back after a burst (dejima/filter/memory.py). Whether the resident
memory really comes back is measured on the real filter by bench/run (the memory rows)."""

from __future__ import annotations

import ipaddress

import pytest

from dejima.filter.memory import HeapReturn, forget_address_caches


def test_the_heap_is_given_back_once_enough_entries_were_dropped() -> None:
    trims: list[int] = []
    heap = HeapReturn(after=100, trim=lambda: trims.append(1))
    assert [heap.pruned(n) for n in (0, 40, 59)] == [False, False, False]
    assert trims == []
    assert heap.pruned(1)  # 100 dropped since the start: given back
    assert trims == [1]
    assert not heap.pruned(99)  # counted afresh after a give-back
    assert heap.pruned(1) and trims == [1, 1]


def test_the_tail_of_a_burst_is_given_back_once_a_prune_drops_nothing() -> None:
    trims: list[int] = []
    heap = HeapReturn(after=100, trim=lambda: trims.append(1))
    assert not heap.pruned(0)  # nothing ever dropped: nothing to give back
    assert not heap.pruned(30) and not heap.pruned(20)
    assert heap.pruned(0) and trims == [1]  # quiet: the 50 left behind go back
    assert not heap.pruned(0) and trims == [1]  # and only once


def test_one_big_prune_gives_back_at_once() -> None:
    trims: list[int] = []
    heap = HeapReturn(after=100, trim=lambda: trims.append(1))
    assert heap.pruned(5000) and trims == [1]
    assert not heap.pruned(0)


def test_the_stdlib_caches_of_address_classes_are_emptied() -> None:
    cached = ipaddress.IPv4Address.is_private.fget  # type: ignore[attr-defined]
    assert ipaddress.IPv4Address("203.0.113.7").is_private  # a documentation address: asked, and cached
    assert cached.cache_info().currsize > 0
    forget_address_caches()
    assert cached.cache_info().currsize == 0


def test_without_glibc_the_trim_is_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    import ctypes

    from dejima.filter import memory

    def refuse(name: str) -> None:
        raise OSError(f"{name}: no such library")

    monkeypatch.setattr(ctypes, "CDLL", refuse)
    assert memory._trim()() is None


def test_a_give_back_empties_the_address_cache_before_it_collects() -> None:
    cached = ipaddress.IPv4Address.is_private.fget  # type: ignore[attr-defined]
    assert ipaddress.IPv4Address("198.51.100.9").is_private
    assert cached.cache_info().currsize > 0
    HeapReturn(after=1, trim=lambda: None).pruned(1)
    assert cached.cache_info().currsize == 0
