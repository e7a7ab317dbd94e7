"""The claims topic's Kafka I/O: a reader that follows the log, and the claims of plans.

The rule and its pure fold are in :mod:`tables.claims`. Here, :class:`ClaimsReader` reads the
one-partition claims topic from its beginning when the worker starts (the worker is not ready until
it has read up to the end it found, and, when the log no longer starts at offset 0, the snapshot of
the claims before its start) and keeps following it. The worker that wrote the claim a snapshot is
due at writes it (:mod:`streams.claims_snapshot`).

A plan entering the pipeline's merge whose experience has no claim read yet is claimed at once
(:meth:`ClaimsReader.request`: the claim is appended on the worker's producer in a task of its own,
unless the log already says its device's rate voids it); the merge keeps the plan, and the records
after it in its partition, until a claim on that experience has been read back or the plan's claim
is known void (:meth:`ClaimsReader.settled`). The owner the core is then given
(``FaustStore.owner_of``) is the device of the first claim in the log, the same on every worker.

A claim not written and read back within ``timeout_s`` (the claims topic does not answer) is said
in one log line, and the worker's readiness names it (``/ready``: not ready, and why) while it is
tried again; the readiness watchdog says so once more past ``GUARDIAN_READY_TIMEOUT_S`` (the worker
keeps trying), and the plan, never acked, waits in the merge.
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

from streams import claims_snapshot
from streams.claiming import ClaimsUnderWay, RoundTrips, VoidClaims
from tables.claims import ClaimLog

log = logging.getLogger(__name__)

#: how long one try of a claim (written and read back) may take before it is said and tried again
CLAIM_TIMEOUT_S = 10.0
#: the pause before a claim that failed is tried again
CLAIM_RETRY_S = 1.0
REQUEST_TIMEOUT_MS = 30_000
#: the reader's fetch long-poll (the broker answers as soon as a claim arrives)
FETCH_WAIT_MS = 100


class ClaimTimeout(TimeoutError):
    """A plan's experience claim was not written and read back in time (the broker is unreachable
    or overloaded): it is tried again while the worker reports itself not ready."""


@dataclass
class ClaimsReader:
    """Follows the claims topic (partition 0) from its beginning into a :class:`ClaimLog`, and writes
    the plans' claims (what it keeps of them: :mod:`streams.claiming`; the snapshot it writes:
    :class:`streams.claims_snapshot.SnapshotWriting`)."""

    bootstrap: str
    topic: str
    claims: ClaimLog = field(default_factory=ClaimLog)
    timeout_s: float = CLAIM_TIMEOUT_S
    #: the log's end when the worker started (None: not known yet); ready once read up to it
    start_end: int | None = None
    #: wakes the claims waiting to be read back
    progressed: asyncio.Event = field(default_factory=asyncio.Event)
    consumer: Any = None
    retry_s: float = CLAIM_RETRY_S
    #: the claims being written, the claims found void, the round trips of those written
    under_way: ClaimsUnderWay = field(default_factory=ClaimsUnderWay)
    voids: VoidClaims = field(default_factory=VoidClaims)
    round_trips: RoundTrips = field(default_factory=RoundTrips)
    #: the snapshot this worker writes when its claim is the one it is due at
    snapshot: claims_snapshot.SnapshotWriting = field(default_factory=claims_snapshot.SnapshotWriting)

    @property
    def caught_up(self) -> bool:
        """Has the log been read up to where it ended when the worker started?"""
        return self.start_end is not None and self.claims.position >= self.start_end and self.claims.complete

    def settled(self, experience_id: str, device_id: str | None = None) -> bool:
        """Has a claim on ``experience_id`` been read (its owner can no longer change), or is
        ``device_id``'s claim on it void (its plan is refused)?"""
        if not self.claims.complete:
            return False
        return (
            self.claims.owner(experience_id) is not None or (experience_id, device_id) in self.voids.refused
        )

    def missing(self, now: float | None = None) -> list[str]:
        """For readiness: what is still missing (empty: the claims are read and none is late)."""
        lacking: list[str] = []
        if self.start_end is None:
            lacking.append(f"the claims topic {self.topic} is not open yet")
        elif self.claims.awaiting is not None:
            lacking.append(
                f"the claims topic {self.topic} starts at offset {self.claims.awaiting}: the snapshot of "
                "the claims before it is not read yet"
            )
        elif not self.caught_up:
            left = self.start_end - self.claims.position
            lacking.append(
                f"the claims topic {self.topic} is not read to its end yet ({left} record(s) left)"
            )
        now = time.monotonic() if now is None else now
        late = sorted(
            (since, exp, dev)
            for exp, (dev, since) in self.under_way.pending.items()
            if now - since >= self.timeout_s and not self.settled(exp, dev)
        )
        if late:
            since, exp, dev = late[0]
            lacking.append(
                f"{len(late)} plan(s) wait for their experience claim on topic {self.topic} (the oldest, "
                f"experience {exp!r} of device {dev!r}, for {now - since:.0f} s): the claims topic "
                "does not answer; their partitions' records wait behind them"
            )
        return lacking

    def request(
        self, producer: Callable[[], Any], experience_id: str, device_id: str, received_at_ms: int = 0
    ) -> None:
        """Claim ``experience_id`` for ``device_id`` (a plan received at ``received_at_ms``) unless
        it is settled or already being claimed; returns at once (the claim is written and read back
        in a task of its own). ``producer`` returns the running ``AIOKafkaProducer``."""
        under_way = self.under_way
        if self.settled(experience_id, device_id) or experience_id in under_way.pending:
            return
        under_way.pending[experience_id] = (device_id, time.monotonic())
        task = asyncio.ensure_future(self._claim(producer, experience_id, device_id, received_at_ms))
        under_way.tasks.add(task)
        task.add_done_callback(under_way.tasks.discard)

    def holds(self, producer: Callable[[], Any] | None, experience_id: str, device_id: str, at: int) -> bool:
        """Must the plan of ``device_id`` for ``experience_id`` received at ``at`` stay in the merge
        (its claim not settled)? Claimed again if its claim's task ended without settling it (never a
        plan waiting on nothing). False: it goes on to be judged (a void claim is then forgotten)."""
        if not self.settled(experience_id, device_id):
            if producer is not None:
                self.request(producer, experience_id, device_id, at)
            return True
        self.voids.refused.discard((experience_id, device_id))
        return False

    async def _claim(
        self, producer: Callable[[], Any], experience_id: str, device_id: str, received_at_ms: int
    ) -> None:
        # claims already in the log are read first: an experience claimed before this worker
        # started is not claimed again
        await self.wait_caught_up()
        # one claim of a device at a time: once the device's rate is used up, its next claims are
        # found void before they are written (a device flooding new IDs writes few claims)
        turns = self.under_way.turns
        turn = turns.setdefault(device_id, [asyncio.Lock(), 0])
        turn[1] += 1
        try:
            async with turn[0]:
                await self._claim_in_turn(producer, experience_id, device_id, received_at_ms)
        finally:
            turn[1] -= 1
            if not turn[1]:
                del turns[device_id]

    async def _claim_in_turn(
        self, producer: Callable[[], Any], experience_id: str, device_id: str, received_at_ms: int
    ) -> None:
        said = False
        try:
            while not self.settled(experience_id, device_id):
                if self.claims.owner(experience_id) is None and self.claims.would_refuse(
                    device_id, received_at_ms
                ):
                    # the log voids such a claim already, whatever is read later: not written
                    self.voids.add(experience_id, device_id)
                    break
                try:
                    if await self.settle(producer(), experience_id, device_id, received_at_ms) is None:
                        self.voids.add(experience_id, device_id)
                except (ClaimTimeout, KafkaError, OSError) as exc:
                    if not said:
                        said = True
                        log.error(
                            "guardian: %s; its plan waits, with the records after it in its partition, "
                            "and the claim is tried again every %g s (/ready says so)",
                            exc if isinstance(exc, ClaimTimeout) else f"claiming {experience_id!r}: {exc!r}",
                            self.retry_s,
                        )
                    await asyncio.sleep(self.retry_s)
            if said:
                since = self.under_way.pending[experience_id][1]
                log.warning(
                    "guardian: the claim of experience %r is settled after %.0f s",
                    experience_id,
                    time.monotonic() - since,
                )
        finally:
            self.under_way.pending.pop(experience_id, None)

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
            begin = int((await consumer.beginning_offsets([tp]))[tp])
            if begin > 0:  # the records before it were removed after a snapshot of them
                self.claims.await_snapshot(begin)
            self.start_end = int((await consumer.end_offsets([tp]))[tp])
            self._progress()
            while True:
                try:
                    batch = await consumer.getmany(tp, timeout_ms=1_000)
                    messages = batch.get(tp, [])
                    if messages and int(messages[0].offset) > self.claims.position and self.claims.complete:
                        # records skipped: removed while this worker read behind them?
                        begin = int((await consumer.beginning_offsets([tp]))[tp])
                        if begin > self.claims.position:
                            log.warning(
                                "guardian: the claims topic %s now starts at offset %d, past the %d read: "
                                "the snapshot of the claims before it is read first",
                                self.topic,
                                begin,
                                self.claims.position,
                            )
                            self.claims.await_snapshot(begin)
                except KafkaError as exc:  # the client reconnects by itself; say so and go on
                    log.warning("guardian: reading the claims topic %s: %r", self.topic, exc)
                    await asyncio.sleep(0.5)
                    continue
                for message in messages:
                    try:
                        at = int(message.timestamp)
                        self.claims.read(int(message.offset), message.key, message.value, at, message.headers)
                    except claims_snapshot.SnapshotError as exc:
                        log.error("guardian: reading the claims topic %s: %s", self.topic, exc)
                if messages:
                    self._progress()
        finally:
            self.consumer = None
            await consumer.stop()

    def _progress(self) -> None:
        self.progressed.set()
        self.progressed = asyncio.Event()

    async def settle(
        self, producer: Any, experience_id: str, device_id: str, received_at_ms: int = 0
    ) -> str | None:
        """The owner of ``experience_id``: the settled one if known, else after claiming it for
        ``device_id`` (a plan received at ``received_at_ms``) and reading the log past that claim;
        None: that claim is void (beyond the device's rate). Raises :class:`ClaimTimeout`."""
        owner = self.claims.owner(experience_id)
        if owner is not None:
            return owner  # the first claim is already read: nothing can move it
        started = time.monotonic()
        try:
            async with asyncio.timeout(self.timeout_s):
                sent = await producer.send_and_wait(
                    self.topic,
                    device_id.encode(),
                    key=experience_id.encode(),
                    partition=0,
                    timestamp_ms=received_at_ms or None,
                )
                offset = int(sent.offset)
                while not self.claims.has_read(offset):
                    await self.progressed.wait()
        except TimeoutError as exc:
            raise ClaimTimeout(
                f"the claim of experience {experience_id!r} for device {device_id!r} was not written "
                f"and read back on topic {self.topic} within {self.timeout_s:g} s"
            ) from exc
        self.round_trips.done(time.monotonic() - started)
        if self.claims.due == offset:
            # this worker's claim is the one the next snapshot is due at: it writes it
            self.snapshot.start(self, producer)
        return self.claims.owner(experience_id)
