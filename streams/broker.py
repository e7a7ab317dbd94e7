"""What the shell needs of Kafka, as one typed interface: the consumer's positions, seeks and gaps
(:class:`ShellConsumer`) and the producer's record batches (:class:`ShellProducer`).

The worker hands the shell faust's own consumer and aiokafka producer (``streams.pipeline_task``
attaches them); ``streams.memory_broker`` ships an in-memory implementation of both, so that a unit
test can play a rebalance in the middle of a batch, a revoke during a flush or a refetch below the
committed offset without a broker and without sleeping. The committed offsets are read as faust
keeps them (``streams.seam.reads.committed_offsets``: the consumer's ``_committed_offset``)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any, Protocol


class ShellConsumer(Protocol):
    """faust's consumer as the shell uses it (topic-partitions are faust's ``TP``)."""

    def assignment(self) -> set[Any]:
        """The topic-partitions assigned to this worker."""
        ...

    def highwater(self, tp: Any) -> int | None:
        """The partition's high watermark as last fetched (None or ``KeyError``: not known yet)."""
        ...

    async def earliest_offsets(self, *tps: Any) -> Mapping[Any, int]:
        """The first offset of each partition's log."""
        ...

    async def broker_committed(self, tp: Any) -> int | None:
        """The committed offset as the broker has it now (None: nothing committed)."""
        ...

    async def seek_wait(self, partitions: Mapping[Any, int]) -> None:
        """Fetch the partitions again from these offsets."""
        ...

    async def add_log_gap(self, tp: Any, first: int, last: int) -> None:
        """Offsets ``first`` to ``last`` are not in the log: they count as acked."""
        ...


class RecordBatch(Protocol):
    """A record batch being built (aiokafka's ``BatchBuilder``)."""

    def append(self, *, timestamp: int | None, key: bytes, value: bytes | None) -> object | None:
        """Add a record (None: the batch is full)."""
        ...

    def close(self) -> None:
        """The batch is complete."""
        ...


class ShellProducer(Protocol):
    """aiokafka's producer as the batched writes use it."""

    def create_batch(self) -> Any:
        """A new :class:`RecordBatch`."""
        ...

    async def send_batch(self, builder: Any, topic: str, *, partition: int) -> asyncio.Future[Any]:
        """Hand a complete batch over; the future is done once Kafka has it (or it failed)."""
        ...

    async def partitions_for(self, topic: str) -> set[int]:
        """The topic's partitions."""
        ...
