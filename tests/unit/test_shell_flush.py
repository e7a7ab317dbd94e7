"""The stream's flush: input records are acked only once everything they caused is delivered."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from pipeline.core import Pipeline
from pipeline.runner import Processor
from streams.agents import PipelineShell
from supervisor import rules
from tables.faust_tables import FaustStore, GuardianTables
from tables.writes import PendingWrites
from tests.unit.test_table_writes import FakeStore, FakeTable, FakeTopic, RecordingProducer
from topics.envelope import Out
from topics.names import TopicNames
from topics.registry import load_registry


class FakeStream:
    def __init__(self) -> None:
        self.acked: list[str] = []

    async def ack(self, event: str) -> bool:
        self.acked.append(event)
        return True


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


def shell_over(tmp_path: Path, producer: RecordingProducer) -> tuple[PipelineShell, list[BaseException]]:
    tables = {
        name: FakeTable(FakeStore(tmp_path / name), FakeTopic(f"app-{name}-changelog"))
        for name in ("devices", "seen", "owners")
    }
    guardian = GuardianTables(devices=tables["devices"], seen=tables["seen"], owners=tables["owners"])
    registry = load_registry()
    names = TopicNames("g.")
    lost: list[BaseException] = []

    async def on_lost(exc: BaseException) -> None:
        lost.append(exc)

    shell = PipelineShell(
        processor=Processor(registry, Pipeline(registry), rules.decide),
        names=names,
        tables=guardian,
        store=FaustStore(guardian, PendingWrites(guardian.batched())),
        out_topics={k: getattr(names, k) for k in ("decisions", "dispatch", "timeline", "deadletter")},
        control_topic=None,
        producer=lambda: producer,
        on_lost=on_lost,
    )
    return shell, lost


def test_events_are_acked_only_after_their_outputs_are_delivered(tmp_path: Path) -> None:
    async def main() -> None:
        producer = HeldProducer()
        shell, lost = shell_over(tmp_path, producer)
        stream = FakeStream()
        shell.emit([Out("timeline", "dev-1", {"seq": 1})])
        shell.unacked = ["event-1", "event-2"]
        await shell.flush(stream)
        assert producer.batches and stream.acked == []  # handed over, not yet delivered
        for fut in producer.futures:
            fut.set_result(type("Meta", (), {"offset": 0})())
        await asyncio.gather(*shell.acking)
        assert stream.acked == ["event-1", "event-2"]
        assert lost == []

    asyncio.run(main())


def test_a_failed_delivery_acks_nothing_and_stops_the_worker(tmp_path: Path) -> None:
    from aiokafka.errors import KafkaTimeoutError

    async def main() -> None:
        producer = HeldProducer()
        shell, lost = shell_over(tmp_path, producer)
        stream = FakeStream()
        shell.emit([Out("decisions", "dev-1", {"decision_id": "dec_1"})])
        shell.unacked = ["event-1"]
        await shell.flush(stream)
        producer.futures[0].set_exception(KafkaTimeoutError())
        await asyncio.gather(*shell.acking)
        assert stream.acked == []
        assert len(lost) == 1 and isinstance(lost[0], KafkaTimeoutError)

    asyncio.run(main())


def test_a_batch_with_nothing_to_send_is_acked_at_once(tmp_path: Path) -> None:
    async def main() -> None:
        shell, _ = shell_over(tmp_path, HeldProducer())
        stream = FakeStream()
        shell.unacked = ["event-1"]
        await shell.flush(stream)
        assert stream.acked == ["event-1"]

    asyncio.run(main())


def test_a_rebalance_forgets_what_was_not_flushed(tmp_path: Path) -> None:
    shell, _ = shell_over(tmp_path, HeldProducer())
    shell.emit([Out("timeline", "dev-1", {"seq": 1})])
    shell.unacked = ["event-1"]
    shell.drop_unflushed()
    assert shell.unacked == [] and len(shell.store.writes) == 0
