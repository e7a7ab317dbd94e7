"""The pipeline's flush: input records are acked only once everything they caused is delivered."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson

from pipeline.core import Pipeline
from pipeline.runner import Processor
from streams.memory_broker import MemoryProducer
from streams.seam.table_writes import RocksStores
from streams.shell import PipelineShell
from supervisor import rules
from tables.store.faust_tables import FaustStore, GuardianTables
from tables.store.writes import PendingWrites
from tests.unit.test_table_writes import FakeStore, FakeTable, FakeTopic
from topics.envelope import Out
from topics.names import TopicNames
from topics.registry import load_registry


class Acked:
    """What the shell released to faust's consumer."""

    def __init__(self) -> None:
        self.acked: list[str] = []

    def __call__(self, messages: list[str]) -> None:
        self.acked.extend(messages)


def shell_over(
    tmp_path: Path, producer: MemoryProducer, acked: Acked | None = None, **options: Any
) -> tuple[PipelineShell, list[BaseException]]:
    tables = {
        name: FakeTable(FakeStore(tmp_path / name), FakeTopic(f"app-{name}-changelog"))
        for name in ("devices", "seen", "owners")
    }
    guardian = GuardianTables(
        devices=tables["devices"], seen=tables["seen"], owners=tables["owners"], access=RocksStores()
    )
    registry = load_registry()
    names = TopicNames("g.")
    lost: list[BaseException] = []

    async def on_lost(exc: BaseException) -> None:
        lost.append(exc)

    shell = PipelineShell(
        processor=Processor(registry, Pipeline(registry), rules.decide),
        names=names,
        tables=guardian,
        store=FaustStore(guardian, PendingWrites(guardian.batched(), guardian.access)),
        out_topics={k: getattr(names, k) for k in ("decisions", "dispatch", "timeline", "deadletter")},
        control_topic=None,
        **options,
    )
    shell.batch.delivery.producer = lambda: producer
    shell.batch.delivery.on_lost = on_lost
    shell.batch.delivery.ack = acked
    return shell, lost


async def handed_over(producer: MemoryProducer) -> None:
    """Let the shell's flush hand its batch to the producer (it does so behind the stream)."""
    for _ in range(100):
        if producer.futures:
            return
        await asyncio.sleep(0)
    raise AssertionError("the batch was never handed to the producer")


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


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def batch_of(shell: PipelineShell, clock: Clock, n: int, outs: list[Out] | None = None) -> None:
    """``n`` records handled into the shell's batch (the last one emitting ``outs``)."""
    for i in range(n):
        shell.batch.open()
        if outs and i == n - 1:
            shell.emit(outs)
        shell.batch.add(f"event-{len(shell.batch)}")


def test_a_batch_with_a_decision_is_flushed_soon_after_the_decision(tmp_path: Path) -> None:
    from streams import commit_batch as commit_batch_mod

    shell, _ = shell_over(tmp_path, MemoryProducer(hold=True))
    clock = Clock()
    shell.batch.clock = clock
    batch_of(shell, clock, 3)
    clock.now += commit_batch_mod.FLUSH_AFTER_S * 3  # state-only records handled a while ago
    assert not shell.batch.due()
    batch_of(shell, clock, 1, [Out("decisions", "dev-1", {"decision_id": "dec_1"})])
    assert not shell.batch.due()  # its clock starts at the decision, not at the batch's first record
    clock.now += commit_batch_mod.FLUSH_AFTER_S
    assert shell.batch.due()


def test_a_batch_of_state_changes_and_drops_grows_larger_and_longer(tmp_path: Path) -> None:
    from streams import commit_batch as commit_batch_mod

    shell, _ = shell_over(tmp_path, MemoryProducer(hold=True))
    clock = Clock()
    shell.batch.clock = clock
    drop = Out("timeline", "dev-1", {"stage": "drop", "drop_reason": "duplicate"})
    batch_of(
        shell, clock, commit_batch_mod.FLUSH_RECORDS, [drop, Out("deadletter", None, {"reason_code": "x"})]
    )
    clock.now += commit_batch_mod.FLUSH_AFTER_S
    assert not shell.batch.due()  # past the count and the time bound of a batch someone waits on
    clock.now += commit_batch_mod.FLUSH_STATE_AFTER_S
    assert shell.batch.due()
    shell.batch.unacked.clear()
    batch_of(shell, clock, commit_batch_mod.FLUSH_STATE_RECORDS - 1)
    assert not shell.batch.due()
    batch_of(shell, clock, 1)
    assert shell.batch.due()


def test_a_big_batch_of_state_changes_is_flushed_as_soon_as_it_holds_a_dispatch(tmp_path: Path) -> None:
    from streams import commit_batch as commit_batch_mod

    shell, _ = shell_over(tmp_path, MemoryProducer(hold=True))
    clock = Clock()
    shell.batch.clock = clock
    batch_of(shell, clock, commit_batch_mod.FLUSH_RECORDS)
    assert not shell.batch.due()
    batch_of(shell, clock, 1, [Out("dispatch", "dev-1", {"dispatch_id": "dsp_1"})])
    assert shell.batch.due()  # the dispatch does not wait behind a state-only batch's bounds


def test_which_outputs_someone_waits_on() -> None:
    from streams.commit_batch import waited_on

    assert waited_on(Out("decisions", "d", {"decision_id": "dec_1"}))
    assert waited_on(Out("dispatch", "d", {"dispatch_id": "dsp_1"}))
    for stage in ("goal", "observe", "decide", "act", "evidence", "end"):
        assert waited_on(Out("timeline", "d", {"stage": stage}))
    assert not waited_on(Out("timeline", "d", {"stage": "drop", "drop_reason": "stale"}))
    assert not waited_on(Out("deadletter", None, {"reason_code": "schema"}))


def test_a_flush_starts_the_next_batch_as_one_nobody_waits_on(tmp_path: Path) -> None:
    from streams import commit_batch as commit_batch_mod

    async def main() -> None:
        released = Acked()
        shell, _ = shell_over(tmp_path, MemoryProducer(hold=True), released)
        clock = Clock()
        shell.batch.clock = clock
        batch_of(shell, clock, 1, [Out("decisions", "dev-1", {"decision_id": "dec_1"})])
        await shell.flush()
        batch_of(shell, clock, 1)
        clock.now += commit_batch_mod.FLUSH_AFTER_S
        assert not shell.batch.due()
        assert released.acked == []  # the decision's batch waits for its delivery

    asyncio.run(main())


def ack_each(messages: list[Any]) -> None:
    """What faust's consumer is told: each message acked."""
    for message in messages:
        message.ack(None)


class Noted:
    """A message of a topic the pipeline does not read (handled as a no-op), acked by the shell."""

    def __init__(self, offset: int, acked: list[int]) -> None:
        self.topic, self.partition, self.offset, self.timestamp = "elsewhere", 0, offset, 1.0
        self._acked = acked

    def ack(self, consumer: Any) -> None:
        self._acked.append(self.offset)


def test_the_pipeline_flushes_once_it_has_caught_up_with_what_was_fetched(tmp_path: Path) -> None:
    """Records fetched while the pipeline works through the inbox join the same batch: it is
    flushed (and its records acked) once nothing more waits, not at every turn of the inbox."""
    from streams.pipeline_task import PipelineTask

    async def main() -> None:
        producer = MemoryProducer(hold=True)
        shell, _ = shell_over(tmp_path, producer)
        acked: list[int] = []
        flushes: list[int] = []
        task = PipelineTask(app=None, shell=shell)
        task.attach = lambda: None  # type: ignore[method-assign]
        shell.batch.delivery.ack = ack_each
        handle = shell.handle

        def fetched_meanwhile(message: Any) -> None:
            handle(message)
            if message.offset < 3:  # the fetcher hands over the next record while this one is handled
                shell.inbox.append(Noted(message.offset + 1, acked))
                shell.inbox.ready.set()

        flush = shell.flush

        async def counted_flush() -> None:
            flushes.append(len(shell.batch))
            await flush()

        shell.handle = fetched_meanwhile  # type: ignore[method-assign, assignment]
        shell.flush = counted_flush  # type: ignore[method-assign]
        await shell.inbox.receive(Noted(0, acked))
        loop = asyncio.ensure_future(task.loop())
        for _ in range(100):
            if acked:
                break
            await asyncio.sleep(0)
        loop.cancel()
        assert flushes == [4] and acked == [0, 1, 2, 3]


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


class Behind:
    """faust's consumer with records of partition 0's observations on the broker that the merge
    has not been given yet (high watermark 5, one record seen)."""

    def highwater(self, tp: Any) -> int:
        return 5


def test_behind_the_broker_a_batch_waits_for_the_input_on_its_way_until_it_is_due(tmp_path: Path) -> None:
    """Caught up with the inbox while more records wait on the broker (a backlog), the pipeline
    does not flush a batch that is not due: it waits for the next records, at most until due.
    Still behind, the due batch's outputs go out and its table writes wait, at most
    ``defer_state_s``: its records are acked with them."""
    from faust.types import TP

    from streams import commit_batch as commit_batch_mod
    from streams.pipeline_task import PipelineTask

    async def main() -> None:
        shell, _ = shell_over(tmp_path, MemoryProducer(hold=True))
        acked: list[int] = []
        flushes: list[int] = []
        clock = Clock()
        shell.batch.clock = clock
        shell.batch.delivery.ack = ack_each
        shell.positions.consumer, shell.positions.tp_factory = Behind(), TP
        shell.positions.next_offset[("observations", 0)] = 1
        task = PipelineTask(app=None, shell=shell)
        task.attach = lambda: None  # type: ignore[method-assign]
        flush = shell.flush

        async def counted_flush(keep_state: bool = False) -> None:
            flushes.append(len(shell.batch))
            await flush(keep_state)

        shell.flush = counted_flush  # type: ignore[method-assign]
        shell.batch.deferred.after_s = 0.05  # on the event loop's clock
        loop = asyncio.ensure_future(task.loop())
        await shell.inbox.receive(Noted(0, acked))
        for _ in range(20):
            await asyncio.sleep(0)
        assert flushes == [] and len(shell.batch) == 1  # waiting for what is on its way
        await shell.inbox.receive(Noted(1, acked))  # it comes
        for _ in range(20):
            await asyncio.sleep(0)
        assert flushes == [] and len(shell.batch) == 2
        clock.now += commit_batch_mod.FLUSH_STATE_AFTER_S - 0.01  # nothing more comes: due soon
        await shell.inbox.receive(Noted(2, acked))
        for _ in range(100):
            if flushes:
                break
            await asyncio.sleep(0.005)
        assert flushes == [3] and acked == []  # its outputs flushed, its table writes waiting
        assert len(shell.batch.deferred) == 3
        await asyncio.sleep(0.03)
        assert acked == []
        clock.now += 0.05  # nothing more comes: the table writes are due
        for _ in range(100):
            if acked:
                break
            await asyncio.sleep(0.005)
        loop.cancel()
        assert flushes == [3, 3] and acked == [0, 1, 2]
        assert not shell.batch.deferred

    asyncio.run(main())


def test_caught_up_with_the_broker_a_batch_is_flushed_at_once(tmp_path: Path) -> None:
    from faust.types import TP

    from streams.pipeline_task import PipelineTask

    async def main() -> None:
        shell, _ = shell_over(tmp_path, MemoryProducer(hold=True))
        acked: list[int] = []
        shell.batch.delivery.ack = ack_each
        shell.positions.consumer, shell.positions.tp_factory = Behind(), TP
        shell.positions.next_offset[("observations", 0)] = 5  # everything on the broker was seen
        task = PipelineTask(app=None, shell=shell)
        task.attach = lambda: None  # type: ignore[method-assign]
        loop = asyncio.ensure_future(task.loop())
        await shell.inbox.receive(Noted(0, acked))
        for _ in range(20):
            await asyncio.sleep(0)
        loop.cancel()
        assert acked == [0]


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


def test_a_sweep_of_a_partition_without_a_clock_yet_forgets_no_dedup_key(tmp_path: Path) -> None:
    """A sweep record is timestamped by the wall clock of the worker that sent it (possibly the
    partition's previous owner). The new owner, before it has processed a record of the partition,
    has no receive-time clock there: judged by the wall clock, every key of a fleet's older records
    would go, and their duplicates still to come would be taken for new."""
    from topics.envelope import Coords

    async def main() -> None:
        shell, _ = shell_over(tmp_path, MemoryProducer(hold=True))
        seen_at = 1_000_000
        shell.store.at(3).put_seen("dev-1", "ev-1", seen_at, Coords("observations", 3, 7))
        await shell.store.writes.flush(MemoryProducer())
        wall = seen_at + 3_600_000
        shell.control(b'{"op": "sweep"}', Coords("control", 3, 1), wall)
        assert shell.store.at(3).get_seen("dev-1", "ev-1") == (seen_at, "observations:3:7")
        # once the partition's records have moved its clock past the window, the key goes
        shell.quiet.stream_time[3] = seen_at + shell.processor.pipeline.dedup_window_ms + 1
        shell.control(b'{"op": "sweep"}', Coords("control", 3, 2), wall)
        assert shell.store.at(3).get_seen("dev-1", "ev-1") is None

    asyncio.run(main())


def test_a_sweep_goes_through_a_large_partition_a_slice_at_a_time_and_forgets_the_same_keys(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """A sweep of many keys does not hold the stream up: it deletes a slice's expired keys when its
    record is handled and the rest slice by slice (the pipeline goes on between them); in the end
    exactly the keys older than the window are gone, as in one go."""
    from streams import sweep as sweep_mod
    from topics.envelope import Coords

    monkeypatch.setattr(sweep_mod, "SWEEP_SLICE_SCAN", 3)

    async def main() -> None:
        shell, _ = shell_over(tmp_path, MemoryProducer(hold=True))
        window = shell.processor.pipeline.dedup_window_ms
        now = 10_000_000_000
        store = shell.store.at(3)
        old = [f"ev-{i:02d}" for i in range(0, 10, 2)]
        recent = [f"ev-{i:02d}" for i in range(1, 10, 2)]
        for i, event in enumerate(old):
            store.put_seen("dev-1", event, now - window - 1 - i, Coords("observations", 3, i))
        for i, event in enumerate(recent):
            store.put_seen("dev-1", event, now - 5, Coords("observations", 3, 100 + i))
        await shell.store.writes.flush(MemoryProducer())
        shell.quiet.stream_time[3] = now
        first = shell.sweep(3, now)
        assert first == 2  # ev-00 and ev-02 among the first three keys
        assert store.get_seen("dev-1", "ev-04") is not None  # not reached yet
        assert 3 in shell.sweeper.sweeping
        slices = 1
        while shell.sweeper.sweeping:
            shell.sweeper.continue_sweep()
            slices += 1
        assert slices == 4  # 10 keys, 3 at a time
        assert [e for e in old if store.get_seen("dev-1", e) is not None] == []
        assert [e for e in recent if store.get_seen("dev-1", e) is None] == []
        assert 3 not in shell.sweeper.sweep_cursor  # through to the end: the next sweep starts over

    asyncio.run(main())


async def expired_keys(shell: PipelineShell, n: int) -> tuple[Any, list[str], int]:
    """``n`` dedup keys of partition 3, all older than the window on the partition's clock (now):
    its store, the keys' event IDs and that clock."""
    from topics.envelope import Coords

    window = shell.processor.pipeline.dedup_window_ms
    now = 10_000_000_000
    store = shell.store.at(3)
    events = [f"ev-{i:02d}" for i in range(n)]
    for i, event in enumerate(events):
        store.put_seen("dev-1", event, now - window - 1, Coords("observations", 3, i))
    await shell.store.writes.flush(MemoryProducer())
    shell.quiet.stream_time[3] = now
    return store, events, now


def test_a_sweep_stops_at_its_bound_and_the_next_goes_on_and_a_rebalance_ends_it(
    tmp_path: Path, monkeypatch: Any
) -> None:
    from streams import sweep as sweep_mod

    monkeypatch.setattr(sweep_mod, "SWEEP_SLICE_SCAN", 2)
    monkeypatch.setattr(sweep_mod, "SWEEP_MAX_SCAN", 4)

    async def main() -> None:
        shell, _ = shell_over(tmp_path, MemoryProducer(hold=True))
        store, events, now = await expired_keys(shell, 6)
        shell.sweep(3, now)
        shell.sweeper.continue_sweep()
        assert not shell.sweeper.sweeping  # four keys scanned: this sweep's bound
        assert [e for e in events if store.get_seen("dev-1", e) is not None] == ["ev-04", "ev-05"]
        shell.sweep(3, now)  # the next sweep goes on from there
        assert [e for e in events if store.get_seen("dev-1", e) is not None] == []
        shell.sweep(3, now)
        assert 3 in shell.sweeper.sweeping
        shell.rebalanced()
        assert not shell.sweeper.sweeping and shell.sweeper.continue_sweep() == 0

    asyncio.run(main())


def test_an_idle_pipeline_goes_on_with_a_sweep_under_way_without_waiting_for_input(
    tmp_path: Path, monkeypatch: Any
) -> None:
    from streams import sweep as sweep_mod
    from streams.pipeline_task import PipelineTask

    monkeypatch.setattr(sweep_mod, "SWEEP_SLICE_SCAN", 2)

    async def main() -> None:
        shell, _ = shell_over(tmp_path, MemoryProducer(hold=True))
        store, events, now = await expired_keys(shell, 7)
        shell.sweep(3, now)  # the sweep record: its first slice
        task = PipelineTask(None, shell)
        task.attach = lambda: None  # type: ignore[method-assign]
        running = asyncio.ensure_future(task.loop())
        for _ in range(100):
            if not shell.sweeper.sweeping:
                break
            await asyncio.sleep(0)
        assert not shell.sweeper.sweeping and not running.done()  # through, and waiting for input now
        assert [e for e in events if store.get_seen("dev-1", e) is not None] == []
        running.cancel()

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
