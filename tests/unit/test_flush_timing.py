"""When the pipeline flushes a batch: soon after a decision, later for state only, once caught up."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from streams.memory_broker import MemoryProducer
from streams.shell import PipelineShell
from tests.unit.shell_fakes import Acked, Clock, shell_over
from topics.envelope import Out


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
                shell.inbox.messages.append(Noted(message.offset + 1, acked))
                shell.inbox.ready.set()

        flush = shell.flush

        async def counted_flush(keep_state: bool = False) -> None:
            flushes.append(len(shell.batch))
            await flush(keep_state)

        shell.handle = fetched_meanwhile  # type: ignore[method-assign, assignment]
        shell.flush = counted_flush  # type: ignore[method-assign]
        await shell.inbox.receive(Noted(0, acked))
        loop = asyncio.ensure_future(task.loop())
        for _ in range(100):
            if acked:
                break
            await asyncio.sleep(0)
        if loop.done():
            loop.result()
        loop.cancel()
        assert flushes == [4] and acked == [0, 1, 2, 3]

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

    asyncio.run(main())
