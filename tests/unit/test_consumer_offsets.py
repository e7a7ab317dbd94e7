"""What faust's consumer commits and reads from (``streams.seam``): batch acks, seeks, gaps in the log."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from streams.app import GuardianApp


class AckBook:
    """The acked-offset bookkeeping of faust's consumer (what its commit timer commits from)."""

    def __init__(self, committed: dict[Any, int | None]) -> None:
        from collections import defaultdict
        from weakref import WeakSet

        self._acked: dict[Any, list[int]] = defaultdict(list)
        self._acked_index: dict[Any, set[int]] = defaultdict(set)
        self._committed_offset: dict[Any, int | None] = defaultdict(lambda: None, committed)
        self._unacked_messages: WeakSet[Any] = WeakSet()
        self._n_acked = 0
        self._waiting_for_ack = None
        acking = {"in-a", "in-b"}
        self.app = type(
            "App", (), {"topics": type("Topics", (), {"acks_enabled_for": staticmethod(acking.__contains__)})}
        )


def messages() -> list[Any]:
    from faust.types import TP, ConsumerMessage

    out = []
    for topic, partition, offset in [
        ("in-a", 0, 4),
        ("in-a", 0, 5),
        ("in-b", 1, 0),
        ("in-a", 1, 9),
        ("other", 0, 1),
    ]:
        out.append(
            ConsumerMessage(
                topic, partition, offset, 1.0, 0, None, b"k", b"v", None, 1, 1, TP(topic, partition)
            )
        )
    return out


def test_a_delivered_batch_is_acked_as_faust_acks_each_message() -> None:
    """``ack_all`` leaves faust's consumer exactly as acking each message through faust would: the
    same offsets to commit, none acked twice, none below the committed offset."""
    from faust.transport.consumer import Consumer
    from faust.types import TP

    from streams.seam.batch_acks import ack_all

    committed: dict[Any, int | None] = {TP("in-a", 1): 10}  # offset 9 of in-a/1 is committed already
    faust_way, batch_way = AckBook(committed), AckBook(committed)
    one_by_one, batch = messages(), messages()
    for message in one_by_one:
        message.incref(1)
        message.ack(type("Consumer", (), {"ack": lambda self, m: Consumer.ack(faust_way, m)})())  # type: ignore[arg-type]
    assert ack_all(batch_way, batch) == 3
    assert ack_all(batch_way, batch) == 0  # acked once only
    assert dict(batch_way._acked) == dict(faust_way._acked) == {TP("in-a", 0): [4, 5], TP("in-b", 1): [0]}
    assert {tp: s for tp, s in batch_way._acked_index.items() if s} == {
        tp: s for tp, s in faust_way._acked_index.items() if s
    }
    assert batch_way._n_acked == faust_way._n_acked == 3
    assert all(m.acked for m in batch)


def test_after_a_rebalance_partitions_without_a_committed_offset_are_read_from_their_beginning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """faust seeks to the committed offsets once the tables are recovered, to read again what it
    fetched and dropped while partitions moved; where a new group has committed nothing, the
    stream's partitions go back to their beginning (the table changelogs are faust's to place)."""
    from faust.transport.drivers import aiokafka as faust_aiokafka
    from faust.types import TP

    app = GuardianApp("eager-seek", broker="kafka://127.0.0.1:1", store="memory://", web_enabled=False)
    app.Table("owners", partitions=4)
    consumer: Any = app.consumer
    changelog = next(iter(app.tables.changelog_topics))
    committed = {
        TP("in", 0): None,
        TP("in", 1): 0,
        TP("in", 2): 5,
        TP(changelog, 0): None,
    }

    async def faust_seek(self: Any) -> dict[TP, int | None]:
        return committed

    sought: list[TP] = []

    async def to_beginning(*partitions: TP) -> None:
        sought.extend(partitions)

    monkeypatch.setattr(faust_aiokafka.Consumer, "seek_to_committed", faust_seek)
    monkeypatch.setattr(consumer._thread, "seek_to_beginning", to_beginning)
    try:
        assert asyncio.run(consumer.seek_to_committed()) == committed
    finally:
        consumer._thread.thread_loop.close()  # the consumer thread's loop (never started here)
    assert sorted(sought) == [TP("in", 0), TP("in", 1)]


def _fetch_loop_takes(consumer: Any, tp: Any, offset: int) -> None:
    """What faust's fetch loop (``Consumer._drain_messages``) does with the next record of ``tp``
    before handing it over: a record more than one past the read offset marks the offsets in
    between as a gap in the log (acked without a record); then it is the read offset."""
    read = consumer._read_offset[tp]
    assert read is None or offset >= read, "faust would drop this record as read already"
    if read and offset - read > 1:
        asyncio.run(consumer._add_gap(tp, read + 1, offset))
    consumer._read_offset[tp] = offset


def _processed(consumer: Any, tp: Any, offsets: range | list[int]) -> None:
    """The pipeline delivered these records' outputs: acked, as ``ack_all`` does."""
    for offset in offsets:
        if offset not in consumer._acked_index[tp]:
            consumer._acked_index[tp].add(offset)
            consumer._acked[tp].append(offset)


def test_a_seek_while_the_fetch_loop_reads_does_not_hold_the_commit_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A worker takes over partitions with records waiting: faust seeks them to their committed
    offsets while its fetch loop already reads them. What was read meanwhile is not read again,
    the next record is no gap, and the commit reaches the last record processed at once (faust's
    own seek set the read offset back: the records in between were acked twice over, and the
    commit then moved one offset per turn of its timer, minutes behind)."""
    from faust.transport.drivers import aiokafka as faust_aiokafka
    from faust.types import TP

    app = GuardianApp("eager-reseek", broker="kafka://127.0.0.1:1", store="memory://", web_enabled=False)
    consumer: Any = app.consumer
    taken, quiet = TP("in", 0), TP("in", 1)
    consumer._read_offset.update({taken: 953, quiet: 705})  # where an earlier seek put them
    consumer._committed_offset.update({taken: 953, quiet: 800})  # quiet: committed since

    async def faust_seek(self: Any) -> dict[TP, int | None]:
        for offset in range(953, 1101):  # the fetch loop reads while the seek is on its way
            _fetch_loop_takes(consumer, taken, offset)
        return {taken: 953, quiet: 705}  # the broker's answer, read before the last commit

    monkeypatch.setattr(faust_aiokafka.Consumer, "seek_to_committed", faust_seek)
    try:
        asyncio.run(consumer.perform_seek())
        _fetch_loop_takes(consumer, taken, 1101)  # the next record: no gap
        _processed(consumer, taken, range(953, 1102))
        assert not consumer._gap[taken]
        assert consumer._new_offset(taken) == 1102  # every record processed, committed at once
        assert consumer._read_offset[quiet] == 705  # nothing read meanwhile: read from the seek
        assert consumer._committed_offset[quiet] == 800  # not set back by an older answer
        with pytest.raises(AssertionError, match="read already"):
            _fetch_loop_takes(consumer, taken, 1000)  # read again from the seeked position
    finally:
        consumer._thread.thread_loop.close()


def test_records_dropped_while_a_seek_was_on_its_way_are_read_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A rebalance begins while the seek is on its way: the fetch loop drops what it reads (the
    flow is stopped), so the partitions go back to their committed offsets, as faust places them."""
    from faust.transport.drivers import aiokafka as faust_aiokafka
    from faust.types import TP

    app = GuardianApp("eager-drop", broker="kafka://127.0.0.1:1", store="memory://", web_enabled=False)
    consumer: Any = app.consumer
    tp = TP("in", 0)
    consumer._read_offset[tp] = 953

    async def faust_seek(self: Any) -> dict[TP, int | None]:
        consumer.stop_flow()
        for offset in range(953, 1101):
            _fetch_loop_takes(consumer, tp, offset)  # taken and dropped
        return {tp: 953}

    monkeypatch.setattr(faust_aiokafka.Consumer, "seek_to_committed", faust_seek)
    try:
        asyncio.run(consumer.perform_seek())
        assert consumer._read_offset[tp] == 953
        _fetch_loop_takes(consumer, tp, 953)  # read again
    finally:
        consumer._thread.thread_loop.close()


def test_a_gap_in_the_log_counts_only_the_missing_offsets_as_acked() -> None:
    """Offsets missing from a partition's log (e.g. transaction markers) are committed past; the
    record after them is committed only once it is processed (faust's gap took it in too: with a
    later batch delivered first, its offset was committed before its outputs were delivered)."""
    from faust.types import TP

    app = GuardianApp("eager-gap", broker="kafka://127.0.0.1:1", store="memory://", web_enabled=False)
    consumer: Any = app.consumer
    tp = TP("in", 0)
    try:
        consumer._committed_offset[tp] = 7
        for offset in (7, 10, 11):  # 8 and 9 are not records
            _fetch_loop_takes(consumer, tp, offset)
        _processed(consumer, tp, range(7, 8))
        _processed(consumer, tp, range(11, 12))  # 10's batch is still on its way
        assert consumer._new_offset(tp) == 10
        consumer._committed_offset[tp] = 10
        _processed(consumer, tp, range(10, 11))
        assert consumer._new_offset(tp) == 12
        assert consumer._acked[tp] == []  # nothing acked twice, nothing left over
    finally:
        consumer._thread.thread_loop.close()


def test_a_jump_in_a_topic_handed_to_the_pipeline_is_not_taken_for_a_gap_in_the_log() -> None:
    """faust's fetch loop takes any jump from its read offset for offsets missing from the log and
    counts them as acked; around a rebalance that read offset can be ahead of what the pipeline
    was given, so the commit passed records nobody processed. For the pipeline's topics only the
    gaps the pipeline found in the log count (``add_log_gap``)."""
    from faust.types import TP

    app = GuardianApp("eager-no-gap", broker="kafka://127.0.0.1:1", store="memory://", web_enabled=False)
    consumer: Any = app.consumer
    mine, other = TP("in", 0), TP("elsewhere", 0)

    async def sink(message: Any) -> None:
        return None

    app.topics.route({"in"}, sink)
    try:
        consumer._committed_offset.update({mine: 7, other: 7})
        for tp in (mine, other):
            for offset in (7, 10, 11):  # the fetch loop saw 8 and 9 go by unread
                _fetch_loop_takes(consumer, tp, offset)
            _processed(consumer, tp, [7, 10, 11])
        assert consumer._new_offset(other) == 12  # faust's own topics: a gap in the log
        assert consumer._new_offset(mine) == 8  # 8 and 9 were never processed: not past them
        asyncio.run(consumer.add_log_gap(mine, 8, 9))  # the pipeline found the log has none
        assert consumer._new_offset(mine) == 12
    finally:
        consumer._thread.thread_loop.close()


def test_the_fetch_loop_drops_no_record_of_a_topic_handed_to_the_pipeline() -> None:
    """faust's fetch loop drops a record below its read offset; around a rebalance that offset
    could be past records fetched before it and dropped with the inbox, so the records read again
    never reached the pipeline. For the pipeline's topics the read offset reads as unknown (the
    pipeline skips what it has seen itself); faust's own topics keep it."""
    from faust.types import TP

    app = GuardianApp("eager-read", broker="kafka://127.0.0.1:1", store="memory://", web_enabled=False)
    consumer: Any = app.consumer

    async def sink(message: Any) -> None:
        return None

    app.topics.route({"in"}, sink)
    try:
        mine, other = TP("in", 0), TP("elsewhere", 0)
        consumer._read_offset.update({mine: 2_518, other: 2_518})
        read = consumer._read_offset.__getitem__  # as faust's fetch loop looks it up
        assert read(mine) is None and read(other) == 2_518 and read(TP("elsewhere", 1)) is None
        _fetch_loop_takes(consumer, mine, 1_300)  # read again after a seek back: handed over
        with pytest.raises(AssertionError, match="read already"):
            _fetch_loop_takes(consumer, other, 1_300)
    finally:
        consumer._thread.thread_loop.close()
