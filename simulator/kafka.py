"""The fleet on a real broker: one producer and one consumer for the whole fleet.

The producer sends every device's records with ``timestamp_ms`` = the simulated clock (their
receive time), and they reach the broker in the order the device sent them
(:class:`simulator.send_order.SendOrder`). The consumer reads every partition of the decisions,
dispatch, timeline and deadletter topics from their end at start (positions are resolved before
the first plan goes out, so nothing of this run is missed) and hands each record to
:meth:`Fleet.handle_output`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError
from aiokafka.partitioner import murmur2

from simulator.fleet import Fleet, FleetConfig, FleetReport
from simulator.outbox import TransportError
from simulator.send_order import SendOrder
from topics.names import INPUT_SUFFIXES, TopicNames

REQUEST_TIMEOUT_MS = 30_000
START_TIMEOUT_S = 30.0
FLUSH_TIMEOUT_S = 30.0
OUTPUT_SUFFIXES = ("decisions", "dispatch", "timeline", "deadletter")


class KafkaBus:
    """The fleet's transport: ``send`` produces, ``pump`` consumes the outputs into a sink."""

    def __init__(self, bootstrap: str, names: TopicNames) -> None:
        self.bootstrap = bootstrap
        self.names = names
        self.producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap,
            acks=1,
            linger_ms=5,
            max_batch_size=512 * 1024,
            request_timeout_ms=REQUEST_TIMEOUT_MS,
            client_id="guardian-simulator",
        )
        self.consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap,
            group_id=None,
            enable_auto_commit=False,
            request_timeout_ms=REQUEST_TIMEOUT_MS,
            client_id="guardian-simulator-watch",
            auto_offset_reset="latest",  # agrees with seek_to_end below (assign() starts a reset too)
        )
        self.failures: list[str] = []
        self.order = SendOrder(REQUEST_TIMEOUT_MS / 1000)
        self.partitions = 1
        self._partition_cache: dict[str, int] = {}
        self._by_topic = {names.prefix + s: s for s in OUTPUT_SUFFIXES}
        self._started: list[Any] = []

    async def start(self) -> None:
        """Connect both clients and position the consumer at the end of every output partition."""
        async with asyncio.timeout(START_TIMEOUT_S):
            await self.producer.start()
            self._started.append(self.producer)
            await self.consumer.start()
            self._started.append(self.consumer)
            available = await self.consumer.topics()
            missing = [t for t in self._by_topic if t not in available]
            if missing:
                raise TransportError(
                    f"topics {', '.join(sorted(missing))} do not exist on {self.bootstrap}: "
                    "run 'guardian topics create' with the same GUARDIAN_TOPIC_PREFIX"
                )
            parts = [
                TopicPartition(topic, p)
                for topic in self._by_topic
                for p in sorted(await self.producer.partitions_for(topic))
            ]
            counts = {len(await self.producer.partitions_for(self.names.prefix + s)) for s in INPUT_SUFFIXES}
            if len(counts) != 1:
                raise TransportError(
                    f"the input topics under {self.names.prefix!r} differ in partition count"
                )
            self.partitions = counts.pop()
            self.consumer.assign(parts)
            await self.consumer.seek_to_end(*parts)
            for tp in parts:
                await self.consumer.position(tp)

    async def close(self) -> None:
        """Flush what was produced, then stop both clients (bounded; also after a failed start)."""
        if self.producer in self._started:
            with contextlib.suppress(KafkaError, TimeoutError):
                async with asyncio.timeout(FLUSH_TIMEOUT_S):
                    await self.producer.flush()
        for client in (self.consumer, self.producer):
            with contextlib.suppress(KafkaError, TimeoutError):
                async with asyncio.timeout(FLUSH_TIMEOUT_S):
                    await client.stop()
        self._started.clear()

    def _delivered(self, fut: asyncio.Future[Any]) -> None:
        if fut.cancelled():
            return
        exc = fut.exception()
        if exc is not None and len(self.failures) < 100:
            self.failures.append(f"{type(exc).__name__}: {exc}")

    def partition_of(self, key: str) -> int:
        """The default partitioner's choice (murmur2 of the key), computed once per device."""
        found = self._partition_cache.get(key)
        if found is None:
            found = (murmur2(key.encode()) & 0x7FFFFFFF) % self.partitions
            self._partition_cache[key] = found
        return found

    async def send(self, suffix: str, key: str, value: bytes, timestamp_ms: int) -> None:
        """Queue one record on the producer (bounded: aiokafka waits at most request_timeout_ms for
        metadata and for room in its buffer); delivery failures are collected in ``failures``.
        A record for another topic than the device's previous one waits for that one's delivery."""
        await self.order.before(key, suffix)
        try:
            fut = await self.producer.send(
                self.names.prefix + suffix,
                value=value,
                key=key.encode(),
                partition=self.partition_of(key),
                timestamp_ms=timestamp_ms,
            )
        except (KafkaError, TimeoutError) as exc:
            raise TransportError(
                f"cannot produce to {self.names.prefix}{suffix}: {type(exc).__name__}: {exc}"
            ) from exc
        fut.add_done_callback(self._delivered)
        self.order.sent(key, suffix, fut)

    async def pump(self, sink: Callable[[str, str | None, bytes], None]) -> None:
        """Hand every output record to ``sink(suffix, key, value)`` until cancelled."""
        while True:
            batches = await self.consumer.getmany(timeout_ms=200, max_records=5000)
            for tp, records in batches.items():
                suffix = self._by_topic.get(tp.topic)
                if suffix is None:
                    continue
                for rec in records:
                    if rec.value is None:
                        continue
                    key = rec.key.decode("utf-8", "replace") if rec.key is not None else None
                    sink(suffix, key, rec.value)


async def run_simulation(
    config: FleetConfig,
    *,
    bootstrap: str,
    names: TopicNames,
    on_tick: Callable[[Fleet], None] | None = None,
) -> FleetReport:
    """Run a fleet on ``bootstrap`` under ``names``; its report (delivery failures in ``errors``)."""
    bus = KafkaBus(bootstrap, names)
    try:
        await bus.start()
        fleet = Fleet(config, bus)
        pump = asyncio.create_task(bus.pump(fleet.handle_output))
        try:
            run = asyncio.create_task(fleet.run(on_tick))
            done, _ = await asyncio.wait({run, pump}, return_when=asyncio.FIRST_COMPLETED)
            if pump in done and not run.done():
                run.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await run
                pump.result()  # raises the consumer's error
                raise TransportError("the output consumer stopped")
            report = run.result()
        finally:
            pump.cancel()
            with contextlib.suppress(asyncio.CancelledError, KafkaError):
                await pump
    except KafkaError as exc:
        raise TransportError(f"Kafka at {bootstrap}: {type(exc).__name__}: {exc}") from exc
    finally:
        await bus.close()
    report.errors.extend(f"delivery failed: {f}" for f in bus.failures)
    return report
