"""The pipeline's faust glue: it moves records between Kafka, the tables and the functional core.

faust consumes the four input topics and the internal ``control`` topic (all co-partitioned by
``device_id``) as a consumer group, and its conductor hands their messages to the shell's inbox
(``streams.seam.batch_conductor.BatchConductor``; faust keeps assignment, fetching, flow control, acks and
commits). The ``guardian.pipeline`` task (:class:`PipelineTask`) drains the inbox in batches: each
record goes through the per-device merge of the input topics (``pipeline.order.DeviceMerge``),
then :class:`pipeline.runner.Processor` over :class:`tables.store.faust_tables.FaustStore` (the
record's partition of it, ``store.at(partition)``), whose writes and the outputs collect in
:class:`tables.store.writes.PendingWrites`. When the inbox is empty (or the batch is due) the
batch is flushed: RocksDB first, then one Kafka batch per changelog and output topic-partition on
faust's own producer; the batch's messages are acked once
all of it is delivered (:class:`CommitBatch`, the commit protocol), so an offset is never committed
ahead of what it caused. A crash replays records whose outputs may already be out: their IDs derive
from their causes, and the device's state remembers the outputs of its uncommitted records, so a
replay reproduces the same records.

Two timers (:class:`QuietDevices` and the sweep) turn wall-clock time into records on ``control``
(so their effects happen in stream context, durably and in order with the device's records):

- ``confirm``: a quiet device's pending debounce change whose window has passed
  (docs/CONTRACTS.md §4.3 step 7), or its plan's precondition deadline (§9.4);
- ``sweep``: prune dedup keys older than the dedup window, one partition at a time.

With an asynchronous decision backend (Gemini), promoted triggers go to
:class:`streams.lanes.Lanes`, which decides per device without blocking the stream and
writes each verdict back as a ``verdict`` record on ``control``.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiokafka.errors import KafkaError

from pipeline.order import DeviceMerge
from pipeline.runner import Processed, Processor
from streams.claims import ClaimsReader
from streams.metrics import BatchTally, GuardianMetrics
from streams.seam.batch_acks import ack_all
from streams.seam.reads import aiokafka_producer, committed_offsets, set_producer_buffer
from streams.seam.recovery import RecoveryWatch
from streams.seam.spinner import restore_log_level
from supervisor.verdict import Verdict
from tables.state import Trigger
from tables.store.faust_tables import SEP, FaustStore, GuardianTables
from tables.store.writes import PendingWrites
from topics.envelope import Coords, Out
from topics.gate import Admitted, Rejected
from topics.names import INPUT_SUFFIXES, TopicNames
from topics.outbound import Cause, encode_output
from topics.records import ExperiencePlan

log = logging.getLogger(__name__)

#: how long the merge holds a device's record for another topic of its partition (docs/CONTRACTS.md
#: §2 rule 11), counted on the pipeline's idle time only (``PipelineShell.merge_clock``)
MERGE_MAX_HOLD_S = 10.0
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
#: between flushes, the pipeline gives the event loop a turn after this much work (the fetcher,
#: the producer's sender and the acks run meanwhile); frequent flushes would cost throughput (one
#: produce request per flush), frequent turns cost almost nothing
YIELD_EVERY_S = 0.01
#: records the merge releases at a time, the pipeline's turns in between (slices of a whole batch,
#: 2,000 plans released after a hold, kept the event loop for over a second, docs/PERFORMANCE.md)
MERGE_SLICE = 100
#: messages the inbox takes before faust's fetcher waits
INBOX_MAX = 10_000
PRODUCER_BUFFER_MESSAGES = 20_000
MERGE_TICK_S = 0.05
CONFIRM_EVERY_S = 0.2
SWEEP_EVERY_S = 60.0
#: records past the next one skipped after a seek back to it before the worker seeks again (what
#: was fetched before the seek, in faust's fetch loop and the inbox, is fewer)
REREAD_SKIP_MAX = 4 * INBOX_MAX
#: the timers ``register_agents`` declares
TIMERS = ("guardian.merge", "guardian.positions", "guardian.confirm", "guardian.sweep", "guardian.gc")
#: the cyclic garbage collector's view of the long-lived state (see ``YoungOnlyCollector``)
GC_FREEZE_EVERY_S = 5.0
GC_FULL_EVERY_S = 600.0
SWEEP_MAX_DELETES = 20_000
SWEEP_MAX_SCAN = 100_000
#: a sweep goes through its dedup keys this many at a time (about 1-2 ms on a free core), the
#: pipeline's records and the event loop's other work in between (a partition's whole scan at once
#: stopped the stream for up to a quarter of a second per partition, docs/PERFORMANCE.md)
SWEEP_SLICE_SCAN = 500
#: device-table keys the rescan after an assignment goes through per slice, with the event loop's
#: turns between slices (a whole rescan decoded every device entry at once: 0.5-2.7 s of stall per
#: assignment at 10,000 devices)
RESCAN_SLICE = 100
#: how long a worker giving up partitions waits for its flushed batches to be delivered before it
#: stops instead (their next owner must not rebuild the tables from half of a batch)
SETTLE_TIMEOUT_S = 30.0

VerdictSink = Callable[[str, int, Trigger, int], None]


@dataclass
class Sweep:
    """A sweep of one partition's dedup keys under way (``PipelineShell.sweep``): the clock it
    judges by, where it goes on from (None: the beginning) and what it may still scan and delete."""

    now_ms: int
    cursor: bytes | None
    scan_left: int = SWEEP_MAX_SCAN
    deletes_left: int = SWEEP_MAX_DELETES


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
class CommitBatch:
    """The commit protocol: the messages processed since the last flush, whose table writes and
    outputs wait in ``writes``, and their tally.

    A flush (:meth:`flush`, one at a time) takes the messages and their writes in the same instant,
    writes RocksDB at once and hands the batch to the producer behind the stream; the messages are
    acked (released to faust's consumer, which commits) only once Kafka has every batch of it, and
    only if no rebalance came meanwhile (``generation``). A delivery that fails after the
    producer's retries stops the worker (``on_lost``: its input is then read again). Behind the
    broker a flush may send only the outputs, the table writes waiting (``deferred``): those
    messages are acked with the later flush that takes the table writes. A rebalance drops what
    was not flushed, and the table writes that waited (:meth:`discard`)."""

    writes: PendingWrites
    #: the worker's Prometheus metrics (None: not counted, e.g. unit tests)
    metrics: GuardianMetrics | None = None
    #: the running aiokafka producer (faust's own, so its flush before a commit covers our batches;
    #: the experience claims go out on it too)
    producer: Callable[[], Any] | None = None
    #: releases delivered messages to faust's consumer (their offsets may then be committed)
    ack: Callable[[list[Any]], None] | None = None
    #: called when a batch could not be delivered (the worker must stop: its input is not acked)
    on_lost: Callable[[BaseException], Any] | None = None
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
    #: messages whose outputs are flushed while their table writes still wait (``flush`` with
    #: ``keep_state``), the delivery futures of those outputs, and how many of the messages are
    #: input records (the throughput the worker's trace reports, once they are acked)
    deferred: list[Any] = field(default_factory=list)
    deferred_futures: list[Any] = field(default_factory=list)
    deferred_inputs: int = 0
    #: when the first of ``deferred`` was flushed (monotonic)
    deferred_since: float = 0.0
    #: how long table writes may wait behind a backlog (``DEFER_STATE_AFTER_S``; 0: they never wait)
    defer_state_s: float = DEFER_STATE_AFTER_S

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
        ``defer_state_s``)?"""
        if not self.deferred:
            return False
        return (
            len(self.deferred) + len(self.unacked) >= DEFER_STATE_RECORDS
            or self.clock() - self.deferred_since >= self.defer_state_s
        )

    def time_left(self) -> float:
        """Seconds until the batch (or its deferred table writes) is due by its time bound (0:
        due, or empty)."""
        left: list[float] = []
        if self.deferred:
            left.append(max(0.0, self.defer_state_s - (self.clock() - self.deferred_since)))
        if self.unacked:
            if self.waited_on_since is not None:
                left.append(max(0.0, FLUSH_AFTER_S - (self.clock() - self.waited_on_since)))
            else:
                left.append(max(0.0, FLUSH_STATE_AFTER_S - (self.clock() - self.started)))
        return min(left) if left else 0.0

    async def flush(self, keep_state: bool = False) -> None:
        """Land the batch (tables and outputs), then ack its messages once Kafka has it all.

        With ``keep_state`` (the pipeline is behind the broker), unless the deferred table writes
        are due (:meth:`state_due`) or never wait (``defer_state_s`` 0), only the batch's outputs
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
        if self.producer is None or self.ack is None:
            raise RuntimeError("the shell has no producer yet")
        async with self.flushing:
            generation = self.generation
            keep = keep_state and self.defer_state_s > 0 and not self.state_due()
            if keep and not self.unacked:
                return  # nothing new: the deferred table writes are not due yet
            messages, self.unacked = self.unacked, []
            self.waited_on_since = None
            tally, self.tally = self.tally, BatchTally()
            started = time.monotonic()
            flush_at = time.time()
            try:
                futures = await self.writes.flush_behind(self.producer(), tables=not keep)
            except (KafkaError, OSError) as exc:  # the producer refused the batch (closed, timed out)
                await self._lost(exc)
                raise
        tally.sent_at = (flush_at, time.time())
        done = _Flushed([], len(messages), sum(tally.inputs.values()), tally, started, generation)
        if keep:
            if generation == self.generation:
                if not self.deferred:
                    self.deferred_since = self.clock()
                self.deferred += messages
                self.deferred_futures += futures
                self.deferred_inputs += done.inputs
        else:
            if generation == self.generation:
                messages = self.deferred + messages
                futures = self.deferred_futures + futures
                done.inputs += self.deferred_inputs
            self.deferred, self.deferred_futures, self.deferred_inputs = [], [], 0
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
        assert self.ack is not None
        if done.generation == self.generation and done.acked:
            self.ack(done.acked)
        # another generation: delivered across a rebalance; faust restarts from the committed
        # offsets, so the records are read again (their outputs come back identical from the
        # state): acking them now would commit past records this generation has not been given yet
        if self.metrics is not None:
            acked_inputs = done.inputs if done.acked else 0
            self.metrics.delivered(
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
        if self.on_lost is not None:
            await self.on_lost(exc)

    def discard(self) -> None:
        """A rebalance: a new generation, and what was processed and not flushed is forgotten
        (nothing of it left the worker)."""
        self.generation += 1
        self.unacked.clear()
        self.deferred, self.deferred_futures, self.deferred_inputs = [], [], 0
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
        not delivered within ``timeout_s`` stops (``on_lost``)."""
        if await self.writes.settle(timeout_s):
            return
        await self._lost(TimeoutError(f"flushed batches not delivered {timeout_s:.0f} s after a revocation"))


@dataclass
class PipelineShell:
    """The per-app state of the shell (never module-global): store, pending confirmations, topics."""

    processor: Processor
    names: TopicNames
    tables: GuardianTables
    store: FaustStore
    #: output kind ("decisions", "dispatch", "timeline", "deadletter") -> topic name
    out_topics: dict[str, str]
    control_topic: Any
    #: device -> (partition, due receive-time ms) of its earliest pending debounce change
    pending_confirm: dict[str, tuple[int, int]] = field(default_factory=dict)
    #: partition -> latest Kafka timestamp processed (the partition's receive-time clock)
    stream_time: dict[int, int] = field(default_factory=dict)
    #: partition -> the dedup key the next sweep goes on from (a sweep scans a bounded slice)
    sweep_cursor: dict[int, bytes] = field(default_factory=dict)
    #: partition -> its sweep under way, gone through a slice at a time (``continue_sweep``)
    sweeping: dict[int, Sweep] = field(default_factory=dict)
    #: the rescan after an assignment under way: partition -> the key it goes on from (None: the
    #: partition's first), gone through a slice at a time (:meth:`continue_rescan`)
    rescanning: dict[int, bytes | None] = field(default_factory=dict)
    #: devices whose records were processed since the rescan began: what they left in
    #: ``pending_confirm`` is newer than the store's entry the rescan may still read
    rescan_touched: set[str] = field(default_factory=set)
    #: partition -> wall-clock seconds (monotonic) of the last record processed
    last_activity: dict[int, float] = field(default_factory=dict)
    #: an asynchronous decider: (device_id, partition, trigger, etag) -> None
    submit: VerdictSink | None = None
    processed: int = 0
    merger: DeviceMerge[Any] = field(default_factory=lambda: DeviceMerge(INPUT_SUFFIXES, MERGE_MAX_HOLD_S))
    #: (suffix, partition) -> the next offset this worker will see (the last one given to the merge
    #: + 1) since the last rebalance
    next_offset: dict[tuple[str, int], int] = field(default_factory=dict)
    #: (suffix, partition) -> where faust's fetch restarted, for those with no record seen yet
    #: (``learn_positions``)
    start_offset: dict[tuple[str, int], int] = field(default_factory=dict)
    #: (suffix, partition) -> the offset of the record the pipeline is to be handed next since the
    #: last rebalance (:meth:`in_order`), and the last jump past it it read the partition again for
    read_next: dict[tuple[str, int], int] = field(default_factory=dict)
    read_again: dict[tuple[str, int], tuple[int, int, int]] = field(default_factory=dict)
    consumer: Any = None
    sweep_every_s: float = SWEEP_EVERY_S
    #: how long table writes may wait behind a backlog (``CommitBatch.defer_state_s``)
    defer_state_s: float = DEFER_STATE_AFTER_S
    tp_factory: Callable[[str, int], Any] | None = None
    #: when the pipeline last gave the event loop a turn (monotonic)
    yielded_at: float = 0.0
    #: seconds the pipeline spent waiting for input, and since when it waits now (``merge_clock``)
    waited_s: float = 0.0
    waiting_since: float | None = None
    #: messages handed over by faust's conductor, not processed yet
    inbox: list[Any] = field(default_factory=list)
    inbox_ready: asyncio.Event = field(default_factory=asyncio.Event)
    inbox_room: asyncio.Event = field(default_factory=asyncio.Event)
    #: the worker's Prometheus metrics (None: not counted, e.g. unit tests)
    metrics: GuardianMetrics | None = None
    #: the worker's readiness (``streams.health.Readiness``; None outside a worker)
    readiness: Any = None
    #: the experience claims (``streams.claims``): a plan goes through the merge only once its
    #: experience's owner is settled in the claims log (None: no claims, the owner index alone
    #: decides, e.g. unit tests)
    claims: ClaimsReader | None = None
    #: (partition, offset) of a plan in the merge -> (its experience, its device, its receive time)
    claimed: dict[tuple[int, int], tuple[str, str, int]] = field(default_factory=dict)
    #: (partition, offset) of a plan the gate judged on its way into the merge (:meth:`claim`) ->
    #: that verdict, taken by its processing instead of admitting the plan a second time (a record
    #: at a plans offset never changes; forgotten when processed or on a rebalance)
    admitted_plans: dict[tuple[int, int], Admitted | Rejected] = field(default_factory=dict)
    #: the batch being built and its commit protocol (over the store's pending writes)
    batch: CommitBatch = field(init=False)
    #: (suffix, partition) -> :meth:`caught_up`'s answer, kept until the pipeline's next turn of the
    #: event loop (:meth:`new_turn`) or a record of that topic-partition entering the merge: the
    #: merge asks for every record it releases, and what the answer depends on (high watermarks,
    #: where faust's fetch restarts) moves between turns; a record released on a kept answer is one
    #: the pipeline could have released when the answer was found
    caught_now: dict[tuple[str, int], bool] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.batch = CommitBatch(self.store.writes, metrics=self.metrics, defer_state_s=self.defer_state_s)

    def caught_up(self, suffix: str, partition: int) -> bool:
        """Has this worker seen every record of the topic-partition up to its high watermark?"""
        if self.consumer is None or self.tp_factory is None:
            return True
        tp = self.tp_factory(self.names.prefix + suffix, partition)
        try:
            highwater = self.consumer.highwater(tp)
        except (KeyError, AssertionError, AttributeError):
            return False  # unknown (e.g. reconnecting to a restarted broker): not safe to go past it
        if highwater is None:
            return False
        seen = self.next_offset.get((suffix, partition))
        if seen is None:
            seen = self.start_offset.get((suffix, partition))
        return seen is not None and seen >= highwater

    def caught_up_now(self, suffix: str, partition: int) -> bool:
        """:meth:`caught_up`, as found since the pipeline's last turn (``caught_now``)."""
        key = (suffix, partition)
        known = self.caught_now.get(key)
        if known is None:
            known = self.caught_now[key] = self.caught_up(suffix, partition)
        return known

    def behind(self) -> bool:
        """Are records of an input topic-partition of this worker on the broker (or fetched) that
        the merge has not been given yet (more input is on its way)?"""
        keys = self.next_offset.keys() | self.start_offset.keys()
        return any(not self.caught_up_now(suffix, partition) for suffix, partition in keys)

    def new_turn(self) -> None:
        """The pipeline is back from a turn of the event loop: what it knew may have moved."""
        self.caught_now.clear()

    async def in_order(self, suffix: str, message: Any) -> bool:
        """Is ``message`` the next record of its topic-partition (since the last rebalance: the
        one at the committed offset, or the log's beginning when nothing is committed)? Only such
        a record is processed: every record is processed once, in the log's order, and none is
        acked (then committed) before those before it.

        faust's fetch loop hands over what its read offset lets through, and around a rebalance
        that offset can be ahead of what the pipeline was given (records fetched before the
        rebalance and dropped with the inbox, or read while the partitions were sought back): the
        pipeline was then handed records past ones it never saw, and the commit passed them (in
        ``guardian bench``'s scale-out part, up to 1,250 records of a partition neither processed
        nor dead-lettered). A record before the next one was seen already in this assignment and
        is skipped. A record past it is not processed: the partition is sought back to the next
        one and read again from there (``guardian_input_reread_total``, and a log line); should
        the same record come first again, the log has no records in between (transaction
        markers, compaction) and the pipeline goes on from it, the offsets between counted as
        acked."""
        key = (suffix, int(message.partition))
        offset = int(message.offset)
        expected = self.read_next.get(key)
        if expected is None:
            generation = self.batch.generation
            expected = await self.first_offset(message.topic, key[1])
            if generation != self.batch.generation:
                return False  # a rebalance came meanwhile: read again by the partition's owner
            if expected is None:  # not known (no consumer): the record starts the partition's order
                expected = offset
        if offset == expected:
            self.read_next[key] = offset + 1
            self.read_again.pop(key, None)
            return True
        if offset < expected:
            return False  # handed over again (read again after a seek): processed already
        tp = self.tp_factory(message.topic, key[1]) if self.tp_factory is not None else None
        again = self.read_again.get(key)
        if again is not None and again[0] == expected and offset != again[1]:
            # fetched before the seek back to ``expected``: the records read again come after it
            skipped = again[2] + 1
            self.read_again[key] = (expected, again[1], skipped)
            if skipped <= REREAD_SKIP_MAX:
                return False
            again = None  # the records read again never came: seek again
        if again is not None and again[:2] == (expected, offset):
            log.warning(
                "guardian: %s:%d has no records from offset %d to %d (transaction markers or "
                "compaction); going on from %d",
                suffix,
                key[1],
                expected,
                offset - 1,
                offset,
            )
            self.read_next[key] = offset + 1
            del self.read_again[key]
            if tp is not None and hasattr(self.consumer, "add_log_gap"):
                await self.consumer.add_log_gap(tp, expected, offset - 1)
            return True
        self.read_again[key] = (expected, offset, 0)
        if again is None or again[0] != expected:
            # once per place read again from: records fetched before it keep coming until the
            # fetch from it arrives, each sought back again (faust's fetch loop moves its read
            # offset past the place with each of them)
            log.warning(
                "guardian: %s:%d handed over offset %d while %d is next (fetched before a "
                "rebalance); reading the partition again from %d",
                suffix,
                key[1],
                offset,
                expected,
                expected,
            )
            if self.metrics is not None:
                self.metrics.input_reread.inc()
        if tp is not None and self.consumer is not None:
            try:
                # in the consumer's own thread (faust's ``seek`` calls the client from this one,
                # racing its fetcher: a KeyError in aiokafka's fetched records stopped a worker)
                await self.consumer.seek_wait({tp: expected})
            except (KafkaError, TimeoutError) as exc:  # e.g. the partition was taken away meanwhile
                log.warning("guardian: %s:%d could not be read again (%r)", suffix, key[1], exc)
                self.read_again.pop(key, None)  # the next record past it tries again
        return False

    async def first_offset(self, topic: str, partition: int) -> int | None:
        """Where this assignment's reading of a topic-partition begins: its committed offset (as
        faust's seek found it, else as the broker has it now: faust's fetch loop may hand records
        over before that seek), or the log's beginning when nothing is committed; None when not
        known (no consumer, or the broker did not answer: then the first record handed over is
        taken for it)."""
        consumer = self.consumer
        if consumer is None or self.tp_factory is None:
            return None
        tp = self.tp_factory(topic, partition)
        offset = committed_offsets(consumer).get(tp)
        try:
            if offset is None and hasattr(consumer, "broker_committed"):
                offset = await consumer.broker_committed(tp)
            if offset is not None:
                return int(offset)
            earliest = await consumer.earliest_offsets(tp)
        except KafkaError as exc:
            log.warning("guardian: the beginning of %s is not known (%r): reading on from here", tp, exc)
            return None
        first = earliest.get(tp)
        return None if first is None else int(first)

    async def learn_positions(self) -> None:
        """Where this worker stands in each input topic-partition it has not seen a record of
        since the last rebalance: the offset faust's fetch restarts from (its committed offset, or
        the log's beginning when nothing is committed), kept in ``start_offset``.

        Never the consumer's fetch position: it counts records faust has fetched but the merge has
        not been given yet (in the inbox, or in the batch the pipeline is working through), and
        taking it for "seen" let a later record of another topic go before them."""
        consumer = self.consumer
        if consumer is None or self.tp_factory is None:
            return
        committed = committed_offsets(consumer)
        for tp in list(consumer.assignment()):
            suffix = self.names.suffix_of(tp.topic)
            key = (str(suffix), int(tp.partition))
            if suffix not in INPUT_SUFFIXES or key in self.next_offset:
                continue
            offset = committed.get(tp)
            if offset is None:  # nothing committed (faust also keeps a committed 0 as None)
                if key in self.start_offset:
                    continue  # the log's beginning is known already
                try:
                    high = consumer.highwater(tp)
                except (KeyError, AssertionError, AttributeError):
                    continue  # not fetched yet: not caught up anyway
                if high is None:
                    continue
                try:
                    # an empty log (high watermark 0): nothing to wait for
                    offset = (await consumer.earliest_offsets(tp)).get(tp) if high else 0
                except KafkaError as exc:  # asked again at the next tick; until then not caught up
                    log.debug("guardian: the beginning of %s is not known yet: %r", tp, exc)
                    continue
            if offset is not None and key not in self.next_offset:
                # a lower bound of the next record faust hands over: it only moves up
                self.start_offset[key] = max(self.start_offset.get(key, 0), int(offset))

    def emit(
        self, outs: list[Out], trigger_received_ms: int | None = None, cause: Cause | None = None
    ) -> None:
        """Hand ``outs`` (built from ``cause``) to the batch; an output Kafka would refuse goes as
        its ``output_invalid`` dead letter instead (:func:`topics.outbound.encode_output`)."""
        send = self.store.writes.send
        sent = [encode_output(out, cause) for out in outs]
        for enc in sent:
            if enc.refused is not None:
                v = enc.out.value
                log.error("guardian: %s[%s]@%s: %s (sent as its dead letter)", v["source_topic"],
                          v["partition"], v["offset"], enc.refused)  # fmt: skip
            send(self.out_topics[enc.out.kind], enc.key, enc.value)
            if waited_on(enc.out):
                self.batch.waited_on()
        if self.metrics is not None and outs:
            self.batch.tally.outs([enc.out for enc in sent], trigger_received_ms)

    async def receive(self, message: Any) -> None:
        """A message from faust's conductor (input topics and ``control``): into the inbox; waits
        while the inbox is full (faust's fetcher then waits too, or drops it on a rebalance)."""
        self.inbox.append(message)
        self.inbox_ready.set()
        if self.metrics is not None and self.metrics.trace is not None:
            self.metrics.trace.received(message)
        if len(self.inbox) >= INBOX_MAX:
            self.inbox_room.clear()
            await self.inbox_room.wait()

    async def take_turns(self) -> None:
        """Flush a due batch; else give the event loop a turn if the pipeline has not for a while."""
        if self.batch.due():
            await self.flush(keep_state=True)  # more input to process: the table writes may wait
        elif time.monotonic() - self.yielded_at >= YIELD_EVERY_S:
            await self.give_turn()

    async def give_turn(self) -> None:
        """Give the event loop a turn (what the pipeline knew may move meanwhile)."""
        self.yielded_at = time.monotonic()
        await asyncio.sleep(0)
        self.new_turn()

    def merge_clock(self) -> float:
        """The clock the merge's hold runs on: the seconds the pipeline has spent waiting for input
        with nothing to process.

        The hold bounds how long a fetch that stalls can hold back the other topics of a partition.
        A pipeline working through a backlog is no such stall: the awaited topic's records are
        behind the backlog (fetched, or on the broker while the inbox is full), and releasing by the
        wall clock then let, say, a device's ``security.started`` go before its plan on a worker
        slowed down (its evidence lost, the device's timeline other than the replay's). On this
        clock a record is held, in order, for as long as the pipeline has other work."""
        if self.waiting_since is None:
            return self.waited_s
        return self.waited_s + time.monotonic() - self.waiting_since

    async def wait_for_input(self, timeout_s: float | None = None) -> bool:
        """Wait until the inbox has messages (False: ``timeout_s`` passed first); the time waited
        runs the merge's clock."""
        if self.inbox_ready.is_set():
            return True
        self.waiting_since = time.monotonic()
        try:
            if timeout_s is None:
                await self.inbox_ready.wait()
                return True
            try:
                async with asyncio.timeout(timeout_s):
                    await self.inbox_ready.wait()
                return True
            except TimeoutError:
                return False
        finally:
            self.waited_s = self.merge_clock()
            self.waiting_since = None

    def take_inbox(self) -> list[Any]:
        batch, self.inbox = self.inbox, []
        self.inbox_ready.clear()
        self.inbox_room.set()
        return batch

    async def flush(self, keep_state: bool = False) -> None:
        """Flush the batch (:meth:`CommitBatch.flush`; ``keep_state``: the pipeline is behind, its
        table writes may wait), then give the event loop its turn: the batch went to the producer
        without a pause, and a backlog is processed batch after batch, so without this the
        fetcher, the producer's sender and the acks would wait for the whole backlog (seconds of
        stalls, measured)."""
        await self.batch.flush(keep_state)
        await self.give_turn()

    def rebalanced(self) -> None:
        """Partitions move (revoked, or assigned): what this worker received, held or processed and
        did not flush is forgotten (being unacked, it is read again by whoever owns its partition
        next), and so is what it knew of the partitions' positions and states."""
        self.store.clear_cache()
        self.merger.drain()
        self.sweeping.clear()
        self.rescanning.clear()
        self.rescan_touched.clear()
        self.claimed.clear()
        self.admitted_plans.clear()
        self.drop_unflushed()
        self.next_offset.clear()
        self.start_offset.clear()
        self.read_next.clear()
        self.read_again.clear()
        self.new_turn()

    async def revoked(self) -> None:
        """Partitions are taken away: :meth:`rebalanced`, then the rebalance waits until every batch
        this worker flushed is delivered (:meth:`CommitBatch.settle`): the partitions' next owner
        rebuilds their tables from the changelogs and must find all of it there."""
        self.rebalanced()
        await self.batch.settle()

    def drop_unflushed(self) -> None:
        """Forget received and processed, unflushed records (a rebalance): nothing of them left the
        worker, and being unacked they are read again by whoever owns their partition next."""
        self.batch.discard()
        self.take_inbox()

    def claim(self, msg: Any) -> None:
        """A plan entering the merge: if the gate admits it and no claim on its experience has been
        read yet, its claim goes to the claims log now (no wait here), and the plan stays in the
        merge until a claim on it is read back (:meth:`unsettled`). The merge keeps its device's
        later records behind it, and nothing popped waits for Kafka."""
        if self.claims is None:
            return
        at = round(msg.timestamp * 1000)
        verdict = self.processor.gate.admit(
            "plans",
            msg.key,
            msg.value,
            source_topic=msg.topic,
            partition=int(msg.partition),
            offset=int(msg.offset),
            received_at_ms=at,
        )
        self.admitted_plans[(int(msg.partition), int(msg.offset))] = verdict
        if not isinstance(verdict, Admitted) or not isinstance(verdict.record, ExperiencePlan):
            return  # dead-lettered by the core: it claims nothing
        plan = verdict.record
        if self.claims.settled(plan.experience_id, plan.device_id):
            return
        producer = self.batch.producer
        if producer is None:
            raise RuntimeError("the shell has no producer yet")
        self.claimed[(int(msg.partition), int(msg.offset))] = (plan.experience_id, plan.device_id, at)
        self.claims.request(producer, plan.experience_id, plan.device_id, at)

    def unsettled(self, msg: Any) -> bool:
        """Must this record stay in the merge (a plan whose experience has no settled owner yet)?"""
        if not self.claimed or self.claims is None:
            return False
        key = (int(msg.partition), int(msg.offset))
        claim = self.claimed.get(key)
        if claim is None or self.names.suffix_of(msg.topic) != "plans":
            return False
        if self.claims.holds(self.batch.producer, *claim):
            return True
        del self.claimed[key]
        return False

    def track(self, done: Processed, partition: int) -> None:
        device_id = done.device_id
        if device_id is None:
            return
        if self.rescanning:
            self.rescan_touched.add(device_id)
        if done.next_due_ms is None:
            self.pending_confirm.pop(device_id, None)
        else:
            self.pending_confirm[device_id] = (partition, done.next_due_ms)
        if done.queued and self.submit is not None:
            for trigger in done.queued:
                self.submit(device_id, partition, trigger, done.etag)

    def handle(self, msg: Any) -> None:
        """One consumed message (the current event is already set by the caller)."""
        partition = int(msg.partition)
        received_at_ms = round(msg.timestamp * 1000)
        suffix = self.names.suffix_of(msg.topic)
        if suffix != "control":
            if received_at_ms > self.stream_time.get(partition, 0):
                self.stream_time[partition] = received_at_ms
            self.last_activity[partition] = time.monotonic()
        if suffix == "control":
            self.control(msg.value, Coords("control", partition, int(msg.offset)), received_at_ms)
            return
        if suffix is None:
            return
        offset = int(msg.offset)
        done = self.processor.process(
            self.store.at(partition),
            suffix,
            msg.key,
            msg.value,
            source_topic=msg.topic,
            partition=partition,
            offset=offset,
            received_at_ms=received_at_ms,
            admitted=self.admitted_plans.pop((partition, offset), None) if suffix == "plans" else None,
        )
        self.processed += 1
        if self.metrics is not None:
            self.batch.tally.inputs[suffix] += 1
            if self.metrics.trace is not None:
                self.batch.tally.trace(self.metrics.trace.handled(msg, done.outs))
        if done.outs:  # most records (state-only observations) have none: no cause to build
            cause = Cause(msg.topic, partition, offset, msg.value, received_at_ms)
            self.emit(done.outs, received_at_ms, cause)
        self.track(done, partition)

    def control(self, raw: bytes, coords: Coords, received_at_ms: int) -> None:
        partition = coords.partition
        try:
            cmd = orjson.loads(raw)
        except orjson.JSONDecodeError:
            self._bad_control(coords, "not JSON")
            return
        if not isinstance(cmd, dict):
            self._bad_control(coords, "not a JSON object")
            return
        op = cmd.get("op")
        if op == "sweep":
            self.sweep(partition, received_at_ms)
            return
        try:
            if op == "confirm":
                device_id = str(cmd["device_id"])
                now_ms = int(cmd.get("now_ms", received_at_ms))
            elif op == "verdict":
                device_id = str(cmd["device_id"])
                trigger = Trigger.from_dict(cmd["trigger"])
                verdict = Verdict.from_dict(cmd["verdict"])
                etag = int(cmd["etag"])
                at_ms = int(cmd.get("at_ms", received_at_ms))
            else:
                self._bad_control(coords, f"unknown op {str(op)[:40]!r}")
                return
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            self._bad_control(coords, f"op {op!r} without a usable {exc}")
            return
        cause = Cause(self.names.control, partition, coords.offset, raw, received_at_ms)
        if op == "confirm":
            done = self.processor.confirm_quiet(self.store.at(partition), device_id, now_ms, coords)
            self.emit(done.outs, cause=cause)
        else:
            done = self.processor.apply(
                self.store.at(partition), device_id, trigger, verdict, etag, at_ms, coords
            )
            self.emit(done.outs, trigger.received_at_ms, cause)
        self.track(done, partition)

    def _bad_control(self, coords: Coords, why: str) -> None:
        """A control record Guardian cannot use (only Guardian writes them): skipped, with a log
        line and a count, never silently."""
        if self.metrics is not None:
            self.metrics.control_rejected.inc()
        log.error("guardian: skipped control record %s: %s", coords, why)

    def sweep(self, partition: int, now_ms: int) -> int:
        """Delete dedup keys of this partition older than the dedup window (bounded per call), on
        the partition's receive-time clock: the latest Kafka timestamp this worker processed there.

        The keys are gone through ``SWEEP_SLICE_SCAN`` at a time: the first slice now, the rest by
        :meth:`continue_sweep` (the pipeline calls it between its records), so a large partition's
        sweep never holds the stream up. Which keys go does not depend on when: a key older than
        the window on the sweep's clock can no longer make any record a duplicate.

        A partition with no record processed here yet has no clock, and is not swept: the sweep
        record's own timestamp is the wall clock of whichever worker sent it (possibly the
        partition's previous owner), and keys judged by it would go while records that find them
        duplicates are still to come (as after a rebalance, or on a replay of old records)."""
        self.tables.access.db(self.tables.seen, partition)  # no store: an error, not "nothing swept"
        clock = self.stream_time.get(partition)
        if clock is None:
            return 0
        under_way = self.sweeping.pop(partition, None)
        cursor = self.sweep_cursor.pop(partition, None)
        if under_way is not None:
            cursor = under_way.cursor  # a sweep record came before the last one was through
        self.sweeping[partition] = Sweep(min(now_ms, clock), cursor, SWEEP_MAX_SCAN, SWEEP_MAX_DELETES)
        return self._sweep_slice(partition)

    def continue_sweep(self) -> int:
        """The next slice of the sweep under way longest (:meth:`sweep`); how many keys it deleted."""
        if not self.sweeping:
            return 0
        return self._sweep_slice(next(iter(self.sweeping)))

    def _sweep_slice(self, partition: int) -> int:
        job = self.sweeping[partition]
        db = self.tables.access.db(self.tables.seen, partition)
        # a fresh iterator per slice: none is kept across the event loop's turns (a rebalance may
        # close the partition's store meanwhile, and ends the sweep: ``rebalanced``)
        items = db.items(from_key=job.cursor) if job.cursor is not None else db.items()
        scan = min(SWEEP_SLICE_SCAN, job.scan_left)
        window = self.processor.pipeline.dedup_window_ms
        expired, next_cursor = expired_dedup_keys(
            items, job.now_ms, window, max_scan=scan, max_delete=job.deletes_left
        )
        for key in expired:
            self.store.forget_seen(key, partition)
        job.deletes_left -= len(expired)
        job.scan_left -= scan
        if next_cursor is None:
            del self.sweeping[partition]  # through to the end
        elif job.scan_left <= 0 or job.deletes_left <= 0:
            del self.sweeping[partition]  # this sweep's bound: the next one goes on from here
            self.sweep_cursor[partition] = next_cursor
        else:
            job.cursor = next_cursor
        return len(expired)

    def rescan(self) -> None:
        """After table recovery: begin looking through the devices of this worker's partitions for
        a pending debounce change or a precondition deadline, to confirm when due; the slices are
        :meth:`continue_rescan`'s. (Triggers still waiting for an asynchronous decision are
        submitted again by ``streams.lanes`` on the same recovery.)"""
        self.rescanning = dict.fromkeys(self.store.device_partitions())
        self.rescan_touched.clear()

    def continue_rescan(self) -> int:
        """The rescan's next slice (``RESCAN_SLICE`` keys); how many due devices it found. A device
        whose record was processed since the rescan began keeps what that record left (its entry
        in the store may be older: not landed yet, or read before the record)."""
        if not self.rescanning:
            return 0
        partition, cursor = next(iter(self.rescanning.items()))
        found, next_cursor = self.store.due_devices_in(partition, cursor, RESCAN_SLICE)
        for device_id, due in found:
            if device_id not in self.rescan_touched:
                self.pending_confirm[device_id] = (partition, due)
        if next_cursor is None:
            del self.rescanning[partition]
            if not self.rescanning:
                self.rescan_touched.clear()
        else:
            self.rescanning[partition] = next_cursor
        return len(found)

    def due_confirmations(self, wall_ms: int, idle_s: float = 1.0) -> list[tuple[str, int, int]]:
        """Devices whose pending debounce change is due: (device, partition, now_ms to confirm at).

        The clock is the partition's receive-time clock (the latest Kafka timestamp processed
        there), so a worker catching up on old records confirms exactly where a replay would; a
        partition that has been idle for ``idle_s`` follows the wall clock (a quiet device)."""
        due: list[tuple[str, int, int]] = []
        mono = time.monotonic()
        for device_id, (partition, at) in self.pending_confirm.items():
            now_ms = self.stream_time.get(partition, 0)
            # a partition is quiet only when nothing of it waits: no record held back by the merge,
            # none fetched but not processed yet, none left on the broker (a worker starved of CPU
            # for a second is not a quiet device: its clock waits for those records); a device with
            # records held back is confirmed by them (the partition's clock may be past them)
            if self.merger.holds_device(partition, device_id.encode()):
                continue
            idle = (
                mono - self.last_activity.get(partition, 0.0) >= idle_s
                and not self.merger.holds(partition)
                and all(self.caught_up(suffix, partition) for suffix in INPUT_SUFFIXES)
            )
            if now_ms < at and idle:
                now_ms = max(now_ms, wall_ms)
            if at <= now_ms:
                due.append((device_id, partition, now_ms))
        for device_id, _, _ in due:
            del self.pending_confirm[device_id]
        return due

    def send_control(self, partition: int, key: str, cmd: dict[str, Any]) -> None:
        if self.batch.closed:
            return  # stopping: the partition's next owner asks again
        self.control_topic.send_soon(key=key.encode(), value=orjson.dumps(cmd), partition=partition)


class PipelineTask:
    """The ``guardian.pipeline`` task: drains the shell's inbox in batches, input records through
    the per-device merge (a plan claimed on its way in), and flushes when it has caught
    up with the inbox or a batch is due (:meth:`CommitBatch.due`), and gives the event loop its turns
    between; :meth:`release_held` (the ``guardian.merge`` timer)
    lets out what the merge held back."""

    def __init__(self, app: Any, shell: PipelineShell) -> None:
        self.app = app
        self.shell = shell
        self.merge_suffixes = set(INPUT_SUFFIXES)
        #: the task is working through what it took from the inbox (it flushes when done)
        self.busy = False

    def attach(self) -> None:
        """Take what only exists once the app runs: the consumer, its committed offsets, the
        producer, how a message is acked and what stops the worker."""
        from faust.types import TP

        app, shell, prefix = self.app, self.shell, self.shell.names.prefix
        consumer = app.consumer
        shell.consumer = consumer
        shell.tp_factory = TP
        shell.batch.producer = aiokafka_producer(app)
        known = committed_offsets(consumer)

        def committed(stream_key: str) -> int | None:
            suffix, _, partition = stream_key.rpartition(":")
            offset = known.get(TP(prefix + suffix, int(partition)))
            return None if offset is None else int(offset)

        def ack(messages: list[Any]) -> None:
            ack_all(consumer, messages)

        shell.store.committed = committed
        shell.batch.ack = ack
        shell.batch.on_lost = app.crash

    def run(self, message: Any) -> None:
        batch = self.shell.batch
        batch.open()
        self.shell.handle(message)
        batch.add(message)

    async def run_ready(self) -> None:
        """What the merge releases, in slices of ``MERGE_SLICE``: a merge releasing a long-held
        backlog at once is flushed as it goes, and the event loop has its turns between slices
        (each slice is popped and processed without a pause, so the merge's order holds)."""
        shell = self.shell
        while True:
            ready = shell.merger.pop_ready(
                shell.caught_up_now, shell.merge_clock(), limit=MERGE_SLICE, blocked=shell.unsettled
            )
            for message in ready:
                self.run(message)
            await shell.take_turns()
            if len(ready) < MERGE_SLICE:
                return

    async def loop(self) -> None:
        """The task's body."""
        self.attach()
        shell = self.shell
        if shell.metrics is not None and shell.metrics.trace is not None:
            shell.metrics.trace.start()
        while True:
            if shell.sweeping:
                # a slice of a dedup sweep per turn, before waiting for input (or between what
                # the pipeline takes from its inbox, when there is always more)
                shell.continue_sweep()
                await shell.give_turn()
                if not shell.inbox_ready.is_set():
                    continue
            deferred = shell.batch.time_left() if shell.batch.deferred else None
            if not await shell.wait_for_input(deferred):
                await shell.flush()  # no input came while table writes waited: they are due
                continue
            shell.new_turn()
            await self.work_through(shell.take_inbox())
            # natural batching: flush when the pipeline has caught up with what was fetched; while
            # more came meanwhile, the batch grows until it is due
            if len(shell.batch) and not shell.inbox:
                await self.flush_or_wait()

    async def flush_or_wait(self) -> None:
        """The pipeline has caught up with its inbox: flush, unless more input is on its way (the
        worker is behind the broker, e.g. working through a backlog) and the batch is not due yet;
        then it waits for that input, at most until the batch is due. (faust's fetcher hands over
        at most a hundred records per turn of the event loop: under a backlog, flushing whenever
        the inbox ran dry made batches of a few dozen records, a produce request each.)"""
        shell = self.shell
        left = shell.batch.time_left()
        behind = shell.behind()
        if left > 0 and behind:
            try:
                async with asyncio.timeout(left):
                    await shell.inbox_ready.wait()
                return  # more input came: the batch grows with it
            except TimeoutError:
                behind = shell.behind()  # due
        if len(shell.batch):
            await shell.flush(keep_state=behind)

    async def work_through(self, taken: list[Any]) -> None:
        """What was taken from the inbox, in order, through the merge (flushing what is due)."""
        shell = self.shell
        generation = shell.batch.generation
        read_next = shell.read_next
        self.busy = True
        try:
            for message in taken:
                if shell.batch.generation != generation:
                    break  # a rebalance came during a flush: the rest is read again after it
                suffix = shell.names.suffix_of(message.topic)
                if suffix is not None:
                    key = (suffix, message.partition)
                    if read_next.get(key) == message.offset:  # the common case: the next record
                        read_next[key] = message.offset + 1
                        if shell.read_again:
                            shell.read_again.pop(key, None)
                    elif not await shell.in_order(suffix, message):
                        continue
                    elif shell.batch.generation != generation:
                        break  # a rebalance came while the partition's start was asked for
                if suffix in self.merge_suffixes:
                    assert suffix is not None
                    self.merge(suffix, message)
                    await self.run_ready()
                else:
                    self.run(message)
                await shell.take_turns()
        finally:
            self.busy = False

    def merge(self, suffix: str, message: Any) -> None:
        """An input record into the merge (a plan claims its experience on its way in)."""
        shell = self.shell
        partition = int(message.partition)
        if shell.metrics is not None and shell.metrics.trace is not None:
            shell.metrics.trace.pushed(message)
        shell.next_offset[(suffix, partition)] = int(message.offset) + 1
        shell.caught_now.pop((suffix, partition), None)
        if suffix == "plans":
            shell.claim(message)
        ts, offset = round(message.timestamp * 1000), int(message.offset)
        late = shell.merger.push(suffix, partition, message.key, ts, offset, message, shell.merge_clock())
        if late and shell.metrics is not None:
            shell.metrics.late_arrivals.inc()

    async def release_held(self) -> None:
        """Let out what the merge held back; flush it when the pipeline is idle (else the pipeline
        flushes it with its own batch, when that is due or caught up)."""
        shell = self.shell
        if len(shell.merger) and shell.batch.ack is not None:
            shell.new_turn()
            await self.run_ready()
            if len(shell.batch) and (not (self.busy or shell.inbox) or shell.batch.due()):
                await shell.flush(keep_state=self.busy or bool(shell.inbox))


class QuietDevices:
    """The ``guardian.confirm`` timer: after table recovery it rescans the local devices once (per
    assignment), then asks, through ``control``, to confirm the devices whose pending change is due."""

    def __init__(self, shell: PipelineShell, recovery: RecoveryWatch) -> None:
        self.shell = shell
        #: whether the tables are recovered for the current assignment (faust's own ``completed``
        #: stays set from the first assignment on: a rescan right after a later one read the store
        #: before the partitions taken over were in it, and their devices' pending changes and
        #: precondition deadlines were never confirmed)
        self.recovery = recovery
        #: the local devices were rescanned since the last rebalance
        self.scanned = False

    async def confirm(self) -> None:
        shell = self.shell
        if not self.scanned and self.recovery.completed():
            self.scanned = True
            shell.rescan()
        while shell.rescanning:  # a slice at a time, the event loop's turns between
            shell.continue_rescan()
            await asyncio.sleep(0)
        for device_id, partition, now_ms in shell.due_confirmations(int(time.time() * 1000)):
            shell.send_control(
                partition, device_id, {"op": "confirm", "device_id": device_id, "now_ms": now_ms}
            )


class YoungOnlyCollector:
    """The ``guardian.gc`` timer. The state cache keeps ~10^6 long-lived objects whose replacements
    keep arriving, so Python's full collections came every few seconds and each stopped the stream
    (for how long: docs/PERFORMANCE.md) while finding almost nothing (the states are freed by
    reference counting). Freezing moves what exists now out of the collector's sight: collections
    scan only what is newer. Every ``GC_FULL_EVERY_S`` everything is collected once (one such
    pause).

    What survives a collection of the two young generations is frozen at once as well
    (:meth:`after_collection`): the oldest generation, which the collector scans whole, otherwise
    filled with up to ``GC_FREEZE_EVERY_S`` of survivors between two ticks (100-260 ms pauses under
    load, and again as often as it grew by a quarter: frozen objects do not count in that ratio).
    Right after such a collection the young generations are empty, so only objects that outlived
    it are frozen.

    :meth:`start` runs when the worker starts (an app task): the timer's first tick comes
    ``GC_FREEZE_EVERY_S`` later, and without the hook the worker's first seconds (recovery, the
    state cache filling up) met full collections of 80-240 ms every half second."""

    def __init__(self) -> None:
        self.last_full = time.monotonic()
        self.installed = False

    def install(self) -> None:
        """Hook :meth:`after_collection` into the collector (once)."""
        if not self.installed:
            self.installed = True
            gc.callbacks.append(self.after_collection)

    async def start(self) -> None:
        """At the worker's start: the hook installed and what exists so far (the imported modules,
        the registry) frozen."""
        self.install()
        gc.freeze()

    async def collect(self) -> None:
        self.install()
        now = time.monotonic()
        if now - self.last_full >= GC_FULL_EVERY_S:
            self.last_full = now
            gc.unfreeze()
            gc.collect()
        gc.freeze()

    def after_collection(self, phase: str, info: dict[str, Any]) -> None:
        """A ``gc.callbacks`` hook: after a collection of generation 1 (and 0 with it), freeze its
        survivors (now all in the oldest generation)."""
        if phase == "stop" and info.get("generation") == 1:
            gc.freeze()

    def close(self) -> None:
        if self.after_collection in gc.callbacks:
            gc.callbacks.remove(self.after_collection)
        self.installed = False


def register_agents(app: Any, shell: PipelineShell, recovery: RecoveryWatch) -> list[str]:
    """Declare the pipeline (fed by faust's conductor, see ``streams.seam``) and its timers on
    ``app`` (``recovery``: whether its tables are recovered for the current assignment); returns the
    names of what is registered."""
    names = shell.names
    inputs = app.topic(
        names.plans,
        names.device_context,
        names.task_events,
        names.observations,
        names.control,
        key_serializer="raw",
        value_serializer="raw",
        acks=True,
    )
    # faust subscribes, assigns, fetches, tracks acks and commits the topic; its messages go to the
    # shell's inbox in batches instead of through an agent's stream (``streams.seam``)
    app.topics.add(inputs)
    app.topics.route(set(inputs.topics), shell.receive)

    pipeline = PipelineTask(app, shell)
    quiet = QuietDevices(shell, recovery)
    app.task(pipeline.loop)
    app.timer(MERGE_TICK_S, name="guardian.merge")(pipeline.release_held)
    app.timer(0.2, name="guardian.positions")(shell.learn_positions)
    app.timer(CONFIRM_EVERY_S, name="guardian.confirm")(quiet.confirm)

    async def sweep_dedup_memory() -> None:
        for partition in sorted(shell.stream_time):
            shell.send_control(partition, f"sweep-{partition}", {"op": "sweep"})

    app.timer(shell.sweep_every_s, name="guardian.sweep")(sweep_dedup_memory)

    def on_rebalance(*_: Any, **__: Any) -> None:
        quiet.scanned = False
        shell.rebalanced()

    async def on_revoked(*_: Any, **__: Any) -> None:
        quiet.scanned = False
        await shell.revoked()

    app.on_partitions_revoked.connect(on_revoked)
    app.on_partitions_assigned.connect(on_rebalance)

    async def on_stop(*_: Any, **__: Any) -> None:
        # sent once faust's consumer has left the group, before its producer stops
        await shell.batch.close()

    app.on_before_shutdown.connect(on_stop)

    async def quiet_root_logger() -> None:
        restore_log_level(logging.getLogger())
        # faust's producer buffer (what still goes through faust: owner-index writes, control
        # records) stops the stream whenever 100 messages wait, then drains them one by one: a
        # deep buffer keeps the stream flowing; faust still flushes it before every offset commit
        set_producer_buffer(app, PRODUCER_BUFFER_MESSAGES)

    app.task(quiet_root_logger)
    collector = YoungOnlyCollector()
    app.task(collector.start)
    app.timer(GC_FREEZE_EVERY_S, name="guardian.gc")(collector.collect)
    return ["guardian.pipeline", *TIMERS]


def waited_on(out: Out) -> bool:
    """Does someone wait for this output as soon as it is made (a decision, a dispatch, a timeline
    entry of an experience's story), rather than only for it to be there eventually (a drop entry,
    a dead letter)?"""
    kind = out.kind
    return kind in WAITED_ON_KINDS or (kind == "timeline" and out.value.get("stage") != "drop")


def expired_dedup_keys(
    items: Iterable[tuple[Any, Any]],
    now_ms: int,
    window_ms: int,
    *,
    max_scan: int = SWEEP_MAX_SCAN,
    max_delete: int = SWEEP_MAX_DELETES,
) -> tuple[list[bytes], bytes | None]:
    """The dedup keys (``device \x1f event`` -> ``"<received ms> <coords>"``) older than the window
    among at most ``max_scan`` items, and the key to go on from next time (None: the scan reached
    the end), so one sweep never stalls the stream for long."""
    expired: list[bytes] = []
    sep = SEP.encode()
    for scanned, (raw_key, value) in enumerate(items):
        key = bytes(raw_key)
        if scanned >= max_scan or len(expired) >= max_delete:
            return expired, key
        if sep not in key:
            continue  # faust's own bookkeeping shares the database
        try:
            seen_at = int(bytes(value).split(b" ", 1)[0])
        except (TypeError, ValueError):
            continue
        if now_ms - seen_at > window_ms:
            expired.append(key)
    return expired, None
