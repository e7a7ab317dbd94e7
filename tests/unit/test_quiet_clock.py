"""A live worker's timer decides a quiet device's due change (a debounce window, a precondition
deadline) on the wall clock only when its partition is really quiet: not while the timestamp merge
holds records of that partition back."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

from streams.shell import PipelineShell
from topics.names import TopicNames


def shell() -> PipelineShell:
    none: Any = None
    store: Any = SimpleNamespace(writes=None)
    return PipelineShell(
        processor=none, names=TopicNames("g."), tables=none, store=store, out_topics={}, control_topic=none
    )


def test_a_partition_with_held_records_is_not_quiet() -> None:
    sh = shell()
    wall = 1_785_400_100_000
    sh.quiet.stream_time[0] = 1_785_400_000_000
    sh.quiet.last_activity[0] = time.monotonic() - 5.0  # nothing processed for 5 s ...
    sh.quiet.pending_confirm["dev-1"] = (0, 1_785_400_002_000)
    sh.held.merger.push("observations", 0, b"dev-2", 1_785_400_000_500, 7, object(), time.monotonic())
    # ... but a record of the partition is held back: its clock waits for it
    assert sh.quiet.due_confirmations(wall) == []
    sh.held.merger.drain()
    assert sh.quiet.due_confirmations(wall) == [("dev-1", 0, wall)]
    assert sh.quiet.pending_confirm == {}


def test_a_device_with_records_held_back_is_confirmed_by_them_not_by_the_partitions_clock() -> None:
    """Other devices' records took the partition's clock past the device's due time, but a record
    of the device stamped before it waits in the merge: it may revert the change (replay processes
    it first), so the timer does not confirm; other devices are confirmed."""
    sh = shell()
    due = 1_785_400_002_000
    sh.quiet.stream_time[0] = due + 5_000  # busy: not idle
    sh.quiet.last_activity[0] = time.monotonic()
    sh.quiet.pending_confirm["dev-1"] = (0, due)
    sh.quiet.pending_confirm["dev-3"] = (0, due)
    sh.held.merger.push("observations", 0, b"dev-1", due - 500, 7, object(), time.monotonic())
    assert sh.quiet.due_confirmations(due + 100_000) == [("dev-3", 0, due + 5_000)]
    assert sh.quiet.pending_confirm == {"dev-1": (0, due)}
    sh.held.merger.drain()
    assert sh.quiet.due_confirmations(due + 100_000) == [("dev-1", 0, due + 5_000)]


class Behind:
    """faust's consumer: task-events of partition 0 have records up to offset 12 on the broker."""

    def highwater(self, tp: Any) -> int:
        return 12 if tp.topic == "g.task-events" else 0


def test_a_partition_with_records_not_yet_processed_is_not_quiet() -> None:
    from faust.types import TP

    sh = shell()
    sh.positions.consumer, sh.positions.tp_factory = Behind(), TP
    for suffix in ("plans", "device-context", "observations"):
        sh.positions.start_offset[(suffix, 0)] = 0
    wall = 1_785_400_100_000
    sh.quiet.stream_time[0] = 1_785_400_000_000
    sh.quiet.last_activity[0] = time.monotonic() - 5.0  # nothing processed for 5 s (a starved worker) ...
    sh.quiet.pending_confirm["dev-1"] = (0, 1_785_400_002_000)
    sh.positions.next_offset[("task-events", 0)] = (
        9  # ... but records 9..11 are fetched or still on the broker
    )
    assert sh.quiet.due_confirmations(wall) == []
    sh.positions.next_offset[("task-events", 0)] = 12
    assert sh.quiet.due_confirmations(wall) == [("dev-1", 0, wall)]
