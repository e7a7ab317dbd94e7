"""Batched table writes (``tables.store.writes``): read before the flush, sent as changelog batches."""

# ruff: noqa: F811  (the pytest fixture imported from tests.unit.table_fakes is a test argument)

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiokafka.partitioner import DefaultPartitioner
from aiokafka.producer.message_accumulator import BatchBuilder
from aiokafka.record.default_records import DefaultRecordBatch
from aiokafka.record.memory_records import MemoryRecords

from streams.seam.table_writes import RocksStores, changelog_batches
from tables.store.writes import PendingWrites
from tests.unit.table_fakes import (
    Builder,
    Meta,
    RecordingProducer,
    run,
    tables,  # noqa: F401  (the fixture)
)


@dataclass
class WireProducer:
    """Keeps each batch as the bytes aiokafka would put on the wire (its own builders)."""

    partitions: int = 4
    wire: list[tuple[str, int, bytes]] = field(default_factory=list)

    def create_batch(self) -> BatchBuilder:
        return BatchBuilder(256 * 1024, 0, is_transactional=False)

    async def send_batch(self, builder: BatchBuilder, topic: str, *, partition: int) -> asyncio.Future[Meta]:
        self.wire.append((topic, partition, bytes(builder._build())))
        fut: asyncio.Future[Meta] = asyncio.get_running_loop().create_future()
        fut.set_result(Meta(0))
        return fut

    async def partitions_for(self, topic: str) -> set[int]:
        return set(range(self.partitions))


def decoded(buffer: bytes) -> tuple[int, list[tuple[bytes | None, bytes | None]]]:
    """(compression codec, [(key, value)]) of one record batch on the wire."""
    batch = MemoryRecords(buffer).next_batch()
    assert batch is not None
    return batch.compression_type, [(r.key, r.value) for r in batch]


def test_reads_see_pending_writes_and_the_last_value_of_a_key_wins(tables: Any) -> None:
    writes = PendingWrites({"devices": tables["devices"], "seen": tables["seen"]}, RocksStores())
    writes.put("seen", 2, b"k", b"first")
    writes.put("seen", 2, b"k", b"second")
    assert writes.get("seen", 2, b"k") == b"second"
    assert writes.get("seen", 1, b"k") is None  # another partition
    assert writes.find("seen", b"k") == b"second"
    producer = RecordingProducer()
    futures = run(writes.flush(producer))
    assert len(futures) == 1
    assert producer.batches == [("app-seen-changelog", 2, [(b"k", b"second")])]
    assert writes.get("seen", 2, b"k") == b"second"  # now from RocksDB
    assert bytes(tables["seen"].data._db_for_partition(2)[b"k"]) == b"second"
    assert len(writes) == 0


def test_the_changelog_goes_out_zstd_compressed_and_the_outputs_uncompressed(tables: Any) -> None:
    writes = PendingWrites(
        {"devices": tables["devices"], "seen": tables["seen"]}, RocksStores(), changelog_batches(256 * 1024)
    )
    entries = [(f"dev-{i:04d}".encode(), orjson.dumps({"d": {"device_id": f"dev-{i:04d}", "seq": i}}))
               for i in range(300)]  # fmt: skip
    for key, value in entries:
        writes.put("devices", 1, key, value)
    writes.put("devices", 1, b"gone", None)
    writes.send("guardian.timeline", b"dev-0001", b'{"stage": "goal"}')
    producer = WireProducer()
    run(writes.flush(producer))
    by_topic = {topic: (partition, buffer) for topic, partition, buffer in producer.wire}
    partition, changelog = by_topic["app-devices-changelog"]
    codec, records = decoded(changelog)
    assert partition == 1 and codec == DefaultRecordBatch.CODEC_ZSTD
    assert records == [*entries, (b"gone", None)]  # faust's recovery reads them back as written
    assert len(changelog) * 5 < sum(len(k) + len(v) for k, v in entries)
    codec, records = decoded(by_topic["guardian.timeline"][1])
    assert codec == 0 and records == [(b"dev-0001", b'{"stage": "goal"}')]


def test_a_delete_is_a_tombstone_in_the_changelog_and_gone_from_rocksdb(tables: Any) -> None:
    writes = PendingWrites({"seen": tables["seen"]}, RocksStores())
    writes.put("seen", 0, b"old", b"1")
    producer = RecordingProducer()
    run(writes.flush(producer))
    writes.put("seen", 0, b"old", None)
    assert writes.get("seen", 0, b"old") is None
    run(writes.flush(producer))
    assert producer.batches[-1] == ("app-seen-changelog", 0, [(b"old", None)])
    assert tables["seen"].data._db_for_partition(0).get(b"old") is None


def test_a_delivered_changelog_batch_advances_the_persisted_offset(tables: Any) -> None:
    writes = PendingWrites({"devices": tables["devices"]}, RocksStores())
    producer = RecordingProducer()

    async def twice() -> None:
        for round_ in range(2):
            for i in range(3):
                writes.put("devices", 1, f"d{round_}{i}".encode(), b"v")
            await asyncio.gather(*await writes.flush(producer))

    run(twice())
    # offsets 0..2 then 3..5: the last offset of the last batch
    assert tables["devices"].data.persisted == {("app-devices-changelog", 1): 5}


def test_a_failed_batch_does_not_advance_the_persisted_offset(tables: Any) -> None:
    writes = PendingWrites({"devices": tables["devices"]}, RocksStores())
    producer = RecordingProducer(fail=True)
    writes.put("devices", 0, b"d", b"v")

    async def flush() -> list[BaseException | Meta]:
        return list(await asyncio.gather(*await writes.flush(producer), return_exceptions=True))

    (outcome,) = run(flush())
    assert isinstance(outcome, RuntimeError)
    assert tables["devices"].data.persisted == {}


def test_large_batches_are_split_to_the_producers_batch_size(tables: Any) -> None:
    writes = PendingWrites({"seen": tables["seen"]}, RocksStores())
    for i in range(7):
        writes.put("seen", 3, f"k{i}".encode(), b"v")
    producer = RecordingProducer(capacity=3)
    futures = run(writes.flush(producer))
    assert [len(records) for _, _, records in producer.batches] == [3, 3, 1]
    assert len(futures) == 3


def test_outputs_are_partitioned_like_kafkas_default_partitioner(tables: Any) -> None:
    writes = PendingWrites({"seen": tables["seen"]}, RocksStores())
    keys = [f"airbot-{i:04d}".encode() for i in range(40)]
    for key in keys:
        writes.send("g.timeline", key, b"{}")
    producer = RecordingProducer(partitions=4)
    run(writes.flush(producer))
    partitioner = DefaultPartitioner()
    expected: dict[int, list[bytes]] = {}
    for key in keys:
        expected.setdefault(partitioner(key, [0, 1, 2, 3], [0, 1, 2, 3]), []).append(key)
    got = {partition: [k for k, _ in records] for topic, partition, records in producer.batches}
    assert got == expected
    assert len(got) > 1


def test_discard_forgets_what_was_not_flushed(tables: Any) -> None:
    writes = PendingWrites({"seen": tables["seen"]}, RocksStores())
    writes.put("seen", 0, b"k", b"v")
    writes.send("g.timeline", b"k", b"{}")
    writes.discard()
    assert len(writes) == 0
    assert writes.get("seen", 0, b"k") is None


class SlowProducer(RecordingProducer):
    """Takes a batch only once the test lets it (as aiokafka waits for a topic-partition's previous
    batch to go out in a request)."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()

    async def send_batch(self, builder: Builder, topic: str, *, partition: int) -> asyncio.Future[Meta]:
        await self.gate.wait()
        return await super().send_batch(builder, topic, partition=partition)


def test_flushing_behind_does_not_wait_for_the_producer_and_keeps_the_batches_order(tables: Any) -> None:
    writes = PendingWrites({"seen": tables["seen"]}, RocksStores())

    async def main() -> SlowProducer:
        producer = SlowProducer()
        delivered = []
        for i in range(3):
            writes.put("seen", 0, b"k", f"v{i}".encode())
            delivered += await writes.flush_behind(producer)
            # in RocksDB at once (reads see it), though the producer has taken nothing yet
            assert bytes(tables["seen"].data._db_for_partition(0)[b"k"]) == f"v{i}".encode()
        assert producer.batches == [] and not any(d.done() for d in delivered)
        producer.gate.set()
        await asyncio.gather(*delivered)
        return producer

    producer = run(main())
    assert [records for _, _, records in producer.batches] == [
        [(b"k", b"v0")],
        [(b"k", b"v1")],
        [(b"k", b"v2")],
    ]
    assert tables["seen"].data.persisted == {("app-seen-changelog", 0): 2}
