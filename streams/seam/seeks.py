"""The seek after recovery (:class:`KeepsPlaceOnSeek`).

What faust/aiokafka does: once the tables are recovered (and when it fetched while its flow was
stopped) faust's ``perform_seek`` seeks every assigned partition to its committed offset and sets
the read offsets back to them, beside the fetch loop, which by then takes records of the resumed
partitions again; aiokafka leaves a partition with no committed offset (or offset 0) where its
fetch position stands.

Why we differ: the next record after the seek looked like a jump in the log, which faust takes for
offsets that do not exist: it added the records read meanwhile to the acked offsets a second time,
and every duplicate held the commit back a turn of the commit timer (the two-workers reliability
test: about 1,000 records uncommitted for minutes). Here a partition the fetch loop read meanwhile
goes on after its last record read, and a committed offset this consumer knows is never set back.
A partition with nothing committed is sought to its beginning: a record fetched and dropped during
a new group's first assignment was never read again (a fresh worker then processed nothing).
``broker_committed`` asks the broker for a committed offset faust's view lacks (empty from a
revocation to that seek). Private parts: ``perform_seek``, ``_read_offset``,
``_committed_offset``, ``_thread``.

Upstream issue: faust-streaming #629, #175 (fetch state after a rebalance).

Proved by: ``tests/unit/test_consumer_offsets.py``:
``test_a_seek_while_the_fetch_loop_reads_does_not_hold_the_commit_back``,
``test_records_dropped_while_a_seek_was_on_its_way_are_read_again``,
``test_after_a_rebalance_partitions_without_a_committed_offset_are_read_from_their_beginning``;
``tests/unit/test_read_again.py``:
``test_after_a_rebalance_a_partition_is_read_from_its_committed_offset_or_the_logs_beginning``.
"""

from __future__ import annotations

from collections.abc import Mapping

from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TP

from streams.seam.parts import part_of


class KeepsPlaceOnSeek(faust_aiokafka.Consumer):
    """faust's consumer whose seek after recovery keeps the place of what was read meanwhile."""

    async def perform_seek(self) -> None:
        """Seek every assigned partition to its committed offset (faust's ``perform_seek``, called
        once the tables are recovered and when it fetched while its flow was stopped), without
        losing the place of what the fetch loop read while the seek was on its way.

        faust's own runs beside the fetch loop, which by then takes records of the resumed
        partitions again; it set their read offsets back to the committed ones, so the next record
        looked like a jump in the log, which faust takes for offsets that do not exist (as after
        transaction markers): it added the records read meanwhile to the acked offsets a second
        time, and every duplicate there held the commit back a turn of the commit timer (a worker
        that took over the partitions of one that left stayed about 1,000 records behind for
        minutes). Here a partition the fetch loop read meanwhile goes on after its last record
        read (a record read again from the seeked position is below it and skipped), and a
        committed offset this consumer knows is never set back below itself."""
        read = self._read_offset
        before = {tp: read.get(tp) for tp in list(read)}
        generation = self.app.consumer_generation_id
        flowing = self.flow_active
        committed = await self.seek_to_committed()
        # records read meanwhile were handed over (not dropped: the flow ran throughout, and no
        # rebalance came, whose own seek then places the partitions)
        handed_over = flowing and self.flow_active and generation == self.app.consumer_generation_id
        known = self._committed_offset
        for tp, offset in committed.items():
            now = read.get(tp)
            if now is not None and now != before.get(tp) and handed_over:
                read[tp] = now + 1  # faust's own mark after a seek: the next offset to take
            else:
                read[tp] = offset if offset is not None and offset >= 0 else None
            mark = known.get(tp)
            if offset and (mark is None or offset > mark):
                known[tp] = offset

    async def broker_committed(self, tp: TP) -> int | None:
        """``tp``'s committed offset as the broker has it now (None: nothing committed); faust's
        own view of it (``_committed_offset``) is empty from a revocation until its seek after the
        tables are recovered, while its fetch loop may already hand records over."""
        thread = self._thread
        client = part_of(thread, "_ensure_consumer", "faust AIOKafkaConsumerThread")()
        offset = await thread.call_thread(client.committed, tp)
        return int(offset) if offset is not None and offset >= 0 else None

    async def seek_to_committed(self) -> Mapping[TP, int]:
        """Seek every assigned partition to its committed offset, and those of the stream's topics
        that have none (a new consumer group) to their beginning.

        faust calls this once the tables are recovered (``perform_seek``) to read again what it
        fetched and dropped while the partitions moved; aiokafka leaves a partition without a
        committed offset (or with offset 0) where its fetch position stands, so a record fetched
        and dropped during a new group's first assignment was never read again (a fresh worker
        then processed nothing)."""
        committed = await super().seek_to_committed()
        changelogs = self.app.tables.changelog_topics
        fresh = [tp for tp, offset in committed.items() if not offset and tp.topic not in changelogs]
        if fresh:
            await self._thread.seek_to_beginning(*fresh)
        return committed
