"""The group's progress, seen from outside: committed offsets and ends of the input partitions,
sampled every half second, and from them the pause after each fault.

A partition *waits* while it has records past its committed offset; the pause after a fault at
``t`` ends at the first sample where every partition has either committed past where it stood at
``t`` or has nothing left to commit. That is what an operator sees of a rebalance: the time until
every partition with work moves again."""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from aiokafka import AIOKafkaConsumer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError
from aiokafka.structs import TopicPartition

SAMPLE_EVERY_S = 0.5
REQUEST_TIMEOUT_MS = 5_000

#: closing a client of a broker that is down may fail in these ways; none matters here
CLOSE_ERRORS = (KafkaError, OSError, TimeoutError, RuntimeError)

Offsets = dict[tuple[str, int], int]


@dataclass(frozen=True)
class Sample:
    at_s: float
    committed: Offsets
    ends: Offsets


def pause_after(samples: Sequence[Sample], at_s: float) -> float | None:
    """Seconds from ``at_s`` until every partition with work has moved (None: not within the
    samples)."""
    before = [s for s in samples if s.at_s <= at_s]
    if not before:
        return None
    base = before[-1].committed
    for s in samples:
        if s.at_s <= at_s:
            continue
        waiting = [
            tp
            for tp, end in s.ends.items()
            if end > s.committed.get(tp, 0) and s.committed.get(tp, 0) <= base.get(tp, 0)
        ]
        if not waiting:
            return s.at_s - at_s
    return None


def lag(sample: Sample) -> int:
    return sum(max(0, end - sample.committed.get(tp, 0)) for tp, end in sample.ends.items())


@dataclass
class ProgressWatch:
    """Samples the group's committed offsets and the partitions' ends until stopped."""

    bootstrap: str
    group: str
    topics: list[str]
    partitions: int
    started_at: float = field(default_factory=time.monotonic)
    samples: list[Sample] = field(default_factory=list)
    failures: int = 0

    async def run(self, stop: asyncio.Event) -> None:
        """Sample every half second with one pair of clients, made again after a failure (the
        broker down or moving) so a sample never waits on a dead connection."""
        tps = [TopicPartition(t, p) for t in self.topics for p in range(self.partitions)]
        clients: tuple[AIOKafkaAdminClient, AIOKafkaConsumer] | None = None
        try:
            while not stop.is_set():
                try:
                    if clients is None:
                        clients = await self._connect()
                    await self._sample(tps, *clients)
                except (KafkaError, OSError, TimeoutError):
                    self.failures += 1  # the next sample tries again, on new clients
                    if clients is not None:
                        await _close(*clients)
                        clients = None
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), SAMPLE_EVERY_S)
        finally:
            if clients is not None:
                await _close(*clients)

    async def _connect(self) -> tuple[AIOKafkaAdminClient, AIOKafkaConsumer]:
        admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap, request_timeout_ms=REQUEST_TIMEOUT_MS)
        consumer = AIOKafkaConsumer(bootstrap_servers=self.bootstrap, request_timeout_ms=REQUEST_TIMEOUT_MS)
        try:
            async with asyncio.timeout(10):
                await admin.start()
                await consumer.start()
        except (KafkaError, OSError, TimeoutError):
            await _close(admin, consumer)
            raise
        return admin, consumer

    async def _sample(
        self, tps: list[TopicPartition], admin: AIOKafkaAdminClient, consumer: AIOKafkaConsumer
    ) -> None:
        async with asyncio.timeout(10):
            offsets = await admin.list_consumer_group_offsets(self.group)
            ends = await consumer.end_offsets(tps)
        wanted = set(self.topics)
        committed = {
            (tp.topic, tp.partition): int(om.offset)
            for tp, om in offsets.items()
            if tp.topic in wanted and om.offset >= 0
        }
        self.samples.append(
            Sample(
                time.monotonic() - self.started_at,
                committed,
                {(tp.topic, tp.partition): int(off) for tp, off in ends.items()},
            )
        )

    def lag_now(self) -> int | None:
        return lag(self.samples[-1]) if self.samples else None


async def _close(admin: AIOKafkaAdminClient, consumer: AIOKafkaConsumer) -> None:
    with contextlib.suppress(*CLOSE_ERRORS):
        await admin.close()
    with contextlib.suppress(*CLOSE_ERRORS):
        await consumer.stop()


def summarise(pauses: dict[str, list[float | None]]) -> dict[str, dict[str, float | int | None]]:
    """Per kind of fault: how many, median and worst pause (None: a pause that never ended)."""
    out: dict[str, dict[str, float | int | None]] = {}
    for kind, values in sorted(pauses.items()):
        known = [v for v in values if v is not None]
        out[kind] = {
            "faults": len(values),
            "unended": len(values) - len(known),
            "median_s": round(statistics.median(known), 2) if known else None,
            "worst_s": round(max(known), 2) if known else None,
        }
    return out
