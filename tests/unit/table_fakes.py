"""Fakes of faust's tables (real RocksDB databases) and aiokafka's producer, and the store over them.

Real RocksDB databases (rocksdict) stand in for faust's per-partition stores; a recording producer
stands in for aiokafka's (the live path is covered on a real broker in tests/integration)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from rocksdict import Options, Rdict

from streams.seam.table_writes import RocksStores
from tables.state import ExperienceState
from tables.store.faust_tables import FaustStore, GuardianTables
from tables.store.writes import PendingWrites


class FakeStore:
    """What PendingWrites and FaustStore use of faust's RocksDB store: per-partition databases."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._dbs: dict[int, Rdict] = {}
        self.persisted: dict[tuple[str, int], int] = {}

    def _db_for_partition(self, partition: int) -> Rdict:
        if partition not in self._dbs:
            self._dbs[partition] = Rdict(str(self.root / f"p{partition}"), Options(raw_mode=True))
        return self._dbs[partition]

    def set_persisted_offset(self, tp: Any, offset: int) -> None:
        self.persisted[(tp.topic, tp.partition)] = offset

    def close(self) -> None:
        for db in self._dbs.values():
            db.close()


@dataclass
class FakeTopic:
    name: str

    def get_topic_name(self) -> str:
        return self.name


@dataclass
class FakeTable:
    data: FakeStore
    changelog_topic: FakeTopic

    def __setitem__(self, key: bytes, value: bytes) -> None:
        # faust's own write path (the global owners index): the current event's partition
        self.data._db_for_partition(0)[key] = value


@dataclass
class Meta:
    offset: int


class Builder:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.records: list[tuple[bytes, bytes | None]] = []

    closed = False

    def close(self) -> None:
        self.closed = True

    def append(self, *, timestamp: int | None, key: bytes, value: bytes | None) -> object | None:
        assert not self.closed
        if len(self.records) >= self.capacity:
            return None
        self.records.append((key, value))
        return object()


@dataclass
class RecordingProducer:
    """Records every batch; offsets per topic-partition count up from 0."""

    capacity: int = 1000
    partitions: int = 4
    batches: list[tuple[str, int, list[tuple[bytes, bytes | None]]]] = field(default_factory=list)
    next_offset: dict[tuple[str, int], int] = field(default_factory=dict)
    fail: bool = False

    def create_batch(self) -> Builder:
        return Builder(self.capacity)

    async def send_batch(self, builder: Builder, topic: str, *, partition: int) -> asyncio.Future[Meta]:
        fut: asyncio.Future[Meta] = asyncio.get_running_loop().create_future()
        assert builder.closed, "a batch is handed over complete"
        self.batches.append((topic, partition, list(builder.records)))
        base = self.next_offset.get((topic, partition), 0)
        self.next_offset[(topic, partition)] = base + len(builder.records)
        if self.fail:
            fut.set_exception(RuntimeError("broker gone"))
        else:
            fut.set_result(Meta(base))
        return fut

    async def partitions_for(self, topic: str) -> set[int]:
        return set(range(self.partitions))


@pytest.fixture
def tables(tmp_path: Path) -> Any:
    made = {
        name: FakeTable(FakeStore(tmp_path / name), FakeTopic(f"app-{name}-changelog"))
        for name in ("devices", "seen", "owners")
    }
    yield made
    for table in made.values():
        table.data.close()


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def plan_dict(experience_id: str) -> dict[str, Any]:
    return {"experience_id": experience_id, "steps": [{"step_id": "patrol"}], "goal_summary": "x" * 500}


def store_over(tables: Any) -> FaustStore:
    guardian = GuardianTables(
        devices=tables["devices"], seen=tables["seen"], owners=tables["owners"], access=RocksStores()
    )
    return FaustStore(guardian, PendingWrites(guardian.batched(), guardian.access))


def experience(device_id: str, experience_id: str) -> ExperienceState:
    return ExperienceState(
        experience_id=experience_id,
        device_id=device_id,
        workflow_id="wf",
        plan=plan_dict(experience_id),
    )
