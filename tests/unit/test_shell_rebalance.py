"""The shell around rebalances, played on the in-memory Kafka (``streams.memory_broker``): no
broker, no faust consumer, no sleeping (the event loop's turns only).

A rebalance in the middle of a batch, a revoke during a flush, a refetch below the committed
offset: each time every record is processed once from the committed offset, in order, and acked
only with the flush that delivered what it caused in the same generation."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from faust.types import TP

from streams.memory_broker import MemoryConsumer, MemoryProducer, MemoryRecord
from streams.pipeline_task import PipelineTask
from tests.unit.shell_fakes import Acked, shell_over
from topics.envelope import Out

CONFIRM = b'{"op": "confirm", "device_id": "dev-1"}'


def worker(tmp_path: Path, committed: int, *, hold: bool) -> tuple[PipelineTask, MemoryConsumer, Any, Acked]:
    """The pipeline task over a shell on the in-memory Kafka; control partition 0 has ``committed``."""
    producer = MemoryProducer(hold=hold)
    released = Acked()
    shell, lost = shell_over(tmp_path, producer, released)
    assert lost == []
    tp = TP(shell.names.control, 0)
    consumer = MemoryConsumer({tp: committed}, default_high=1_000)
    shell.positions.consumer, shell.positions.tp_factory = consumer, TP
    return PipelineTask(app=None, shell=shell), consumer, producer, released


def records(task: PipelineTask, *offsets: int) -> list[MemoryRecord]:
    names = task.shell.names
    return [MemoryRecord(names.control, 0, o, (1_000 + o) / 1000, b"dev-1", CONFIRM) for o in offsets]


def processed(task: PipelineTask) -> list[int]:
    return [int(m.offset) for m in task.shell.batch.unacked]


def acked(released: Acked) -> list[int]:
    return [int(m.offset) for m in released.acked]  # type: ignore[attr-defined]


async def turns(until: Any, n: int = 200) -> None:
    for _ in range(n):
        if until():
            return
        await asyncio.sleep(0)
    raise AssertionError("never happened")


def test_a_rebalance_in_the_middle_of_a_batch_stops_it_and_the_records_are_read_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from streams import shell as shell_mod

    monkeypatch.setattr(shell_mod, "YIELD_EVERY_S", 0.0)  # a turn of the event loop after each record

    async def main() -> None:
        task, consumer, _, released = worker(tmp_path, committed=0, hold=False)
        asyncio.get_running_loop().call_soon(task.shell.rebalanced)  # comes at the first turn
        await task.work_through(records(task, 0, 1, 2, 3, 4))
        assert processed(task) == []  # record 0 dropped with the rebalance, 1-4 never processed
        await task.shell.flush()
        assert acked(released) == []
        await task.work_through(records(task, 0, 1, 2, 3, 4))  # faust reads again from 0
        assert processed(task) == [0, 1, 2, 3, 4]
        await task.shell.flush()
        assert acked(released) == [0, 1, 2, 3, 4] and consumer.sought == []

    asyncio.run(main())


def test_a_revoke_during_a_flush_waits_for_it_and_acks_nothing_of_it(tmp_path: Path) -> None:
    async def main() -> None:
        task, _, producer, released = worker(tmp_path, committed=0, hold=True)
        shell = task.shell
        await task.work_through(records(task, 0, 1, 2))
        shell.emit([Out("timeline", "dev-1", {"seq": 1})])
        await shell.flush()
        await turns(lambda: producer.futures)
        revoking = asyncio.ensure_future(shell.revoked())
        for _ in range(50):
            await asyncio.sleep(0)
        assert not revoking.done()  # the rebalance waits for the flush on its way
        producer.deliver()
        await turns(revoking.done)
        assert acked(released) == []  # delivered across the rebalance: read again, not acked
        producer.hold = False
        await task.work_through(records(task, 0, 1, 2))  # from the committed offset again
        assert processed(task) == [0, 1, 2]
        await shell.flush()
        await turns(lambda: not shell.batch.acking)
        assert acked(released) == [0, 1, 2]

    asyncio.run(main())


def test_a_refetch_below_the_committed_offset_is_skipped(tmp_path: Path) -> None:
    async def main() -> None:
        task, consumer, _, released = worker(tmp_path, committed=100, hold=False)
        await task.work_through(records(task, 97, 98, 99, 100, 101))  # fetched again from below
        assert processed(task) == [100, 101]
        assert consumer.sought == [] and consumer.gaps == []
        await task.shell.flush()
        assert acked(released) == [100, 101]

    asyncio.run(main())
