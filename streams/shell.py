"""The shell (:class:`PipelineShell`): what moves a record between Kafka, the tables and the
functional core, wiring the objects that own the shell's state. It owns none of it itself:

- :class:`streams.inbox.Inbox`: what faust's conductor handed over, and the merge's clock;
- :class:`streams.positions.Positions`: where each input topic-partition stands (what is
  processed, whether a record is the next one, whether a partition is caught up);
- :class:`streams.held.HeldRecords`: the per-device merge (``pipeline/order.py``) and the plans
  waiting for their claims;
- :class:`streams.commit_batch.CommitBatch`: the batch's messages, its table writes waiting behind
  a backlog, what is flushed and what may be committed;
- :class:`streams.quiet.PendingConfirmations`: quiet devices' pending changes, the partitions'
  receive-time clocks; :class:`streams.sweep.DedupSweep`: the dedup sweeps under way;
- :class:`streams.outlets.Outlets`: the output topics by kind, the ``control`` topic, the
  asynchronous decider; :class:`streams.reports.WorkerReports`: the worker's metrics and readiness.

Per record the shell hands the core the record's partition of the store
(``store.at(partition)``), then the outputs to the batch (:meth:`PipelineShell.emit`); ``control``
records (a quiet device's confirmation, a model's verdict, a sweep) are turned into the core's
calls. The ``guardian.pipeline`` task (``streams.pipeline_task``) drives it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import orjson

from pipeline.runner import Processed, Processor
from streams.claims import ClaimsReader
from streams.commit_batch import DEFER_STATE_AFTER_S, CommitBatch, Deferred, Delivery, waited_on
from streams.held import HeldRecords
from streams.inbox import Inbox
from streams.metrics import GuardianMetrics
from streams.outlets import Outlets, VerdictSink
from streams.positions import Positions
from streams.quiet import PendingConfirmations
from streams.reports import WorkerReports
from streams.sweep import SWEEP_EVERY_S, DedupSweep
from supervisor.verdict import Verdict
from tables.state import Trigger
from tables.store.faust_tables import FaustStore, GuardianTables
from topics.envelope import Coords, Out
from topics.names import TopicNames
from topics.outbound import Cause, encode_output

log = logging.getLogger(__name__)

#: between flushes, the pipeline gives the event loop a turn after this much work (the fetcher,
#: the producer's sender and the acks run meanwhile); frequent flushes would cost throughput (one
#: produce request per flush), frequent turns cost almost nothing
YIELD_EVERY_S = 0.01


class PipelineShell:
    """The per-app shell (never module-global): the core, the store and the topics, and the objects
    that own the shell's state, wired together (see the module)."""

    def __init__(
        self,
        processor: Processor,
        names: TopicNames,
        tables: GuardianTables,
        store: FaustStore,
        out_topics: dict[str, str],
        control_topic: Any,
        submit: VerdictSink | None = None,
        metrics: GuardianMetrics | None = None,
        readiness: Any = None,
        claims: ClaimsReader | None = None,
        sweep_every_s: float = SWEEP_EVERY_S,
        defer_state_s: float = DEFER_STATE_AFTER_S,
    ) -> None:
        """``tables``: the faust tables (swept by :class:`streams.sweep.DedupSweep`; the store's
        own, ``store.tables``, in a worker); ``claims``: the experience claims
        (:class:`streams.held.HeldRecords`); ``sweep_every_s``: how often the dedup keys are swept;
        ``defer_state_s``: how long table writes may wait behind a backlog
        (:class:`streams.commit_batch.Deferred`)."""
        self.processor = processor
        self.names = names
        self.store = store
        #: the output topics by kind, the ``control`` topic, the asynchronous decider
        self.outlets = Outlets(out_topics, control_topic, submit)
        #: the worker's Prometheus metrics and readiness (None: not counted, e.g. unit tests)
        self.reports = WorkerReports(metrics, readiness)
        #: the batch being built and its commit protocol (over the store's pending writes)
        self.batch = CommitBatch(
            store.writes, Delivery(metrics=metrics), deferred=Deferred(after_s=defer_state_s)
        )
        batch = self.batch
        #: where each input topic-partition stands, what faust handed over, what the merge holds, the
        #: quiet devices and the partitions' clocks, the dedup sweeps under way
        self.positions = Positions(names, metrics=metrics, generation=lambda: batch.generation)
        self.inbox = Inbox(metrics)
        self.held = HeldRecords(processor, names, self.batch, claims)
        self.quiet = PendingConfirmations(store, self.held.merger, self.positions)
        self.sweeper = DedupSweep(processor, tables, store, sweep_every_s)
        #: when the pipeline last gave the event loop a turn (monotonic)
        self.yielded_at = 0.0

    @property
    def tables(self) -> GuardianTables:
        """The faust tables (the store's: the shell keeps no second reference)."""
        return self.store.tables

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
            send(self.outlets.topics[enc.out.kind], enc.key, enc.value)
            if waited_on(enc.out):
                self.batch.waited_on()
        if self.reports.metrics is not None and outs:
            self.batch.tally.outs([enc.out for enc in sent], trigger_received_ms)

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
        self.positions.new_turn()

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
        self.held.forget()
        self.sweeper.sweeping.clear()
        self.quiet.forget_rescan()
        self.drop_unflushed()
        self.positions.forget()

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
        self.inbox.take()

    def track(self, done: Processed, partition: int) -> None:
        device_id = done.device_id
        if device_id is None:
            return
        self.quiet.track(device_id, partition, done.next_due_ms)
        submit = self.outlets.submit
        if done.queued and submit is not None:
            for trigger in done.queued:
                submit(device_id, partition, trigger, done.etag)

    def handle(self, msg: Any) -> None:
        """One consumed message (the current event is already set by the caller)."""
        partition = int(msg.partition)
        received_at_ms = round(msg.timestamp * 1000)
        suffix = self.names.suffix_of(msg.topic)
        if suffix != "control":
            self.quiet.clock_in(partition, received_at_ms)
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
            admitted=self.held.admitted_plans.pop((partition, offset), None) if suffix == "plans" else None,
        )
        metrics = self.reports.metrics
        if metrics is not None:
            self.batch.tally.inputs[suffix] += 1
            if metrics.trace is not None:
                self.batch.tally.trace(metrics.trace.handled(msg, done.outs))
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
        if self.reports.metrics is not None:
            self.reports.metrics.irregular.control_rejected.inc()
        log.error("guardian: skipped control record %s: %s", coords, why)

    def sweep(self, partition: int, now_ms: int) -> int:
        """A ``sweep`` control record: :meth:`streams.sweep.DedupSweep.sweep` on the partition's
        receive-time clock (none yet: nothing is swept)."""
        return self.sweeper.sweep(partition, now_ms, self.quiet.stream_time.get(partition))

    def send_control(self, partition: int, key: str, cmd: dict[str, Any]) -> None:
        if self.batch.closed:
            return  # stopping: the partition's next owner asks again
        self.outlets.control.send_soon(key=key.encode(), value=orjson.dumps(cmd), partition=partition)
