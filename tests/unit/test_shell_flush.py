"""The pipeline's flush: input records are acked only once everything they caused is delivered."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from pipeline.core import Pipeline
from pipeline.runner import Processor
from streams.agents import PipelineShell
from streams.faust_seam import RocksStores
from supervisor import rules
from tables.store.faust_tables import FaustStore, GuardianTables
from tables.store.writes import PendingWrites
from tests.unit.test_table_writes import FakeStore, FakeTable, FakeTopic, RecordingProducer
from topics.envelope import Out
from topics.names import TopicNames
from topics.registry import load_registry


class Acked:
    """What the shell released to faust's consumer."""

    def __init__(self) -> None:
        self.acked: list[str] = []

    def __call__(self, message: str) -> None:
        self.acked.append(message)


class HeldProducer(RecordingProducer):
    """Delivery futures stay open until the test settles them."""

    def __init__(self) -> None:
        super().__init__()
        self.futures: list[asyncio.Future[Any]] = []

    async def send_batch(self, builder: Any, topic: str, *, partition: int) -> asyncio.Future[Any]:
        await super().send_batch(builder, topic, partition=partition)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.futures.append(fut)
        return fut


def shell_over(
    tmp_path: Path, producer: RecordingProducer, acked: Acked | None = None
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
    )
    shell.batch.producer = lambda: producer
    shell.batch.on_lost = on_lost
    shell.batch.ack = acked
    return shell, lost


async def handed_over(producer: HeldProducer) -> None:
    """Let the shell's flush hand its batch to the producer (it does so behind the stream)."""
    for _ in range(100):
        if producer.futures:
            return
        await asyncio.sleep(0)
    raise AssertionError("the batch was never handed to the producer")


def test_events_are_acked_only_after_their_outputs_are_delivered(tmp_path: Path) -> None:
    async def main() -> None:
        producer = HeldProducer()
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
        producer = HeldProducer()
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


def test_a_batch_with_nothing_to_send_is_acked_at_once(tmp_path: Path) -> None:
    async def main() -> None:
        released = Acked()
        shell, _ = shell_over(tmp_path, HeldProducer(), released)
        shell.batch.unacked = ["event-1"]
        await shell.flush()
        assert released.acked == ["event-1"]

    asyncio.run(main())


def test_a_rebalance_forgets_what_was_not_flushed(tmp_path: Path) -> None:
    async def main() -> None:
        shell, _ = shell_over(tmp_path, HeldProducer())
        await shell.receive("message-2")
        shell.emit([Out("timeline", "dev-1", {"seq": 1})])
        shell.batch.unacked = ["event-1"]
        shell.drop_unflushed()
        assert shell.batch.unacked == [] and len(shell.store.writes) == 0
        assert shell.inbox == [] and not shell.inbox_ready.is_set()

    asyncio.run(main())


def test_a_full_inbox_holds_the_fetcher_until_the_pipeline_takes_it(tmp_path: Path) -> None:
    from streams import agents

    async def main() -> None:
        shell, _ = shell_over(tmp_path, HeldProducer())
        for i in range(agents.INBOX_MAX - 1):
            await shell.receive(f"m{i}")
        last = asyncio.ensure_future(shell.receive("last"))
        await asyncio.sleep(0)
        assert not last.done() and shell.inbox_ready.is_set()
        batch = shell.take_inbox()
        await asyncio.wait_for(last, 1)
        assert len(batch) == agents.INBOX_MAX and batch[-1] == "last"

    asyncio.run(main())
