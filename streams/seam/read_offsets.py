"""Every record of the pipeline's topics handed over (:class:`ReadOffsets`, :class:`HandsOverEveryRecord`).

What faust does: its fetch loop keeps a read offset per partition (the last offset it handed over),
drops a record below it and takes a jump past it for offsets missing from the log.

Why we differ: around a rebalance that offset can be ahead of what the pipeline was given (records
fetched before the rebalance, dropped with the inbox), and the records read again were dropped: in
``guardian bench``'s scale-out part up to 1,250 records of a partition were neither processed nor
dead-lettered. For the pipeline's topics the read offset reads as unknown, so faust hands over
every record; the pipeline checks each partition's order itself
(``streams.positions.Positions.in_order``). Private part: the consumer's ``_read_offset``.

Upstream issue: faust-streaming #629, #175, #523 (partitions stalled or skipped after a
rebalance).

Proved by: ``tests/unit/test_consumer_offsets.py``:
``test_the_fetch_loop_drops_no_record_of_a_topic_handed_to_the_pipeline``; ``tests/unit/test_read_again.py``:
``test_a_record_handed_over_past_the_next_one_is_not_processed_and_its_partition_is_read_again``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from faust.transport.drivers import aiokafka as faust_aiokafka

from streams.seam.batch_conductor import BatchConductor


class ReadOffsets(dict[Any, Any]):
    """faust's read offsets (topic-partition -> the last offset its fetch loop handed over), read
    as unknown for the topics handed to the pipeline (:class:`BatchConductor`).

    faust's fetch loop drops a record below its read offset and takes a jump past it for offsets
    missing from the log. Around a rebalance that offset can be ahead of what the pipeline was
    given (records fetched before the rebalance, dropped with the inbox), and the records read
    again were dropped: the pipeline checks each partition's order itself
    (``streams.positions.Positions.in_order``: a record seen already is skipped there, a record past the next
    one makes it read the partition again), so for its topics faust hands over every record."""

    def __init__(self, batch_topics: Callable[[], frozenset[str]]) -> None:
        super().__init__()
        self.batch_topics = batch_topics

    def __missing__(self, tp: Any) -> None:
        return None

    def __getitem__(self, tp: Any) -> Any:
        if tp.topic in self.batch_topics():
            return None
        return super().__getitem__(tp)


class HandsOverEveryRecord(faust_aiokafka.Consumer):
    """faust's consumer whose read offsets are :class:`ReadOffsets`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)

        def batch_topics() -> frozenset[str]:
            conductor = self.app.topics
            return conductor.batch_topics if isinstance(conductor, BatchConductor) else frozenset()

        self._read_offset = ReadOffsets(batch_topics)
