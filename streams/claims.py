"""The claims topic's Kafka I/O: a reader that follows the whole log, and the claim of one plan.

The rule and its pure fold are in :mod:`tables.claims`. Here, :class:`ClaimsReader` reads the
one-partition claims topic from its beginning when the worker starts (the worker is not ready until
it has read up to the end it found) and keeps following it; :meth:`ClaimsReader.claim` appends a
claim on the worker's producer and returns once the reader has read past it, so the owner the core
is then given (``FaustStore.owner_of``) is the device of the first claim in the log, the same on
every worker. A claim that is not settled within ``timeout_s`` raises :class:`ClaimTimeout`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from tables.claims import ClaimLog

log = logging.getLogger(__name__)

#: how long a plan waits for its claim to be written and read back before the worker gives up
CLAIM_TIMEOUT_S = 30.0
REQUEST_TIMEOUT_MS = 30_000
#: the reader's fetch long-poll (the broker answers as soon as a claim arrives)
FETCH_WAIT_MS = 100


class ClaimTimeout(TimeoutError):
    """A plan's experience claim was not written and read back in time (the broker is unreachable
    or overloaded): the worker stops without acking the plan, which is read again after restart."""


@dataclass
class ClaimsReader:
    """Follows the claims topic (partition 0) from its beginning into a :class:`ClaimLog`."""

    bootstrap: str
    topic: str
    claims: ClaimLog = field(default_factory=ClaimLog)
    timeout_s: float = CLAIM_TIMEOUT_S
    #: the log's end when the worker started (None: not known yet); ready once read up to it
    start_end: int | None = None
    #: wakes the claims waiting to be read back
    progressed: asyncio.Event = field(default_factory=asyncio.Event)
    #: claims written, and their round trips (seconds, written + read back), for the log and metrics
    claimed: int = 0
    last_round_trip_s: float = 0.0
    consumer: Any = None
    on_round_trip: Callable[[float], None] | None = None

    @property
    def caught_up(self) -> bool:
        """Has the log been read up to where it ended when the worker started?"""
        return self.start_end is not None and self.claims.position >= self.start_end

    def missing(self) -> list[str]:
        """For readiness: what is still missing (empty: the claims are read)."""
        if self.caught_up:
            return []
        if self.start_end is None:
            return [f"the claims topic {self.topic} is not open yet"]
        left = self.start_end - self.claims.position
        return [f"the claims topic {self.topic} is not read to its end yet ({left} record(s) left)"]

    async def wait_caught_up(self) -> None:
        """Return once the log has been read up to where it ended when the worker started."""
        while not self.caught_up:
            await self.progressed.wait()

    async def run(self) -> None:
        """Read the log from its beginning, then follow it (until cancelled)."""
        tp = TopicPartition(self.topic, 0)
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap,
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            request_timeout_ms=REQUEST_TIMEOUT_MS,
            fetch_max_wait_ms=FETCH_WAIT_MS,
            client_id="guardian-claims",
        )
        self.consumer = consumer
        await consumer.start()
        try:
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            begin = (await consumer.beginning_offsets([tp]))[tp]
            self.claims.skip_to(int(begin))
            self.start_end = int((await consumer.end_offsets([tp]))[tp])
            self._progress()
            while True:
                try:
                    batch = await consumer.getmany(tp, timeout_ms=1_000)
                except KafkaError as exc:  # the client reconnects by itself; say so and go on
                    log.warning("guardian: reading the claims topic %s: %r", self.topic, exc)
                    await asyncio.sleep(0.5)
                    continue
                for message in batch.get(tp, ()):
                    self.claims.apply(int(message.offset), message.key, message.value)
                if batch:
                    self._progress()
        finally:
            self.consumer = None
            await consumer.stop()

    def _progress(self) -> None:
        self.progressed.set()
        self.progressed = asyncio.Event()

    async def settle(self, producer: Any, experience_id: str, device_id: str) -> str:
        """The owner of ``experience_id``: the settled one if known, else after claiming it for
        ``device_id`` and reading the log past that claim. Raises :class:`ClaimTimeout`."""
        owner = self.claims.owner(experience_id)
        if owner is not None:
            return owner  # the first claim is already read: nothing can move it
        started = time.monotonic()
        try:
            async with asyncio.timeout(self.timeout_s):
                sent = await producer.send_and_wait(
                    self.topic, device_id.encode(), key=experience_id.encode(), partition=0
                )
                offset = int(sent.offset)
                while not self.claims.has_read(offset):
                    await self.progressed.wait()
        except TimeoutError as exc:
            raise ClaimTimeout(
                f"the claim of experience {experience_id!r} for device {device_id!r} was not written "
                f"and read back on topic {self.topic} within {self.timeout_s:g} s"
            ) from exc
        self.claimed += 1
        self.last_round_trip_s = time.monotonic() - started
        if self.on_round_trip is not None:
            self.on_round_trip(self.last_round_trip_s)
        owner = self.claims.owner(experience_id)
        assert owner is not None  # our own claim at least has been read
        return owner
