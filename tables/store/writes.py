"""A stream batch's table writes and output records, flushed together below faust's per-key path.

Writing a faust table key by key costs, per write, a RocksDB put and a changelog message that goes
through faust's producer buffer and aiokafka's per-message send: at fleet rates that is most of a
worker's time. :class:`PendingWrites` collects a batch's writes instead (the last value of a key
wins) and :meth:`PendingWrites.flush` lands them at once: one RocksDB write batch per partition
database, then one Kafka record batch per changelog partition and per output topic-partition.
The changelog batches may be built by a builder of their own (``changelog_batch``: the worker's
compresses them), the output batches always by the producer's.

The tables stay faust tables: same changelog topics and partitions, same raw keys and values, so
faust's recovery rebuilds them as before; a flushed changelog batch advances the partition's
persisted offset as faust's own write path does (at-least-once: as soon as it is acknowledged).

A value may be given unencoded (anything with ``to_json()``, e.g. a device's entry): it is
encoded once, when the batch is flushed (or read back), however many records of the batch changed
it, and what is encoded is its state at that moment (the last write of the key wins anyway).

Reads see the batch: :meth:`PendingWrites.get` answers from the pending writes first, then from the
partition's database (RocksDB already holds every flushed batch, written before its changelog is
sent).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from aiokafka.partitioner import murmur2
from rocksdict import WriteBatch

#: batches landed but not handed to the producer yet before ``flush_behind`` waits
MAX_BEHIND = 4


class StoreAccess(Protocol):
    """The per-partition RocksDB databases of a faust table's store (faust keeps them below its
    public surface: ``streams.seam.table_writes.RocksStores`` implements this)."""

    def dbs(self, table: Any) -> Mapping[int, Any]:
        """partition -> open database, for the partitions this worker holds."""
        ...

    def db(self, table: Any, partition: int) -> Any:
        """The database of one partition (opened if needed)."""
        ...


class Encodable(Protocol):
    """A table value encoded only when its batch is flushed."""

    def to_json(self) -> bytes: ...


#: a pending value: bytes, None (a delete), or a value to encode at the flush
Pending = bytes | Encodable | None


def encoded(value: Pending) -> bytes | None:
    return value if value is None or isinstance(value, bytes) else value.to_json()


class PendingWrites:
    """Table writes (``(table, partition) -> {key: value or None}``) and output records of a batch."""

    def __init__(
        self,
        tables: dict[str, Any],
        access: StoreAccess,
        changelog_batch: Callable[[], Any] | None = None,
    ) -> None:
        #: name -> faust table (its ``data`` is faust's RocksDB store, ``changelog_topic`` its topic)
        self.tables = tables
        #: the stores' partition databases (``streams.seam.table_writes.RocksStores``)
        self.access = access
        #: makes an empty record batch builder for changelog records (None: the producer's own,
        #: ``create_batch``); only faust's recovery reads the changelogs, so the worker's
        #: may be compressed where the output topics are not
        self.changelog_batch = changelog_batch
        self._puts: dict[tuple[str, int], dict[bytes, Pending]] = {}
        self._outs: list[tuple[str, bytes | None, bytes]] = []
        self._partitions: dict[str, list[int]] = {}
        #: batches landed and not handed to the producer yet, oldest first
        self._handing: list[asyncio.Task[list[asyncio.Future[Any]]]] = []
        #: one future per batch landed and not delivered yet (done once Kafka has all of it)
        self._delivering: set[asyncio.Future[None]] = set()
        #: table -> the rank of a write in its changelog (lower first; equal ranks keep the order
        #: of the keys' first writes): a partition's changelog records go out in several producer
        #: batches when they do not fit one, and a worker killed between two of them leaves the
        #: changelog with only the first ones, so a value must never go out before what it refers
        #: to (``FaustStore`` sets it for its devices table: plans before entries)
        self.order: dict[str, Callable[[bytes, Pending], int]] = {}

    def __len__(self) -> int:
        return sum(len(kv) for kv in self._puts.values()) + len(self._outs)

    def put(self, table: str, partition: int, key: bytes, value: Pending) -> None:
        """Set (or with None, delete) ``key`` of ``table`` in ``partition`` (an :class:`Encodable`
        value is encoded at the flush)."""
        pending = self._puts.get((table, partition))
        if pending is None:
            pending = self._puts[(table, partition)] = {}
        pending[key] = value

    def get(self, table: str, partition: int, key: bytes) -> bytes | None:
        pending = self._puts.get((table, partition))
        if pending is not None and key in pending:
            return encoded(pending[key])
        value = self.db(table, partition).get(key)
        return None if value is None else bytes(value)

    def pending(self, table: str, key: bytes) -> tuple[bool, bytes | None]:
        """(True, value) when a write of ``key`` of ``table`` waits in any partition."""
        for (name, _), kv in self._puts.items():
            if name == table and key in kv:
                return True, encoded(kv[key])
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

    def _land(self, tables: bool = True) -> _Landed | None:
        """Take the pending writes: into RocksDB now (reads see them there), records encoded.
        Without ``tables``, only the output records: the table writes keep waiting (a key written
        again meanwhile is then written once)."""
        puts, outs = self._puts if tables else {}, self._outs
        if tables:
            self._puts = {}
        self._outs = []
        if not puts and not outs:
            return None
        changelogs: list[tuple[str, int, list[tuple[bytes | None, bytes | None]]]] = []
        for (table, partition), kv in puts.items():
            batch = WriteBatch(raw_mode=True)
            items: list[tuple[bytes | None, bytes | None]] = []
            rank = self.order.get(table)
            writes = kv.items() if rank is None else sorted(kv.items(), key=lambda kw: rank(*kw))
            for key, pending in writes:
                value = encoded(pending)
                if value is None:
                    batch.delete(key)
                else:
                    batch.put(key, value)
                items.append((key, value))
            self.db(table, partition).write(batch)
            changelogs.append((table, partition, items))
        return _Landed(changelogs, outs)

    def _queue(self, producer: Any, tables: bool = True) -> asyncio.Task[list[asyncio.Future[Any]]] | None:
        """Land the batch and hand it to ``producer`` behind the batches landed before it."""
        landed = self._land(tables)
        if landed is None:
            return None
        previous = self._handing[-1] if self._handing else None
        task = asyncio.ensure_future(self._hand(landed, producer, previous))
        self._handing.append(task)
        task.add_done_callback(self._handing.remove)
        delivered = asyncio.ensure_future(_settled(task))
        self._delivering.add(delivered)
        delivered.add_done_callback(self._delivering.discard)
        return task

    async def settle(self, timeout_s: float) -> bool:
        """Wait until every batch landed so far is delivered (or has failed: its failure is its
        flush's to report); False if some are still on their way after ``timeout_s``.

        A worker giving up partitions calls this before it lets the rebalance go on: their next
        owner rebuilds the tables from the changelogs as they are when it starts, so a batch still
        on its way would be half seen (one table's changelog without the other's) or land after
        the new owner's own writes, and a record read again would then meet other state than the
        one it was first processed on."""
        if not self._delivering:
            return True
        _, pending = await asyncio.wait(set(self._delivering), timeout=timeout_s)
        return not pending

    async def flush(self, producer: Any) -> list[asyncio.Future[Any]]:
        """Write the pending table values to RocksDB and hand every record to ``producer`` (an
        ``AIOKafkaProducer``) in batches; returns the batches' delivery futures."""
        task = self._queue(producer)
        return [] if task is None else await task

    async def flush_behind(self, producer: Any, tables: bool = True) -> list[asyncio.Future[Any]]:
        """As :meth:`flush`, without waiting for the producer to take the batch: returns one future,
        done once every record of the batch is delivered (without ``tables``: only the output
        records are flushed, the table writes keep waiting).

        The producer takes a topic-partition's next batch only once its previous one has gone out
        in a request, and sends one request at a time: waiting for that stalled the caller for
        a round trip to the broker per flush. Batches are still handed over in order; the caller
        waits only when more than ``MAX_BEHIND`` are not handed over yet."""
        task = self._queue(producer, tables)
        if task is None:
            return []
        if len(self._handing) > MAX_BEHIND:
            await asyncio.wait([self._handing[0]])
        return [asyncio.ensure_future(_all_delivered(task))]

    async def _hand(
        self, landed: _Landed, producer: Any, previous: asyncio.Task[Any] | None
    ) -> list[asyncio.Future[Any]]:
        if previous is not None and not previous.done():
            await asyncio.wait([previous])  # its failure is its own caller's to see
        futures: list[asyncio.Future[Any]] = []
        for table, partition, items in landed.changelogs:
            collection = self.tables[table]
            topic = collection.changelog_topic.get_topic_name()
            persist = _persister(collection.data, topic, partition)
            futures += await _send(producer, topic, partition, items, persist, self.changelog_batch)
        by_tp: dict[tuple[str, int], list[tuple[bytes | None, bytes | None]]] = {}
        for topic, out_key, value in landed.outs:
            partitions = self._partitions.get(topic)
            if partitions is None:
                partitions = self._partitions[topic] = sorted(await producer.partitions_for(topic))
            hashed = murmur2(out_key) & 0x7FFFFFFF if out_key is not None else 0
            partition = partitions[hashed % len(partitions)]
            by_tp.setdefault((topic, partition), []).append((out_key, value))
        for (topic, partition), records in by_tp.items():
            futures += await _send(producer, topic, partition, records, None)
        return futures


@dataclass
class _Landed:
    """A batch written to RocksDB, to hand to the producer: changelog records per (table,
    partition) and output records."""

    changelogs: list[tuple[str, int, list[tuple[bytes | None, bytes | None]]]]
    outs: list[tuple[str, bytes | None, bytes]]


async def _all_delivered(handing: asyncio.Task[list[asyncio.Future[Any]]]) -> None:
    await asyncio.gather(*await handing)


async def _settled(handing: asyncio.Task[list[asyncio.Future[Any]]]) -> None:
    """Done once the batch is delivered or has failed (the failure is reported by its flush)."""
    await asyncio.wait([handing])
    if handing.cancelled() or handing.exception() is not None:
        return
    futures = handing.result()
    if futures:
        await asyncio.wait(futures)


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
    new_batch: Callable[[], Any] | None = None,
) -> list[asyncio.Future[Any]]:
    """``records`` to one topic-partition in as few batches as fit the producer's batch size
    (built by ``new_batch()``; None: by the producer's ``create_batch``)."""
    futures: list[asyncio.Future[Any]] = []
    i = 0
    while i < len(records):
        builder = producer.create_batch() if new_batch is None else new_batch()
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
