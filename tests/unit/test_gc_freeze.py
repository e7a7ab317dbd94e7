"""The worker's garbage collector keeps the oldest generation empty between full collections."""

from __future__ import annotations

import asyncio
import gc
import weakref

from streams.gc_freeze import YoungOnlyCollector


class Node:
    ref: object = None


def test_what_outlives_a_young_collection_is_frozen_and_garbage_is_still_collected() -> None:
    collector = YoungOnlyCollector()
    asyncio.run(collector.start())  # the worker's start installs the hook, not the timer's first tick
    try:
        frozen = gc.get_freeze_count()
        assert frozen > 0  # what existed at the start is out of the collector's sight
        survivor = [[i] for i in range(100)]
        cycle = Node()
        cycle.ref = cycle
        gone = weakref.ref(cycle)
        del cycle
        gc.collect(1)
        assert gc.get_freeze_count() >= frozen + 100  # the survivors left the collector's sight
        assert not any(o is survivor for o in gc.get_objects(generation=2))
        assert gone() is None  # garbage of the young generations is still collected
        older = gc.get_freeze_count()
        gc.collect(0)  # a collection of the youngest generation alone freezes nothing
        assert gc.get_freeze_count() == older
    finally:
        collector.close()
        gc.unfreeze()
    assert collector.after_collection not in gc.callbacks


def test_the_timer_keeps_one_hook_after_the_start_installed_it() -> None:
    collector = YoungOnlyCollector()
    try:
        asyncio.run(collector.start())
        asyncio.run(collector.collect())
        assert gc.callbacks.count(collector.after_collection) == 1
    finally:
        collector.close()
        gc.unfreeze()
