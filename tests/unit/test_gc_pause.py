"""Pauses of the collector nest and span threads: one ending never turns the collector back on under
another still in force (the launcher's start pause, ended by a timer thread, overlaps the audit's)."""

from __future__ import annotations

import gc
import threading

from dejima.adapters.fork_workers import gc_paused, pause_gc


def test_a_pause_ending_on_another_thread_leaves_the_inner_one_in_force() -> None:
    assert gc.isenabled()
    resume = pause_gc()
    with gc_paused():
        ender = threading.Thread(target=resume)  # the launcher's timer, firing mid-block
        ender.start()
        ender.join()
        assert not gc.isenabled(), "the outer pause's end turned the collector on inside the block"
    assert gc.isenabled()


def test_resuming_twice_counts_once() -> None:
    resume = pause_gc()
    with gc_paused():
        resume()
        resume()  # the timer fired, then the launcher's finally ran
        assert not gc.isenabled()
    assert gc.isenabled()
