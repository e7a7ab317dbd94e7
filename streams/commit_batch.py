"""The commit protocol (:class:`CommitBatch`): what is processed, what is flushed, what may be
committed.

It owns the messages processed since the last flush (their table writes and outputs wait in the
store's ``PendingWrites``), the table writes that wait behind a backlog (:class:`Deferred`), the
flushes on their way to Kafka and the rebalance generation; it decides when a batch is due, and
acks a batch's messages (releases them to faust's consumer, whose commit timer commits) only once
Kafka has every batch of its flush and no rebalance came meanwhile. faust's own revocation flushes
only what the producer holds; :meth:`CommitBatch.settle` waits for every batch flushed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiokafka.errors import KafkaError

from streams.batch_tally import BatchTally
from streams.broker import ShellProducer
from streams.metrics import GuardianMetrics
from tables.store.writes import PendingWrites
from topics.envelope import Out

log = logging.getLogger(__name__)

#: a batch is flushed when the pipeline has caught up with what was fetched (the inbox is empty),
#: or when it is due (``CommitBatch.due``). A batch holding an output someone waits on (``waited_on``:
#: a decision, a dispatch, a timeline entry of an experience's story) is due after this many records,
#: or this long after that output was made (a backlog after a pause is not held for a whole batch's
#: time; 30 and 50 ms cost a third of the throughput in ``guardian bench``: a produce request per
#: flush)
FLUSH_RECORDS = 2_000
FLUSH_AFTER_S = 0.1
#: a batch of nothing anyone waits on (table changes, drop entries, dead letters) grows larger and
#: longer: it is due after this many records, or this long after its first record was handled
#: (what it holds back is only the commit of its offsets, on a one-second timer anyway)
FLUSH_STATE_RECORDS = 5_000
FLUSH_STATE_AFTER_S = 0.5
#: behind the broker (a backlog), a due batch's outputs are flushed but its table writes wait, so
#: that a device's entry is written once for several of its records (encoding, writing and sending
#: one entry per record took about half of a busy worker's time): the table writes and the acks of
#: the records they carry are flushed after this many records, this long after the first of them
#: was deferred (the default of ``GUARDIAN_DEFER_STATE_S``; 0: never deferred), or as soon as the
#: pipeline has caught up
DEFER_STATE_RECORDS = 20_000
DEFER_STATE_AFTER_S = 2.0
#: output kinds someone waits on as soon as they are made (a timeline entry: unless it is a drop)
WAITED_ON_KINDS = frozenset({"decisions", "dispatch"})
#: how long a worker giving up partitions waits for its flushed batches to be delivered before it
#: stops instead (their next owner must not rebuild the tables from half of a batch)
SETTLE_TIMEOUT_S = 30.0


@dataclass
class _Flushed:
    """A flushed batch on its way to Kafka: the messages it acks once delivered (the deferred ones
    first; none while its table writes wait), how many messages it took itself, how many of the
    acked ones are input records, its tally, when its flush started, and its generation."""

    acked: list[Any]
    records: int
    inputs: int
    tally: BatchTally
    started: float
    generation: int


@dataclass
class Deferred:
    """Table writes waiting behind a backlog (:meth:`CommitBatch.flush` with ``keep_state``): the
    messages whose outputs are flushed while their table writes still wait, the delivery futures of
    those outputs, how many of the messages are input records (the throughput the worker's trace
    reports, once they are acked), when the first of them was flushed (monotonic), and how long
    they may wait (``DEFER_STATE_AFTER_S``, ``GUARDIAN_DEFER_STATE_S``; 0: they never wait)."""

    messages: list[Any] = field(default_factory=list)
    futures: list[Any] = field(default_factory=list)
    inputs: int = 0
    since: float = 0.0
    after_s: float = DEFER_STATE_AFTER_S

    def __len__(self) -> int:
        return len(self.messages)

    def clear(self) -> None:
        """Nothing waits any more (taken by a flush, or dropped by a rebalance)."""
        self.messages, self.futures, self.inputs = [], [], 0


@dataclass
class Delivery:
    """Where a flushed batch goes and what its delivery sets off (wired by the pipeline task once
    the app runs)."""

    #: the running aiokafka producer (faust's own, so its flush before a commit covers our batches;
    #: the experience claims go out on it too; ``streams.memory_broker.MemoryProducer`` in unit tests)
    producer: Callable[[], ShellProducer] | None = None
    #: releases delivered messages to faust's consumer (their offsets may then be committed)
    ack: Callable[[list[Any]], None] | None = None
    #: called when a batch could not be delivered (the worker must stop: its input is not acked)
    on_lost: Callable[[BaseException], Any] | None = None
    #: the worker's Prometheus metrics (None: not counted, e.g. unit tests)
    metrics: GuardianMetrics | None = None


@dataclass
class CommitBatch:
    """The commit protocol: the messages processed since the last flush, whose table writes and
    outputs wait in ``writes``, and their tally.

    A flush (:meth:`flush`, one at a time) takes the messages and their writes in the same instant,
    writes RocksDB at once and hands the batch to the producer behind the stream; the messages are
    acked (released to faust's consumer, which commits) only once Kafka has every batch of it, and
    only if no rebalance came meanwhile (``generation``). A delivery that fails after the
    producer's retries stops the worker (``delivery.on_lost``: its input is then read again). Behind the
    broker a flush may send only the outputs, the table writes waiting (:class:`Deferred`): those
    messages are acked with the later flush that takes the table writes. A rebalance drops what
    was not flushed, and the table writes that waited (:meth:`discard`)."""

    writes: PendingWrites
    #: where a flushed batch goes, and what its delivery sets off
    delivery: Delivery = field(default_factory=Delivery)
    #: processed messages whose writes and outputs are not flushed yet
    unacked: list[Any] = field(default_factory=list)
    #: when the first of ``unacked`` was handled (monotonic)
    started: float = 0.0
    #: when the batch's first output someone waits on was made (monotonic; None: none yet)
    waited_on_since: float | None = None
    #: the clock of ``started``, ``waited_on_since`` and ``due`` (monotonic seconds)
    clock: Callable[[], float] = time.monotonic
    #: what the batch being built read and produced (counted once it is delivered)
    tally: BatchTally = field(default_factory=BatchTally)
    #: tasks acking flushed messages once their batches are delivered
    acking: set[asyncio.Task[None]] = field(default_factory=set)
    #: one flush at a time: a flush takes its messages and their writes in the same instant, so it
    #: acks exactly the records whose effects it sent
    flushing: asyncio.Lock = field(default_factory=asyncio.Lock)
    #: the worker is stopping: nothing more is flushed (:meth:`close`)
    closed: bool = False
    #: counts rebalances: a batch taken before one acks nothing after one (and the pipeline does
    #: not process further what it took from the inbox before one)
    generation: int = 0
    #: messages whose outputs are flushed while their table writes still wait
    deferred: Deferred = field(default_factory=Deferred)

    def __len__(self) -> int:
        return len(self.unacked) + len(self.deferred)

    def open(self) -> None:
        """A message is about to be handled: the batch's clock starts at its first."""
        if not self.unacked:
            self.started = self.clock()

    def add(self, message: Any) -> None:
        """A message handled: its writes and outputs are in the batch."""
        self.unacked.append(message)

    def waited_on(self) -> None:
        """The batch holds an output someone waits on (its clock starts at the first)."""
        if self.waited_on_since is None:
            self.waited_on_since = self.clock()

    def due(self) -> bool:
        """Is the batch to be flushed now? A batch holding an output someone waits on: after
        ``FLUSH_RECORDS`` records, or ``FLUSH_AFTER_S`` after that output; any other batch: after
        ``FLUSH_STATE_RECORDS`` records, or ``FLUSH_STATE_AFTER_S`` after its first record."""
        if self.state_due():
            return True
        n = len(self.unacked)
        if not n:
            return False
        if self.waited_on_since is not None:
            return n >= FLUSH_RECORDS or self.clock() - self.waited_on_since >= FLUSH_AFTER_S
        return n >= FLUSH_STATE_RECORDS or self.clock() - self.started >= FLUSH_STATE_AFTER_S

    def state_due(self) -> bool:
        """Are deferred table writes to be flushed now (``DEFER_STATE_RECORDS``,
        ``deferred.after_s``)?"""
        if not self.deferred:
            return False
        return (
            len(self.deferred) + len(self.unacked) >= DEFER_STATE_RECORDS
            or self.clock() - self.deferred.since >= self.deferred.after_s
        )

    def time_left(self) -> float:
        """Seconds until the batch (or its deferred table writes) is due by its time bound (0:
        due, or empty)."""
        left: list[float] = []
        if self.deferred:
            left.append(max(0.0, self.deferred.after_s - (self.clock() - self.deferred.since)))
        if self.unacked:
            if self.waited_on_since is not None:
                left.append(max(0.0, FLUSH_AFTER_S - (self.clock() - self.waited_on_since)))
            else:
                left.append(max(0.0, FLUSH_STATE_AFTER_S - (self.clock() - self.started)))
        return min(left) if left else 0.0

    async def flush(self, keep_state: bool = False) -> None:
        """Land the batch (tables and outputs), then ack its messages once Kafka has it all.

        With ``keep_state`` (the pipeline is behind the broker), unless the deferred table writes
        are due (:meth:`state_due`) or never wait (``deferred.after_s`` 0), only the batch's outputs
        are flushed: its table writes keep waiting, and its messages are acked with the flush that
        takes them. A record whose outputs
        went out before its state is read again after a crash or a rebalance, from the state it
        was first processed on: its outputs come back identical.

        The messages and the pending writes are taken together, with no pause between (the writes'
        own flush takes them before its first await): whatever a rebalance drops meanwhile
        (:meth:`discard`) is not acked, and is read again."""
        if self.closed:
            self.discard()  # the worker stops: read again by the partitions' next owners
            return
        if self.delivery.producer is None or self.delivery.ack is None:
            raise RuntimeError("the shell has no producer yet")
        async with self.flushing:
            generation = self.generation
            keep = keep_state and self.deferred.after_s > 0 and not self.state_due()
            if keep and not self.unacked:
                return  # nothing new: the deferred table writes are not due yet
            messages, self.unacked = self.unacked, []
            self.waited_on_since = None
            tally, self.tally = self.tally, BatchTally()
            started = time.monotonic()
            flush_at = time.time()
            try:
                futures = await self.writes.flush_behind(self.delivery.producer(), tables=not keep)
            except (KafkaError, OSError) as exc:  # the producer refused the batch (closed, timed out)
                await self._lost(exc)
                raise
        tally.sent_at = (flush_at, time.time())
        done = _Flushed([], len(messages), sum(tally.inputs.values()), tally, started, generation)
        if keep:
            if generation == self.generation:
                if not self.deferred:
                    self.deferred.since = self.clock()
                self.deferred.messages += messages
                self.deferred.futures += futures
                self.deferred.inputs += done.inputs
        else:
            if generation == self.generation:
                messages = self.deferred.messages + messages
                futures = self.deferred.futures + futures
                done.inputs += self.deferred.inputs
            self.deferred.clear()
            done.acked = messages
        if not futures:
            self._delivered(done)
        else:
            task = asyncio.ensure_future(self._ack_when_delivered(futures, done))
            self.acking.add(task)
            task.add_done_callback(self.acking.discard)

    async def _ack_when_delivered(self, futures: list[Any], done: _Flushed) -> None:
        try:
            await asyncio.gather(*futures)
        except (KafkaError, OSError) as exc:  # a delivery failed after the producer's own retries
            await self._lost(exc)
            return
        self._delivered(done)

    def _delivered(self, done: _Flushed) -> None:
        assert self.delivery.ack is not None
        if done.generation == self.generation and done.acked:
            self.delivery.ack(done.acked)
        # another generation: delivered across a rebalance; faust restarts from the committed
        # offsets, so the records are read again (their outputs come back identical from the
        # state): acking them now would commit past records this generation has not been given yet
        if self.delivery.metrics is not None:
            acked_inputs = done.inputs if done.acked else 0
            self.delivery.metrics.delivered(
                done.tally, done.records, time.monotonic() - done.started, time.time(), acked_inputs
            )

    async def _lost(self, exc: BaseException) -> None:
        if self.closed:
            log.warning(
                "guardian: stopping; a batch handed over before the stop was not delivered (%r): "
                "its records were not committed and are read again",
                exc,
            )
            return
        log.critical("guardian: a batch of outputs or table changes was not delivered: %r", exc)
        if self.delivery.on_lost is not None:
            await self.delivery.on_lost(exc)

    def discard(self) -> None:
        """A rebalance: a new generation, and what was processed and not flushed is forgotten
        (nothing of it left the worker)."""
        self.generation += 1
        self.unacked.clear()
        self.deferred.clear()
        self.waited_on_since = None
        self.tally = BatchTally()
        self.writes.discard()

    async def close(self, timeout_s: float = SETTLE_TIMEOUT_S) -> None:
        """The worker stops, its consumer out of the group: what was processed and not flushed is
        dropped (not acked, so read again by the partitions' next owners, as after a rebalance),
        nothing is flushed from now on (faust stops the producer before it cancels the worker's
        tasks and timers: a flush in between crashed a worker stopped by SIGTERM), and the batches
        handed over so far are waited for, as at a revocation (:meth:`settle`)."""
        self.discard()
        self.closed = True
        if not await self.writes.settle(timeout_s):
            log.warning("guardian: stopping; batches handed over were not delivered within %.0f s", timeout_s)

    async def settle(self, timeout_s: float = SETTLE_TIMEOUT_S) -> None:
        """Partitions are being taken away: wait until every batch flushed so far is delivered,
        before the rebalance goes on.

        Their next owner rebuilds the tables from the changelogs as they stand when it starts, then
        reads again the records not committed. A batch still on its way then would be seen in
        part (e.g. a device's state that applied a record, without the record's dedup key: its
        duplicate would be taken for new) or land after the new owner's own writes, and the
        records read again would meet another state than the one they were processed on: other
        outputs (timeline numbering, decisions). faust's own revocation flushes only what the
        producer holds, not the batches still queued behind the stream. A worker whose batches are
        not delivered within ``timeout_s`` stops (``delivery.on_lost``)."""
        if await self.writes.settle(timeout_s):
            return
        await self._lost(TimeoutError(f"flushed batches not delivered {timeout_s:.0f} s after a revocation"))


def waited_on(out: Out) -> bool:
    """Does someone wait for this output as soon as it is made (a decision, a dispatch, a timeline
    entry of an experience's story), rather than only for it to be there eventually (a drop entry,
    a dead letter)?"""
    kind = out.kind
    return kind in WAITED_ON_KINDS or (kind == "timeline" and out.value.get("stage") != "drop")
