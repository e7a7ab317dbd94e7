"""The pipeline's flush: input records are acked only once everything they caused is delivered."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson

from streams.memory_broker import MemoryProducer
from streams.shell import PipelineShell
from tests.unit.shell_fakes import Acked, Clock, handed_over, shell_over
from topics.envelope import Out


def test_events_are_acked_only_after_their_outputs_are_delivered(tmp_path: Path) -> None:
    async def main() -> None:
        producer = MemoryProducer(hold=True)
        released = Acked()
        shell, lost = shell_over(tmp_path, producer, released)
        shell.emit([Out("timeline", "dev-1", {"seq": 1})])
        shell.batch.unacked = ["event-1", "event-2"]
        await shell.flush()
        await handed_over(producer)
        assert producer.batches and released.acked == []  # handed over, not yet delivered
        for fut in producer.futures:
            fut.set_result(type("Meta", (), {"offset": 0})())
        await asyncio.gather(*shell.batch.acking)
        assert released.acked == ["event-1", "event-2"]
        assert lost == []

    asyncio.run(main())


def test_a_failed_delivery_acks_nothing_and_stops_the_worker(tmp_path: Path) -> None:
    from aiokafka.errors import KafkaTimeoutError

    async def main() -> None:
        producer = MemoryProducer(hold=True)
        released = Acked()
        shell, lost = shell_over(tmp_path, producer, released)
        shell.emit([Out("decisions", "dev-1", {"decision_id": "dec_1"})])
        shell.batch.unacked = ["event-1"]
        await shell.flush()
        await handed_over(producer)
        producer.futures[0].set_exception(KafkaTimeoutError())
        await asyncio.gather(*shell.batch.acking)
        assert released.acked == []
        assert len(lost) == 1 and isinstance(lost[0], KafkaTimeoutError)

    asyncio.run(main())


def test_a_stopping_worker_waits_for_what_it_handed_over_then_flushes_nothing(tmp_path: Path) -> None:
    """faust stops its producer before it cancels the worker's tasks: a flush in between crashed a
    worker stopped by SIGTERM (exit 1 instead of 0). Once stopping, the shell waits for the batches
    it handed over, drops what it had not flushed (read again by the next owner: nothing of it
    left the worker) and hands nothing more to the producer; a delivery failing then is no crash."""
    from aiokafka.errors import ProducerClosed

    async def main() -> None:
        producer = MemoryProducer(hold=True)
        released = Acked()
        shell, lost = shell_over(tmp_path, producer, released)
        shell.emit([Out("timeline", "dev-1", {"seq": 1})])
        shell.batch.unacked = ["event-1"]
        await shell.flush()
        await handed_over(producer)
        closing = asyncio.ensure_future(shell.batch.close())
        for _ in range(20):
            await asyncio.sleep(0)
        assert not closing.done()  # waits for the batch on its way
        producer.futures[0].set_result(type("Meta", (), {"offset": 0})())
        await asyncio.wait_for(closing, 1)
        handed = len(producer.batches)
        shell.emit([Out("timeline", "dev-1", {"seq": 2})])
        shell.batch.unacked = ["event-2"]
        await shell.flush()
        assert len(producer.batches) == handed and shell.batch.unacked == []
        await shell.batch._lost(ProducerClosed())
        assert lost == []
        await asyncio.gather(*shell.batch.acking)
        assert "event-2" not in released.acked

    asyncio.run(main())


def test_a_batch_with_nothing_to_send_is_acked_at_once(tmp_path: Path) -> None:
    async def main() -> None:
        released = Acked()
        shell, _ = shell_over(tmp_path, MemoryProducer(hold=True), released)
        shell.batch.unacked = ["event-1"]
        await shell.flush()
        assert released.acked == ["event-1"]

    asyncio.run(main())


def test_a_rebalance_forgets_what_was_not_flushed(tmp_path: Path) -> None:
    async def main() -> None:
        shell, _ = shell_over(tmp_path, MemoryProducer(hold=True))
        await shell.inbox.receive("message-2")
        shell.emit([Out("timeline", "dev-1", {"seq": 1})])
        shell.batch.unacked = ["event-1"]
        shell.drop_unflushed()
        assert shell.batch.unacked == [] and len(shell.store.writes) == 0
        assert shell.inbox.messages == [] and not shell.inbox.ready.is_set()

    asyncio.run(main())


def test_a_full_inbox_holds_the_fetcher_until_the_pipeline_takes_it(tmp_path: Path) -> None:
    from streams import inbox as inbox_mod

    async def main() -> None:
        shell, _ = shell_over(tmp_path, MemoryProducer(hold=True))
        for i in range(inbox_mod.INBOX_MAX - 1):
            await shell.inbox.receive(f"m{i}")
        last = asyncio.ensure_future(shell.inbox.receive("last"))
        await asyncio.sleep(0)
        assert not last.done() and shell.inbox.ready.is_set()
        batch = shell.inbox.take()
        await asyncio.wait_for(last, 1)
        assert len(batch) == inbox_mod.INBOX_MAX and batch[-1] == "last"

    asyncio.run(main())


async def all_handed_over(producer: MemoryProducer, n: int) -> None:
    for _ in range(100):
        if len(producer.futures) >= n:
            return
        await asyncio.sleep(0)
    raise AssertionError(f"{len(producer.futures)} of {n} batches handed to the producer")


def test_a_revocation_lets_the_rebalance_go_on_only_once_every_flushed_batch_is_delivered(
    tmp_path: Path,
) -> None:
    """The partitions' next owner rebuilds their tables from the changelogs as they stand when it
    starts: a flush still on its way must not be seen in part (here the state's changelog batch
    without the dedup key's), nor land after the new owner's writes."""
    from tables.state import DeviceState
    from topics.envelope import Coords

    async def main() -> None:
        producer = MemoryProducer(hold=True)
        released = Acked()
        shell, lost = shell_over(tmp_path, producer, released)
        rec = shell.store.at(0)
        rec.put_device(DeviceState(device_id="dev-1"))
        rec.put_seen("dev-1", "ev-1", 1_000, Coords("observations", 0, 7))
        rec.commit("dev-1", Coords("observations", 0, 7), [Out("timeline", "dev-1", {"seq": 1})])
        shell.emit([Out("timeline", "dev-1", {"seq": 1})])
        shell.batch.unacked = ["event-7"]
        await shell.flush()
        await all_handed_over(producer, 3)  # the devices and seen changelogs, the timeline
        revoking = asyncio.ensure_future(shell.revoked())
        producer.futures[0].set_result(type("Meta", (), {"offset": 0})())
        for _ in range(50):
            await asyncio.sleep(0)
        assert not revoking.done()
        for fut in producer.futures[1:]:
            fut.set_result(type("Meta", (), {"offset": 0})())
        await asyncio.wait_for(revoking, 1)
        # delivered across the rebalance: acked by nobody here, read again by the next owner
        assert released.acked == []
        assert lost == []

    asyncio.run(main())


def test_a_worker_whose_flushed_batches_are_not_delivered_after_a_revocation_stops(tmp_path: Path) -> None:
    async def main() -> None:
        producer = MemoryProducer(hold=True)
        shell, lost = shell_over(tmp_path, producer, Acked())
        shell.emit([Out("timeline", "dev-1", {"seq": 1})])
        shell.batch.unacked = ["event-1"]
        await shell.flush()
        await handed_over(producer)
        await shell.batch.settle(timeout_s=0.01)
        assert len(lost) == 1 and isinstance(lost[0], TimeoutError)

    asyncio.run(main())


def deferred_batches(shell: PipelineShell, n: int) -> None:
    """Records of one device (its state changed by each) in the shell's batch, each with a
    decision: the state is written with :meth:`FaustStore.commit` as the processor does."""
    from tables.state import DeviceState
    from topics.envelope import Coords

    rec = shell.store.at(0)
    shell.batch.open()
    rec.put_device(DeviceState(device_id="dev-1", timeline_seq=n))
    rec.commit("dev-1", Coords("observations", 0, n), [])
    shell.emit([Out("decisions", "dev-1", {"decision_id": f"dec_{n}"})])
    shell.batch.add(f"event-{n}")


def deferring_shell(
    tmp_path: Path, **options: Any
) -> tuple[PipelineShell, MemoryProducer, Acked, list[BaseException]]:
    """A shell whose producer delivers at once, on a clock the test moves."""
    producer = MemoryProducer()
    released = Acked()
    shell, lost = shell_over(tmp_path, producer, released, **options)
    shell.batch.clock = Clock()
    return shell, producer, released, lost


def test_behind_the_broker_a_devices_entry_is_written_once_for_several_batches(tmp_path: Path) -> None:
    """Behind the broker, a due batch's outputs go out at once and its table writes wait: a device
    whose records fill several batches has its entry written once, when the deferred writes are
    due, and its records are acked only once that is delivered; reads see the waiting state."""
    from streams import commit_batch as commit_batch_mod

    async def main() -> None:
        shell, producer, released, lost = deferring_shell(tmp_path)
        clock = shell.batch.clock
        assert isinstance(clock, Clock)
        for n in range(3):
            deferred_batches(shell, n)
            await shell.flush(keep_state=True)
            await asyncio.gather(*shell.batch.acking)
        sent = [topic for topic, _, _ in producer.batches]
        assert sent.count(shell.outlets.topics["decisions"]) == 3  # every decision went out at once
        assert "app-devices-changelog" not in sent and released.acked == []
        device = shell.store.at(0).get_device("dev-1")
        assert device is not None and device.timeline_seq == 2
        assert not shell.batch.due()
        clock.now += commit_batch_mod.DEFER_STATE_AFTER_S
        assert shell.batch.due()
        await shell.flush(keep_state=True)  # due: the table writes go with it
        await asyncio.gather(*shell.batch.acking)
        entries = [records for topic, _, records in producer.batches if topic == "app-devices-changelog"]
        assert [len(records) for records in entries] == [1]  # one write for three records
        assert orjson.loads(entries[0][0][1] or b"{}")["d"]["timeline_seq"] == 2
        assert released.acked == ["event-0", "event-1", "event-2"] and lost == []

    asyncio.run(main())


def test_deferred_table_writes_go_with_the_batch_once_the_pipeline_caught_up_or_holds_many(
    tmp_path: Path,
) -> None:
    from streams import commit_batch as commit_batch_mod

    async def main() -> None:
        shell, _, released, _ = deferring_shell(tmp_path)
        deferred_batches(shell, 0)
        await shell.flush(keep_state=True)
        deferred_batches(shell, 1)
        await shell.flush()  # caught up: everything goes
        await asyncio.gather(*shell.batch.acking)
        assert released.acked == ["event-0", "event-1"] and not shell.batch.deferred
        deferred_batches(shell, 2)
        await shell.flush(keep_state=True)
        shell.batch.unacked = [f"more-{i}" for i in range(commit_batch_mod.DEFER_STATE_RECORDS)]
        assert shell.batch.state_due() and shell.batch.due()

    asyncio.run(main())


def test_with_deferral_off_a_batch_behind_the_broker_writes_its_tables_and_is_acked_at_once(
    tmp_path: Path,
) -> None:
    """``GUARDIAN_DEFER_STATE_S=0``: behind the broker too, every flush writes its devices' state
    with its outputs, and its records are acked (their offsets committed) as soon as Kafka has both."""

    async def main() -> None:
        shell, producer, released, lost = deferring_shell(tmp_path, defer_state_s=0.0)
        for n in range(2):
            deferred_batches(shell, n)
            await shell.flush(keep_state=True)
            await asyncio.gather(*shell.batch.acking)
            assert released.acked == [f"event-{i}" for i in range(n + 1)] and not shell.batch.deferred
        entries = [records for topic, _, records in producer.batches if topic == "app-devices-changelog"]
        assert [len(records) for records in entries] == [1, 1]  # the entry written with each batch
        assert shell.batch.time_left() == 0.0 and not shell.batch.due() and lost == []

    asyncio.run(main())


def test_a_rebalance_forgets_deferred_table_writes_and_acks_none_of_their_records(tmp_path: Path) -> None:
    """A record whose outputs went out while its table writes waited is read again after a
    rebalance (nothing of its state left the worker: it is processed again from the state it
    was first processed on, its outputs identical)."""

    async def main() -> None:
        shell, producer, released, _ = deferring_shell(tmp_path)
        deferred_batches(shell, 0)
        await shell.flush(keep_state=True)
        await asyncio.gather(*shell.batch.acking)
        shell.rebalanced()
        await shell.flush()
        await asyncio.gather(*shell.batch.acking)
        assert released.acked == [] and not shell.batch.deferred and len(shell.batch) == 0
        assert shell.store.at(0).get_device("dev-1") is None  # never written
        assert "app-devices-changelog" not in [topic for topic, _, _ in producer.batches]

    asyncio.run(main())
