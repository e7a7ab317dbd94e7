"""Where this worker stands in each input topic-partition since the last rebalance
(:class:`Positions`): the next offset the pipeline is to be handed (``read_next``: what is
processed), the next offset the merge will see (``next_offset``), where faust's fetch restarted
for a partition not seen yet (``start_offset``), and whether each is caught up with its high
watermark.

It decides whether a record handed over is the next one of its partition (:meth:`Positions.in_order`:
skipped if seen, a seek back if past the next one, a gap in the log once the same record comes first
again) and whether the merge may release a record (:meth:`Positions.caught_up`). What may be
committed is the commit protocol's (``streams.commit_batch``); faust's consumer commits it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiokafka.errors import KafkaError

from streams.broker import ShellConsumer
from streams.inbox import INBOX_MAX
from streams.metrics import GuardianMetrics
from streams.seam.reads import committed_offsets
from topics.names import INPUT_SUFFIXES, TopicNames

log = logging.getLogger(__name__)

#: records past the next one skipped after a seek back to it before the worker seeks again (what
#: was fetched before the seek, in faust's fetch loop and the inbox, is fewer)
REREAD_SKIP_MAX = 4 * INBOX_MAX


def _no_rebalance() -> int:
    return 0


@dataclass
class Positions:
    """The input topic-partitions' positions since the last rebalance (see the module)."""

    names: TopicNames
    #: faust's consumer (``streams.memory_broker.MemoryConsumer`` in unit tests) and its
    #: topic-partition type (None: not attached)
    consumer: ShellConsumer | None = None
    tp_factory: Callable[[str, int], Any] | None = None
    #: the worker's Prometheus metrics (None: not counted, e.g. unit tests)
    metrics: GuardianMetrics | None = None
    #: the rebalance generation (``CommitBatch.generation``): a record whose partition's start was
    #: asked across a rebalance is not processed
    generation: Callable[[], int] = _no_rebalance
    #: (suffix, partition) -> the next offset this worker will see (the last one given to the merge
    #: + 1) since the last rebalance
    next_offset: dict[tuple[str, int], int] = field(default_factory=dict)
    #: (suffix, partition) -> where faust's fetch restarted, for those with no record seen yet
    #: (``learn_positions``)
    start_offset: dict[tuple[str, int], int] = field(default_factory=dict)
    #: (suffix, partition) -> the offset of the record the pipeline is to be handed next since the
    #: last rebalance (:meth:`in_order`), and the last jump past it it read the partition again for
    read_next: dict[tuple[str, int], int] = field(default_factory=dict)
    read_again: dict[tuple[str, int], tuple[int, int, int]] = field(default_factory=dict)
    #: (suffix, partition) -> :meth:`caught_up`'s answer, kept until the pipeline's next turn of the
    #: event loop (:meth:`new_turn`) or a record of that topic-partition entering the merge: the
    #: merge asks for every record it releases, and what the answer depends on (high watermarks,
    #: where faust's fetch restarts) moves between turns; a record released on a kept answer is one
    #: the pipeline could have released when the answer was found
    caught_now: dict[tuple[str, int], bool] = field(default_factory=dict)

    def entered(self, suffix: str, partition: int, offset: int) -> None:
        """A record of the topic-partition entered the merge."""
        self.next_offset[(suffix, partition)] = offset + 1
        self.caught_now.pop((suffix, partition), None)

    def forget(self) -> None:
        """Partitions move: what this worker knew of their positions is forgotten."""
        self.next_offset.clear()
        self.start_offset.clear()
        self.read_next.clear()
        self.read_again.clear()
        self.new_turn()

    def caught_up(self, suffix: str, partition: int) -> bool:
        """Has this worker seen every record of the topic-partition up to its high watermark?"""
        if self.consumer is None or self.tp_factory is None:
            return True
        tp = self.tp_factory(self.names.prefix + suffix, partition)
        try:
            highwater = self.consumer.highwater(tp)
        except (KeyError, AssertionError, AttributeError):
            return False  # unknown (e.g. reconnecting to a restarted broker): not safe to go past it
        if highwater is None:
            return False
        seen = self.next_offset.get((suffix, partition))
        if seen is None:
            seen = self.start_offset.get((suffix, partition))
        return seen is not None and seen >= highwater

    def caught_up_now(self, suffix: str, partition: int) -> bool:
        """:meth:`caught_up`, as found since the pipeline's last turn (``caught_now``)."""
        key = (suffix, partition)
        known = self.caught_now.get(key)
        if known is None:
            known = self.caught_now[key] = self.caught_up(suffix, partition)
        return known

    def behind(self) -> bool:
        """Are records of an input topic-partition of this worker on the broker (or fetched) that
        the merge has not been given yet (more input is on its way)?"""
        keys = self.next_offset.keys() | self.start_offset.keys()
        return any(not self.caught_up_now(suffix, partition) for suffix, partition in keys)

    def new_turn(self) -> None:
        """The pipeline is back from a turn of the event loop: what it knew may have moved."""
        self.caught_now.clear()

    async def in_order(self, suffix: str, message: Any) -> bool:
        """Is ``message`` the next record of its topic-partition (since the last rebalance: the
        one at the committed offset, or the log's beginning when nothing is committed)? Only such
        a record is processed: every record is processed once, in the log's order, and none is
        acked (then committed) before those before it.

        faust's fetch loop hands over what its read offset lets through, and around a rebalance
        that offset can be ahead of what the pipeline was given (records fetched before the
        rebalance and dropped with the inbox, or read while the partitions were sought back): the
        pipeline was then handed records past ones it never saw, and the commit passed them (in
        ``guardian bench``'s scale-out part, up to 1,250 records of a partition neither processed
        nor dead-lettered). A record before the next one was seen already in this assignment and
        is skipped. A record past it is not processed: the partition is sought back to the next
        one and read again from there (``guardian_input_reread_total``, and a log line); should
        the same record come first again, the log has no records in between (transaction
        markers, compaction) and the pipeline goes on from it, the offsets between counted as
        acked."""
        key = (suffix, int(message.partition))
        offset = int(message.offset)
        expected = self.read_next.get(key)
        if expected is None:
            generation = self.generation()
            expected = await self.first_offset(message.topic, key[1])
            if generation != self.generation():
                return False  # a rebalance came meanwhile: read again by the partition's owner
            if expected is None:  # not known (no consumer): the record starts the partition's order
                expected = offset
        if offset == expected:
            self.read_next[key] = offset + 1
            self.read_again.pop(key, None)
            return True
        if offset < expected:
            return False  # handed over again (read again after a seek): processed already
        tp = self.tp_factory(message.topic, key[1]) if self.tp_factory is not None else None
        again = self.read_again.get(key)
        if again is not None and again[0] == expected and offset != again[1]:
            # fetched before the seek back to ``expected``: the records read again come after it
            skipped = again[2] + 1
            self.read_again[key] = (expected, again[1], skipped)
            if skipped <= REREAD_SKIP_MAX:
                return False
            again = None  # the records read again never came: seek again
        if again is not None and again[:2] == (expected, offset):
            log.warning(
                "guardian: %s:%d has no records from offset %d to %d (transaction markers or "
                "compaction); going on from %d",
                suffix,
                key[1],
                expected,
                offset - 1,
                offset,
            )
            self.read_next[key] = offset + 1
            del self.read_again[key]
            if tp is not None and self.consumer is not None and hasattr(self.consumer, "add_log_gap"):
                await self.consumer.add_log_gap(tp, expected, offset - 1)
            return True
        self.read_again[key] = (expected, offset, 0)
        if again is None or again[0] != expected:
            # once per place read again from: records fetched before it keep coming until the
            # fetch from it arrives, each sought back again (faust's fetch loop moves its read
            # offset past the place with each of them)
            log.warning(
                "guardian: %s:%d handed over offset %d while %d is next (fetched before a "
                "rebalance); reading the partition again from %d",
                suffix,
                key[1],
                offset,
                expected,
                expected,
            )
            if self.metrics is not None:
                self.metrics.irregular.input_reread.inc()
        if tp is not None and self.consumer is not None:
            try:
                # in the consumer's own thread (faust's ``seek`` calls the client from this one,
                # racing its fetcher: a KeyError in aiokafka's fetched records stopped a worker)
                await self.consumer.seek_wait({tp: expected})
            except (KafkaError, TimeoutError) as exc:  # e.g. the partition was taken away meanwhile
                log.warning("guardian: %s:%d could not be read again (%r)", suffix, key[1], exc)
                self.read_again.pop(key, None)  # the next record past it tries again
        return False

    async def first_offset(self, topic: str, partition: int) -> int | None:
        """Where this assignment's reading of a topic-partition begins: its committed offset (as
        faust's seek found it, else as the broker has it now: faust's fetch loop may hand records
        over before that seek), or the log's beginning when nothing is committed; None when not
        known (no consumer, or the broker did not answer: then the first record handed over is
        taken for it)."""
        consumer = self.consumer
        if consumer is None or self.tp_factory is None:
            return None
        tp = self.tp_factory(topic, partition)
        offset = committed_offsets(consumer).get(tp)
        try:
            if offset is None and hasattr(consumer, "broker_committed"):
                offset = await consumer.broker_committed(tp)
            if offset is not None:
                return int(offset)
            earliest = await consumer.earliest_offsets(tp)
        except KafkaError as exc:
            log.warning("guardian: the beginning of %s is not known (%r): reading on from here", tp, exc)
            return None
        first = earliest.get(tp)
        return None if first is None else int(first)

    async def learn_positions(self) -> None:
        """Where this worker stands in each input topic-partition it has not seen a record of
        since the last rebalance: the offset faust's fetch restarts from (its committed offset, or
        the log's beginning when nothing is committed), kept in ``start_offset``.

        Never the consumer's fetch position: it counts records faust has fetched but the merge has
        not been given yet (in the inbox, or in the batch the pipeline is working through), and
        taking it for "seen" let a later record of another topic go before them."""
        consumer = self.consumer
        if consumer is None or self.tp_factory is None:
            return
        committed = committed_offsets(consumer)
        for tp in list(consumer.assignment()):
            suffix = self.names.suffix_of(tp.topic)
            key = (str(suffix), int(tp.partition))
            if suffix not in INPUT_SUFFIXES or key in self.next_offset:
                continue
            offset = committed.get(tp)
            if offset is None:  # nothing committed (faust also keeps a committed 0 as None)
                if key in self.start_offset:
                    continue  # the log's beginning is known already
                try:
                    high = consumer.highwater(tp)
                except (KeyError, AssertionError, AttributeError):
                    continue  # not fetched yet: not caught up anyway
                if high is None:
                    continue
                try:
                    # an empty log (high watermark 0): nothing to wait for
                    offset = (await consumer.earliest_offsets(tp)).get(tp) if high else 0
                except KafkaError as exc:  # asked again at the next tick; until then not caught up
                    log.debug("guardian: the beginning of %s is not known yet: %r", tp, exc)
                    continue
            if offset is not None and key not in self.next_offset:
                # a lower bound of the next record faust hands over: it only moves up
                self.start_offset[key] = max(self.start_offset.get(key, 0), int(offset))
