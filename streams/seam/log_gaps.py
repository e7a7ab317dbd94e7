"""Gaps in the log (:class:`LogGapsOnly`).

What faust does: its fetch loop takes any jump from its read offset for a gap in the log
(transaction markers, compaction) and counts the offsets between as acked, the record in hand too,
before it has been processed.

Why we differ: around a rebalance the read offset can be ahead of or behind what the pipeline was
given (a record fetched before the rebalance and handed over after it), so the records in between
were counted as acked and committed without ever being processed (``guardian bench``'s scale-out
part). For the pipeline's topics faust's gap logic is off: the pipeline checks each partition's
offsets itself and reports the gaps the log really has (``add_log_gap``); elsewhere only the
missing offsets count, not the record in hand. Private part: the consumer's ``_add_gap``.

Upstream issue: none filed; close to faust-streaming #175.

Proved by: ``tests/unit/test_consumer_offsets.py``:
``test_a_gap_in_the_log_counts_only_the_missing_offsets_as_acked``,
``test_a_jump_in_a_topic_handed_to_the_pipeline_is_not_taken_for_a_gap_in_the_log``;
``tests/unit/test_read_again.py``: ``test_offsets_the_log_does_not_have_are_passed_once_read_again``.
"""

from __future__ import annotations

from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TP

from streams.seam.batch_conductor import BatchConductor


class LogGapsOnly(faust_aiokafka.Consumer):
    """faust's consumer counting as acked only offsets missing from the log."""

    async def _add_gap(self, tp: TP, offset_from: int, offset_to: int) -> None:
        """Offsets missing from a partition's log (``offset_from`` to the record in hand, as faust
        calls it) count as acked; faust's own counts the record in hand too, before it has been
        processed (it is acked once its outputs are delivered).

        Not for the topics handed to the pipeline (:class:`BatchConductor`): faust's fetch loop
        takes any jump from its read offset for a gap, and around a rebalance that offset can be
        ahead of or behind what the pipeline was given (a record fetched before the rebalance and
        handed over after it), so the records in between were counted as acked and committed
        without ever being processed. The pipeline checks each partition's offsets itself
        (``streams.positions.Positions.in_order``) and reports the gaps the log really has
        (:meth:`add_log_gap`)."""
        conductor = self.app.topics
        if isinstance(conductor, BatchConductor) and tp.topic in conductor.batch_topics:
            return
        if offset_to > offset_from:
            await super()._add_gap(tp, offset_from, offset_to - 1)

    async def add_log_gap(self, tp: TP, first: int, last: int) -> None:
        """Offsets ``first`` to ``last`` are not in the partition's log (e.g. transaction
        markers): they count as acked, so the commit can pass them."""
        if last >= first:
            await super()._add_gap(tp, first, last)
