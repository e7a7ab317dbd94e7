"""A pipeline shell over fake tables and a memory producer, what it acks, its clock, and messages."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from pipeline.core import Pipeline
from pipeline.runner import Processor
from streams.memory_broker import MemoryProducer
from streams.seam.table_writes import RocksStores
from streams.shell import PipelineShell
from supervisor import rules
from tables.store.faust_tables import FaustStore, GuardianTables
from tables.store.writes import PendingWrites
from tests.unit.table_fakes import FakeStore, FakeTable, FakeTopic
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


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


class Message:
    key: bytes | None = None

    def __init__(self, topic: str, partition: int, offset: int, ts_ms: int, key: bytes | None = None) -> None:
        self.topic, self.partition, self.offset, self.timestamp = topic, partition, offset, ts_ms / 1000
        if key is not None:
            self.key = key

    def __repr__(self) -> str:
        return f"{self.topic}@{self.offset}"
