"""Around rebalances the shell acks nothing it did not deliver and reads a partition again where due."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import orjson
import pytest
from faust.types import TP

from streams.memory_broker import MemoryConsumer, MemoryProducer
from tests.unit.shell_fakes import Acked, Message, shell_over
from topics.envelope import Out


def test_a_flush_acks_exactly_the_records_whose_writes_it_sent(tmp_path: Path) -> None:
    """Two flushes at once (the pipeline and the merge timer): a record is never acked by a flush
    that did not send its writes, and a rebalance between them drops what was not sent."""

    async def main() -> None:
        producer = SlowProducer(hold=True)
        released = Acked()
        shell, lost = shell_over(tmp_path, producer, released)
        shell.emit([Out("timeline", "dev-1", {"seq": 1})])
        shell.batch.unacked = ["event-1"]
        first = asyncio.ensure_future(shell.flush())
        await asyncio.sleep(0)
        shell.emit([Out("timeline", "dev-1", {"seq": 2})])
        shell.batch.unacked.append("event-2")
        second = asyncio.ensure_future(shell.flush())
        await asyncio.sleep(0)
        shell.drop_unflushed()  # a rebalance while the first flush is still sending
        await asyncio.gather(first, second)
        await deliver_all(shell, producer)
        sent = [orjson.loads(v) for _, _, records in producer.batches for _, v in records if v]
        # each flush sent exactly its own record's writes, in order (a flush hands its batch to the
        # producer behind the stream, so the second one may have gone out before the rebalance)
        assert sent in ([{"seq": 1}], [{"seq": 1}, {"seq": 2}])
        # whatever was sent went out across the rebalance: nothing is acked, both are read again
        assert released.acked == []
        assert shell.batch.unacked == []
        assert lost == []

    asyncio.run(main())


async def deliver_all(shell: Any, producer: MemoryProducer) -> None:
    """The broker answers every batch the shell hands over (it hands them behind the stream, over
    a few turns of the event loop) until no flush waits for a delivery any more."""
    for _ in range(200):
        for fut in producer.futures:
            if not fut.done():
                fut.set_result(type("Meta", (), {"offset": 0})())
        if producer.futures and not shell.batch.acking:
            return
        await asyncio.sleep(0)
    raise AssertionError("the flushes never finished")


class SlowProducer(MemoryProducer):
    """Hands a batch over in a few steps of the event loop, as a real producer may (its deliveries
    held until the test settles them)."""

    async def send_batch(self, builder: Any, topic: str, *, partition: int) -> asyncio.Future[Any]:
        for _ in range(3):
            await asyncio.sleep(0)
        return await super().send_batch(builder, topic, partition=partition)


def test_a_batch_delivered_across_a_rebalance_is_read_again_not_acked(tmp_path: Path) -> None:
    async def main() -> None:
        producer = MemoryProducer(hold=True)
        released = Acked()
        shell, _ = shell_over(tmp_path, producer, released)
        shell.emit([Out("timeline", "dev-1", {"seq": 1})])
        shell.batch.unacked = ["event-1"]
        await shell.flush()
        shell.drop_unflushed()  # the rebalance: faust seeks back to the committed offsets
        await deliver_all(shell, producer)
        assert released.acked == []

    asyncio.run(main())


class Control(Message):
    """A record of the control topic (a confirmation, for a device the worker does not know)."""

    key = b"dev-1"
    value = b'{"op": "confirm", "device_id": "dev-1"}'


def reading_task(tmp_path: Path, committed: int | None, earliest: int = 0) -> tuple[Any, MemoryConsumer, Any]:
    """The pipeline task over a shell whose consumer has ``committed`` for control partition 0 and
    knows every partition's high watermark (1,000)."""
    from streams.pipeline_task import PipelineTask

    shell, _ = shell_over(tmp_path, MemoryProducer(hold=True))
    tp = TP(shell.names.control, 0)
    consumer = MemoryConsumer({tp: committed}, default_high=1_000, earliest=earliest)
    shell.positions.consumer, shell.positions.tp_factory = consumer, TP
    return PipelineTask(app=None, shell=shell), consumer, tp


def controls(task: Any, *offsets: int) -> list[Control]:
    return [Control(task.shell.names.control, 0, offset, 1_000 + offset) for offset in offsets]


def processed(task: Any) -> list[int]:
    """The offsets of the records the pipeline processed (in its batch: acked once delivered)."""
    return [int(m.offset) for m in task.shell.batch.unacked]


def test_a_record_handed_over_past_the_next_one_is_not_processed_and_its_partition_is_read_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Records fetched before a rebalance and dropped with the inbox left faust's fetch loop past
    them: the pipeline was handed the records after them, and their commit passed records nobody
    processed (outputs missing, later records judged on a state without them). A record past the
    next one is not processed; the partition is read again from the next one, and records seen
    already are skipped."""

    async def main() -> None:
        task, consumer, tp = reading_task(tmp_path, committed=5)
        with caplog.at_level(logging.WARNING, logger="streams.positions"):
            await task.work_through(controls(task, 5, 6, 9, 10))  # 7 and 8 were dropped
        assert processed(task) == [5, 6]
        assert consumer.sought == [(tp, 7)]  # read again from 7 (10 was fetched before the seek)
        said = [r.getMessage() for r in caplog.records if "reading the partition again" in r.getMessage()]
        assert said == [
            "guardian: control:0 handed over offset 9 while 7 is next (fetched before a "
            "rebalance); reading the partition again from 7"
        ]
        await task.work_through(controls(task, 7, 8, 6, 9, 10))  # read again (6: seen already)
        assert processed(task) == [5, 6, 7, 8, 9, 10] and consumer.gaps == []

    asyncio.run(main())


def test_after_a_rebalance_a_partition_is_read_from_its_committed_offset_or_the_logs_beginning(
    tmp_path: Path,
) -> None:
    async def main() -> None:
        task, consumer, tp = reading_task(tmp_path, committed=100)
        await task.work_through(controls(task, 250, 251))  # fetched before the rebalance
        assert processed(task) == [] and consumer.sought == [(tp, 100)]
        await task.work_through(controls(task, 100, 101))
        assert processed(task) == [100, 101]
        task.shell.rebalanced()
        consumer._committed_offset[tp] = None  # faust's seek still to come; the broker has 120
        consumer.broker[tp] = 120
        await task.work_through(controls(task, 120, 121))
        assert processed(task) == [120, 121]  # (a rebalance drops what was not flushed)
        task.shell.rebalanced()
        consumer.broker[tp] = None  # nothing committed: the log's beginning (3)
        consumer.earliest = 3
        await task.work_through(controls(task, 3, 4))
        assert processed(task) == [3, 4]
        assert consumer.sought == [(tp, 100)]

    asyncio.run(main())


def test_offsets_the_log_does_not_have_are_passed_once_read_again(tmp_path: Path) -> None:
    """Offsets with no record (transaction markers, compaction): read again from the next offset,
    the same record comes first, so the pipeline goes on from it and the offsets between count as
    acked (the commit passes them)."""

    async def main() -> None:
        task, consumer, tp = reading_task(tmp_path, committed=10)
        await task.work_through(controls(task, 12))
        assert processed(task) == [] and consumer.sought == [(tp, 10)]
        await task.work_through(controls(task, 12, 13))
        assert processed(task) == [12, 13]
        assert consumer.gaps == [(tp, 10, 11)] and consumer.sought == [(tp, 10)]

    asyncio.run(main())


def test_a_seek_back_whose_records_never_come_is_made_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Records past the next one keep coming after the seek back (more than were fetched before
    it): the seek is made again, so a partition is never left skipping its records."""
    from streams import positions as positions_mod

    monkeypatch.setattr(positions_mod, "REREAD_SKIP_MAX", 2)

    async def main() -> None:
        task, consumer, tp = reading_task(tmp_path, committed=7)
        await task.work_through(controls(task, 9, 10, 11))
        assert consumer.sought == [(tp, 7)]
        await task.work_through(controls(task, 12))
        assert consumer.sought == [(tp, 7), (tp, 7)] and processed(task) == []
        await task.work_through(controls(task, 7, 8, 9))
        assert processed(task) == [7, 8, 9] and consumer.gaps == []

    asyncio.run(main())
