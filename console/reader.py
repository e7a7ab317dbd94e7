"""The console's own reader of the output topics: no consumer group (it commits nothing and takes
no partition from a worker), every partition of decisions, dispatch, timeline and deadletter
assigned, starting at ``--from``: ``latest``, ``earliest`` or an ISO 8601 time.

While the broker does not answer, the reader says since when (the page's "disconnected since"
banner) and keeps trying with a fresh client; when it answers again the reader resumes at the
next offset it had not read, so no record is taken twice. Every request has a timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Final

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from streams.admin import admin_client, partition_counts
from topics.names import OUTPUT_SUFFIXES, TopicNames

log = logging.getLogger(__name__)

REQUEST_TIMEOUT_MS: Final = 5_000
#: a broker that has not answered a metadata request for this long counts as disconnected
PROBE_TIMEOUT_S: Final = 3.0
PROBE_EVERY_S: Final = 2.0
RETRY_S: Final = 2.0
STOP_TIMEOUT_S: Final = 10.0


def parse_from(text: str) -> str | int:
    """``latest``, ``earliest`` or an ISO 8601 time as epoch milliseconds; ValueError otherwise."""
    if text in ("latest", "earliest"):
        return text
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"--from takes latest, earliest or an ISO 8601 time, not {text!r}") from None
    if when.tzinfo is None:
        raise ValueError(f"--from needs a time zone (e.g. {text}Z), not {text!r}")
    return int(when.timestamp() * 1000)


@dataclass
class Link:
    """Whether the broker answers, and since when it does not (wall-clock ms; None: connected)."""

    down_since_ms: int | None = None
    connected_once: bool = False

    def up(self) -> None:
        self.down_since_ms = None
        self.connected_once = True

    def down(self) -> None:
        if self.down_since_ms is None:
            self.down_since_ms = int(time.time() * 1000)


@dataclass
class Reader:
    bootstrap: str
    topics: TopicNames
    start: str | int
    on_record: Callable[[str, int, int, int, bytes | None, bytes | None], object]
    link: Link = field(default_factory=Link)
    #: the next offset to read per partition (kept across reconnects)
    positions: dict[TopicPartition, int] = field(default_factory=dict)

    def _suffix(self, topic: str) -> str:
        return topic[len(self.topics.prefix) :]

    async def run(self) -> None:
        """Read until cancelled; reconnect after any broker error."""
        while True:
            try:
                await self._session()
            except (KafkaError, OSError, TimeoutError) as exc:
                log.info("console reader: broker not answering (%s); retrying", type(exc).__name__)
            self.link.down()
            await asyncio.sleep(RETRY_S)

    async def _partitions(self) -> list[TopicPartition]:
        names = [self.topics.prefix + s for s in OUTPUT_SUFFIXES]
        async with asyncio.timeout(PROBE_TIMEOUT_S * 3), admin_client(self.bootstrap) as admin:
            counts = await partition_counts(admin, names)
        return [TopicPartition(t, p) for t in names if t in counts for p in range(counts[t])]

    async def _seek(self, consumer: AIOKafkaConsumer, parts: list[TopicPartition]) -> None:
        fresh = [tp for tp in parts if tp not in self.positions]
        if fresh and self.start == "earliest":
            self.positions |= await consumer.beginning_offsets(fresh)
        elif fresh and self.start == "latest":
            self.positions |= await consumer.end_offsets(fresh)
        elif fresh and isinstance(self.start, int):
            ends = await consumer.end_offsets(fresh)
            found = await consumer.offsets_for_times({tp: self.start for tp in fresh})
            for tp in fresh:
                hit = found.get(tp)
                self.positions[tp] = hit.offset if hit is not None else ends[tp]
        if self.start == "latest":
            # a partition that appears after the start is new: it is read from its beginning
            self.start = "earliest"
        for tp in parts:
            consumer.seek(tp, self.positions[tp])

    async def _session(self) -> None:
        parts = await self._partitions()
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap,
            group_id=None,
            enable_auto_commit=False,
            request_timeout_ms=REQUEST_TIMEOUT_MS,
            client_id="guardian-console",
            auto_offset_reset="earliest",
        )
        try:
            async with asyncio.timeout(PROBE_TIMEOUT_S * 3):
                await consumer.start()
                consumer.assign(parts)
                await self._seek(consumer, parts)
            self.link.up()
            probe = asyncio.create_task(self._probe())
            try:
                while not probe.done():
                    batches = await consumer.getmany(timeout_ms=500, max_records=5_000)
                    for tp, records in batches.items():
                        suffix = self._suffix(tp.topic)
                        for r in records:
                            self.on_record(suffix, tp.partition, r.offset, r.timestamp, r.key, r.value)
                            self.positions[tp] = r.offset + 1
                probe.result()
            finally:
                probe.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await probe
        finally:
            await _stop(consumer)

    async def _probe(self) -> None:
        """Return (ending the session) when the broker stops answering metadata requests."""
        while True:
            await asyncio.sleep(PROBE_EVERY_S)
            try:
                async with asyncio.timeout(PROBE_TIMEOUT_S):
                    _, writer = await asyncio.open_connection(*self._host_port())
                    writer.close()
                    await writer.wait_closed()
            except (OSError, TimeoutError):
                return

    def _host_port(self) -> tuple[str, int]:
        first = self.bootstrap.split(",")[0].strip()
        host, _, port = first.rpartition(":")
        return host.strip("[]") or "127.0.0.1", int(port)


async def _stop(consumer: AIOKafkaConsumer) -> None:
    """Stop the consumer, waiting at most ``STOP_TIMEOUT_S``: with the broker away its fetcher may
    sit in a retry, and its stop must neither hang the reader nor end it with that retry's error."""
    stopper = asyncio.create_task(consumer.stop())
    stopper.add_done_callback(lambda t: t.cancelled() or t.exception())
    await asyncio.wait({stopper}, timeout=STOP_TIMEOUT_S)
    if not stopper.done():
        stopper.cancel()
