"""swarmrl_server.heap: a long-lived block runs with the collector paused and ends frozen."""

from __future__ import annotations

import gc
import weakref

from swarmrl_server.heap import long_lived


class Node:
    def __init__(self) -> None:
        self.me = self  # a reference cycle: only the cyclic collector frees it


def test_the_block_runs_paused_and_what_it_made_is_frozen_then_the_collector_resumes() -> None:
    assert gc.isenabled()
    frozen_before = gc.get_freeze_count()
    with long_lived():
        assert not gc.isenabled()
        kept = [Node() for _ in range(100)]
    assert gc.isenabled()
    assert gc.get_freeze_count() >= frozen_before + len(kept)
    assert gc.is_tracked(kept[0])
    assert not any(o is kept[0] for g in (0, 1, 2) for o in gc.get_objects(generation=g))


def test_a_paused_collector_stays_paused() -> None:
    gc.disable()
    try:
        with long_lived():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_collect_frees_the_blocks_garbage_before_freezing() -> None:
    with long_lived(collect=True):
        dropped = weakref.ref(Node())  # unreachable, in a cycle
    assert dropped() is None
    with long_lived():
        frozen = weakref.ref(Node())
    gc.collect()
    assert frozen() is not None  # frozen garbage is never freed: the documented cost
