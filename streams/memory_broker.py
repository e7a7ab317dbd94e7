"""An in-memory Kafka for the shell (:class:`MemoryConsumer`, :class:`MemoryProducer`,
:class:`MemoryRecord`), shipped beside the interface it implements (``streams.broker``), as httpx
ships its ``MockTransport``.

With them a unit test drives the shell and the pipeline task the way faust does (hand records over,
seek, rebalance, deliver or fail a flush) with no broker, no faust consumer and no sleeping: a
flush's delivery waits until the test settles it (``hold``), and what the shell asked of the
consumer (seeks, gaps) is kept for the test to read."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass
class MemoryRecord:
    """A record as faust's conductor hands it over (topic, partition, offset, timestamp in seconds,
    key, value); ``acked`` and ``refcount`` are faust's own bookkeeping fields."""

    topic: str
    partition: int
    offset: int
    timestamp: float
    key: bytes | None = None
    value: bytes = b""
    acked: bool = False
    refcount: int = 0

    @property
    def tp(self) -> tuple[str, int]:
        return (self.topic, self.partition)


@dataclass
class MemoryConsumer:
    """faust's consumer as the shell sees it (``streams.broker.ShellConsumer``): what faust knows
    is committed (``_committed_offset``, empty from a revocation to faust's seek), what the broker
    has committed (``broker``), each partition's high watermark (``high``; ``default_high`` for
    the others, None: not known), the logs' beginning, and the seeks and gaps asked for."""

    _committed_offset: dict[Any, int | None] = field(default_factory=dict)
    broker: dict[Any, int | None] = field(default_factory=dict)
    high: dict[Any, int] = field(default_factory=dict)
    default_high: int | None = None
    earliest: int = 0
    sought: list[tuple[Any, int]] = field(default_factory=list)
    gaps: list[tuple[Any, int, int]] = field(default_factory=list)

    def assignment(self) -> set[Any]:
        return set(self.high)

    def highwater(self, tp: Any) -> int | None:
        return self.high.get(tp, self.default_high)

    async def position(self, tp: Any) -> int | None:
        """The fetch position: all of the log fetched (the shell must never take it for seen)."""
        return self.highwater(tp)

    async def earliest_offsets(self, *tps: Any) -> Mapping[Any, int]:
        return dict.fromkeys(tps, self.earliest)

    async def broker_committed(self, tp: Any) -> int | None:
        return self.broker.get(tp)

    async def seek_wait(self, partitions: Mapping[Any, int]) -> None:
        self.sought.extend(partitions.items())

    async def add_log_gap(self, tp: Any, first: int, last: int) -> None:
        self.gaps.append((tp, first, last))


class MemoryBatch:
    """A record batch of at most ``capacity`` records (``streams.broker.RecordBatch``)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.records: list[tuple[bytes, bytes | None]] = []
        self.closed = False

    def close(self) -> None:
        self.closed = True

    def append(self, *, timestamp: int | None, key: bytes, value: bytes | None) -> object | None:
        if self.closed:
            raise RuntimeError("a record appended to a closed batch")
        if len(self.records) >= self.capacity:
            return None
        self.records.append((key, value))
        return object()


@dataclass
class Delivered:
    """What Kafka answers for a delivered batch: the offset of its first record."""

    offset: int


@dataclass
class MemoryProducer:
    """aiokafka's producer in memory (``streams.broker.ShellProducer``): every batch handed over is
    kept (``batches``: topic, partition, records) with offsets counting up from 0 per
    topic-partition. A batch is delivered at once, or fails (``fail``), unless ``hold``: then its
    future waits in ``futures`` until the test settles it (:meth:`deliver`)."""

    capacity: int = 1000
    partitions: int = 4
    hold: bool = False
    fail: bool = False
    batches: list[tuple[str, int, list[tuple[bytes, bytes | None]]]] = field(default_factory=list)
    next_offset: dict[tuple[str, int], int] = field(default_factory=dict)
    futures: list[asyncio.Future[Any]] = field(default_factory=list)

    def create_batch(self) -> MemoryBatch:
        return MemoryBatch(self.capacity)

    async def send_batch(self, builder: MemoryBatch, topic: str, *, partition: int) -> asyncio.Future[Any]:
        if not builder.closed:
            raise RuntimeError("a batch is handed over complete")
        self.batches.append((topic, partition, list(builder.records)))
        base = self.next_offset.get((topic, partition), 0)
        self.next_offset[(topic, partition)] = base + len(builder.records)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        if self.hold:
            self.futures.append(fut)
        elif self.fail:
            fut.set_exception(RuntimeError("broker gone"))
        else:
            fut.set_result(Delivered(base))
        return fut

    async def partitions_for(self, topic: str) -> set[int]:
        return set(range(self.partitions))

    def deliver(self, exc: BaseException | None = None) -> int:
        """Settle every batch held so far: delivered, or failed with ``exc``; how many."""
        held, self.futures = self.futures, []
        for fut in held:
            if not fut.done():
                if exc is None:
                    fut.set_result(Delivered(0))
                else:
                    fut.set_exception(exc)
        return len(held)
