"""A live worker's timer decides a quiet device's due change (a debounce window, a precondition
deadline) on the wall clock only when its partition is really quiet: not while the timestamp merge
holds records of that partition back."""

from __future__ import annotations

import time
from typing import Any

from streams.agents import PipelineShell
from topics.names import TopicNames


def shell() -> PipelineShell:
    none: Any = None
    return PipelineShell(
        processor=none, names=TopicNames("g."), tables=none, store=none, out_topics={}, control_topic=none
    )


def test_a_partition_with_held_records_is_not_quiet() -> None:
    sh = shell()
    wall = 1_785_400_100_000
    sh.stream_time[0] = 1_785_400_000_000
    sh.last_activity[0] = time.monotonic() - 5.0  # nothing processed for 5 s ...
    sh.pending_confirm["dev-1"] = (0, 1_785_400_002_000)
    sh.merger.push("observations", 0, 1_785_400_000_500, 7, object(), time.monotonic())
    # ... but a record of the partition is held back: its clock waits for it
    assert sh.due_confirmations(wall) == []
    sh.merger.drain()
    assert sh.due_confirmations(wall) == [("dev-1", 0, wall)]
    assert sh.pending_confirm == {}
