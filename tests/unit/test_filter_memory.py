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


def test_the_filter_image_maps_large_blocks_apart_from_the_heap() -> None:
    """The image's environment fixes glibc's mmap threshold: a large block freed, then one a bit
    smaller, is still mapped apart (with the dynamic threshold it would land in the heap, where
    the flood's small objects pin the hole a freed table leaves)."""
    import os
    import subprocess
    import sys

    from dejima.adapters import packaged
    from dejima.core.images import build_filter_recipe

    dockerfile = build_filter_recipe(packaged.docker_template("filter"), "base", "sha256:1", {}, {}).dockerfile
    image_env = dict(item.split("=", 1) for line in dockerfile.splitlines() if line.startswith("ENV ")
                     for item in line.split()[1:])
    assert image_env["PYTHONMALLOC"] == "malloc"
    probe = """if True:
        import ctypes
        class Mallinfo2(ctypes.Structure):
            _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd",
                                                        "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]
        libc = ctypes.CDLL("libc.so.6")
        libc.mallinfo2.restype = Mallinfo2
        first = bytearray(1 << 20)
        del first
        second = bytearray((1 << 20) - 65536)
        print(libc.mallinfo2().hblkhd >= len(second))
    """
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").mallinfo2  # noqa: B018 - glibc 2.33 or later
    except (OSError, AttributeError):
        pytest.skip("needs glibc's mallinfo2")
    env = {**os.environ, **{k: v for k, v in image_env.items() if k in ("PYTHONMALLOC", "GLIBC_TUNABLES")}}
    mapped = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
    assert mapped.stdout.strip() == "True"
