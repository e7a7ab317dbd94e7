"""A stream batch's table writes and output records, flushed together below faust's per-key path.

Writing a faust table key by key costs, per write, a RocksDB put and a changelog message that goes
through faust's producer buffer and aiokafka's per-message send: at fleet rates that is most of a
worker's time. :class:`PendingWrites` collects a batch's writes instead (the last value of a key
wins) and :meth:`PendingWrites.flush` lands them at once: one RocksDB write batch per partition
database, then one Kafka record batch per changelog partition and per output topic-partition.

The tables stay faust tables: same changelog topics and partitions, same raw keys and values, so
faust's recovery rebuilds them as before; a flushed changelog batch advances the partition's
persisted offset as faust's own write path does (at-least-once: as soon as it is acknowledged).

Reads see the batch: :meth:`PendingWrites.get` answers from the pending writes first, then from the
partition's database (RocksDB already holds every flushed batch, written before its changelog is
sent).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from aiokafka.partitioner import murmur2
from rocksdict import WriteBatch


class StoreAccess(Protocol):
    """The per-partition RocksDB databases of a faust table's store (faust keeps them below its
    public surface: ``streams.faust_seam.RocksStores`` implements this)."""

    def dbs(self, table: Any) -> Mapping[int, Any]:
        """partition -> open database, for the partitions this worker holds."""
        ...

    def db(self, table: Any, partition: int) -> Any:
        """The database of one partition (opened if needed)."""
        ...


class PendingWrites:
    """Table writes (``(table, partition) -> {key: value or None}``) and output records of a batch."""

    def __init__(self, tables: dict[str, Any], access: StoreAccess) -> None:
        #: name -> faust table (its ``data`` is faust's RocksDB store, ``changelog_topic`` its topic)
        self.tables = tables
        #: the stores' partition databases (``streams.faust_seam.RocksStores``)
        self.access = access
        self._puts: dict[tuple[str, int], dict[bytes, bytes | None]] = {}
        self._outs: list[tuple[str, bytes | None, bytes]] = []
        self._partitions: dict[str, list[int]] = {}
        self._lock = asyncio.Lock()

    def __len__(self) -> int:
        return sum(len(kv) for kv in self._puts.values()) + len(self._outs)

    def put(self, table: str, partition: int, key: bytes, value: bytes | None) -> None:
        """Set (or with None, delete) ``key`` of ``table`` in ``partition``."""
        pending = self._puts.get((table, partition))
        if pending is None:
            pending = self._puts[(table, partition)] = {}
        pending[key] = value

    def get(self, table: str, partition: int, key: bytes) -> bytes | None:
        pending = self._puts.get((table, partition))
        if pending is not None and key in pending:
            return pending[key]
        value = self.db(table, partition).get(key)
        return None if value is None else bytes(value)

    def pending(self, table: str, key: bytes) -> tuple[bool, bytes | None]:
        """(True, value) when a write of ``key`` of ``table`` waits in any partition."""
        for (name, _), kv in self._puts.items():
            if name == table and key in kv:
                return True, kv[key]
        return False, None

    def find(self, table: str, key: bytes) -> bytes | None:
        """``key`` in whichever partition holds it (callers outside a record do not know it)."""
        waiting, value = self.pending(table, key)
        if waiting:
            return value
        for db in list(self.access.dbs(self.tables[table]).values()):
            value = db.get(key)
            if value is not None:
                return bytes(value)
        return None

    def db(self, table: str, partition: int) -> Any:
        return self.access.db(self.tables[table], partition)

    def discard(self) -> None:
        """Forget everything not flushed yet."""
        self._puts, self._outs = {}, []

    def send(self, topic: str, key: bytes | None, value: bytes) -> None:
        """An output record, partitioned by key like Kafka's default partitioner (a null key:
        partition 0, so a re-sent dead letter lands where its first copy did)."""
        self._outs.append((topic, key, value))

    async def flush(self, producer: Any) -> list[asyncio.Future[Any]]:
        """Write the pending table values to RocksDB and hand every record to ``producer`` (an
        ``AIOKafkaProducer``) in batches; returns the batches' delivery futures."""
        async with self._lock:
            puts, outs = self._puts, self._outs
            self._puts, self._outs = {}, []
            for (table, partition), kv in puts.items():
                batch = WriteBatch(raw_mode=True)
                for key, value in kv.items():
                    if value is None:
                        batch.delete(key)
                    else:
                        batch.put(key, value)
                self.db(table, partition).write(batch)
            futures: list[asyncio.Future[Any]] = []
            for (table, partition), kv in puts.items():
                collection = self.tables[table]
                topic = collection.changelog_topic.get_topic_name()
                persist = _persister(collection.data, topic, partition)
                futures += await _send(producer, topic, partition, list(kv.items()), persist)
            by_tp: dict[tuple[str, int], list[tuple[bytes | None, bytes | None]]] = {}
            for topic, out_key, value in outs:
                partitions = self._partitions.get(topic)
                if partitions is None:
                    partitions = self._partitions[topic] = sorted(await producer.partitions_for(topic))
                hashed = murmur2(out_key) & 0x7FFFFFFF if out_key is not None else 0
                partition = partitions[hashed % len(partitions)]
                by_tp.setdefault((topic, partition), []).append((out_key, value))
            for (topic, partition), records in by_tp.items():
                futures += await _send(producer, topic, partition, records, None)
            return futures


def _persister(store: Any, topic: str, partition: int) -> Callable[[int], None]:
    from faust.types import TP

    tp = TP(topic, partition)

    def persist(last_offset: int) -> None:
        store.set_persisted_offset(tp, last_offset)

    return persist


async def _send(
    producer: Any,
    topic: str,
    partition: int,
    records: list[tuple[bytes | None, bytes | None]],
    on_delivered: Callable[[int], None] | None,
) -> list[asyncio.Future[Any]]:
    """``records`` to one topic-partition in as few batches as fit the producer's batch size."""
    futures: list[asyncio.Future[Any]] = []
    i = 0
    while i < len(records):
        builder = producer.create_batch()
        start = i
        while i < len(records):
            key, value = records[i]
            if builder.append(timestamp=None, key=key, value=value) is None:
                break
            i += 1
        if i == start:
            raise ValueError(f"a record for {topic} is larger than the producer's batch size")
        builder.close()  # complete: sent at once, without waiting out the producer's linger
        fut = await producer.send_batch(builder, topic, partition=partition)
        if on_delivered is not None:
            count = i - start
            fut.add_done_callback(_on_done(on_delivered, count))
        futures.append(fut)
    return futures


def _on_done(on_delivered: Callable[[int], None], count: int) -> Callable[[asyncio.Future[Any]], None]:
    def done(fut: asyncio.Future[Any]) -> None:
        if not fut.cancelled() and fut.exception() is None:
            on_delivered(fut.result().offset + count - 1)

    return done
