"""The worker's Prometheus metrics, counted in the shell from what the core returns.

One :class:`GuardianMetrics` per worker (never module-global), on a registry of its own that the
``/metrics`` page renders. The core stays pure: the shell counts the records it hands to the core
and the outputs the core gives back, per batch (:class:`BatchTally`), and adds a batch to the
counters only once Kafka has acknowledged all of it; a batch dropped by a rebalance (read again
later) is never counted. Gauges that describe the consumer (lag, recovery) are read at scrape
time (:class:`LiveCollector`). Names follow Prometheus conventions: base units (seconds, bytes),
``_total`` for counters.
"""

from __future__ import annotations

import time
from collections import Counter as Tally
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from topics.envelope import Out

#: trigger -> dispatch, from the trigger's receive time (its Kafka timestamp) to its dispatch
#: acknowledged by Kafka
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
FLUSH_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
BATCH_BUCKETS = (1, 10, 50, 100, 250, 500, 1000, 2000, 5000, 10000)
MODEL_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0)


@dataclass
class BatchTally:
    """What one batch read and produced, added to the counters once the batch is delivered."""

    inputs: Tally[str] = field(default_factory=Tally)
    outputs: Tally[str] = field(default_factory=Tally)
    dead_letters: Tally[str] = field(default_factory=Tally)
    drops: Tally[str] = field(default_factory=Tally)
    decisions: Tally[tuple[str, str]] = field(default_factory=Tally)
    #: receive time (ms) of the trigger of each dispatch
    dispatch_triggers: list[int] = field(default_factory=list)
    #: the batch's dispatches in the latency trace (``LatencyTrace``; empty when it is off)
    traced: list[dict[str, Any]] = field(default_factory=list)
    #: wall-clock times the batch's flush started and handed everything to the producer
    sent_at: tuple[float, float] = (0.0, 0.0)

    def trace(self, entry: dict[str, Any] | None) -> None:
        if entry is not None:
            self.traced.append(entry)

    def outs(self, outs: Iterable[Out], trigger_received_ms: int | None) -> None:
        for out in outs:
            self.outputs[out.kind] += 1
            value = out.value
            if out.kind == "deadletter":
                self.dead_letters[str(value.get("reason_code"))] += 1
            elif out.kind == "timeline":
                if value.get("stage") == "drop":
                    self.drops[str(value.get("drop_reason"))] += 1
            elif out.kind == "decisions":
                self.decisions[(str(value.get("decision")), str(value.get("backend")))] += 1
            elif out.kind == "dispatch" and trigger_received_ms is not None:
                self.dispatch_triggers.append(trigger_received_ms)


class GuardianMetrics:
    """Every metric of one worker, on its own registry."""

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        #: the latency trace (``GUARDIAN_LATENCY_TRACE`` in ``env``), off by default
        self.trace = LatencyTrace.from_env(env or {})
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.inputs = Counter(
            "guardian_input_records_total",
            "Input records processed and acknowledged, per topic (suffix after the prefix).",
            ["topic"],
            registry=r,
        )
        self.outputs = Counter(
            "guardian_output_records_total",
            "Output records delivered to Kafka, per topic (suffix after the prefix).",
            ["topic"],
            registry=r,
        )
        self.dead_letters = Counter(
            "guardian_dead_letters_total", "Dead letters delivered, per reason code.", ["reason"], registry=r
        )
        self.drops = Counter(
            "guardian_timeline_drops_total",
            "Timeline drop entries delivered, per drop reason.",
            ["reason"],
            registry=r,
        )
        self.decisions = Counter(
            "guardian_decisions_total",
            "Supervisor decisions delivered, per decision and backend.",
            ["decision", "backend"],
            registry=r,
        )
        self.control_rejected = Counter(
            "guardian_control_records_rejected_total",
            "Records of the internal control topic that could not be used (each one is logged).",
            registry=r,
        )
        self.input_reread = Counter(
            "guardian_input_reread_total",
            "Times a worker was handed a record past the next one of its topic-partition (records "
            "fetched before a rebalance and dropped) and read the partition again from that one "
            "(each one is logged).",
            registry=r,
        )
        self.late_arrivals = Counter(
            "guardian_late_arrivals_total",
            "Input records processed after a record of their device that comes later in the order of "
            "docs/CONTRACTS.md §2 rule 11 (they reached the broker late): replay orders them otherwise.",
            registry=r,
        )
        self.model_calls = Counter(
            "guardian_model_calls_total",
            "HTTP calls to the model backend, per outcome (ok, http_429, http_5xx, http_4xx, timeout, "
            "connection, bad_response).",
            ["outcome"],
            registry=r,
        )
        self.model_retries = Counter(
            "guardian_model_retries_total", "Model calls that were a retry of a failed one.", registry=r
        )
        self.model_fallbacks = Counter(
            "guardian_model_fallbacks_total",
            "Decisions the rules made because the model failed, per reason (call_failed, bad_answer, "
            "invalid_decision).",
            ["reason"],
            registry=r,
        )
        self.model_latency = Histogram(
            "guardian_model_call_duration_seconds",
            "Duration of one HTTP call to the model backend.",
            buckets=MODEL_BUCKETS,
            registry=r,
        )
        self.trigger_to_dispatch = Histogram(
            "guardian_trigger_to_dispatch_seconds",
            "From a trigger's receive time (its Kafka timestamp) to its dispatch acknowledged by Kafka.",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.batch_records = Histogram(
            "guardian_batch_records",
            "Records per flushed batch.",
            buckets=BATCH_BUCKETS,
            registry=r,
        )
        self.flush_duration = Histogram(
            "guardian_flush_duration_seconds",
            "From a batch's flush to Kafka acknowledging all of it (tables, changelogs, outputs).",
            buckets=FLUSH_BUCKETS,
            registry=r,
        )
        self.claim_duration = Histogram(
            "guardian_experience_claim_duration_seconds",
            "A new experience's claim: written to the claims topic and read back, before its plan.",
            buckets=FLUSH_BUCKETS,
            registry=r,
        )
        self.claims_held = Gauge(
            "guardian_experience_claims",
            "Experience claims the worker holds (every claim of the claims log its device's rate allowed).",
            registry=r,
        )
        self.claims_bytes = Gauge(
            "guardian_experience_claims_bytes",
            "About the memory the worker's experience claims take (their table, the devices' rates).",
            registry=r,
        )
        self.ready = Gauge(
            "guardian_ready",
            "1 when the worker is ready (assigned, tables recovered, producer up).",
            registry=r,
        )
        ProcessCollector(registry=r)

    def delivered(
        self, tally: BatchTally, records: int, flush_s: float, now_s: float, acked_inputs: int | None = None
    ) -> None:
        """A batch is in Kafka: count it (``records``: the messages the batch took; ``acked_inputs``:
        how many input records its delivery acked, None: the batch's own)."""
        for topic, n in tally.inputs.items():
            self.inputs.labels(topic).inc(n)
        for topic, n in tally.outputs.items():
            self.outputs.labels(topic).inc(n)
        for reason, n in tally.dead_letters.items():
            self.dead_letters.labels(reason).inc(n)
        for reason, n in tally.drops.items():
            self.drops.labels(reason).inc(n)
        for (decision, backend), n in tally.decisions.items():
            self.decisions.labels(decision, backend).inc(n)
        for received_ms in tally.dispatch_triggers:
            self.trigger_to_dispatch.observe(max(0.0, now_s - received_ms / 1000))
        self.batch_records.observe(records)
        self.flush_duration.observe(flush_s)
        if self.trace is not None:
            if tally.traced:
                self.trace.delivered(tally.traced, *tally.sent_at, records)
            inputs = sum(tally.inputs.values()) if acked_inputs is None else acked_inputs
            if inputs:
                self.trace.acked(inputs)

    def model_call(self, outcome: str, seconds: float, attempt: int) -> None:
        """One HTTP call to the model (``attempt`` counts from 1)."""
        self.model_calls.labels(outcome).inc()
        self.model_latency.observe(seconds)
        if attempt > 1:
            self.model_retries.inc()

    def model_fallback(self, reason: str) -> None:
        self.model_fallbacks.labels(reason).inc()

    def add_live(self, collector: LiveCollector) -> None:
        self.registry.register(collector)


#: (topic, partition) -> (high watermark, committed offset or None)
LagSource = Callable[[], dict[tuple[str, int], tuple[int, int | None]]]
#: (changelog topic, partition) -> records still to read, and whether recovery is complete
RecoverySource = Callable[[], tuple[dict[tuple[str, int], int], bool]]


class LiveCollector(Collector):
    """Consumer lag and table recovery, read from the consumer when scraped."""

    def __init__(self, lag: LagSource, recovery: RecoverySource) -> None:
        self.lag = lag
        self.recovery = recovery

    def describe(self) -> Iterable[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        lag = GaugeMetricFamily(
            "guardian_consumer_lag_records",
            "Records of an assigned input partition not committed yet (high watermark - committed).",
            labels=["topic", "partition"],
        )
        for (topic, partition), (high, committed) in sorted(self.lag().items()):
            lag.add_metric([topic, str(partition)], max(0, high - (committed or 0)))
        yield lag
        remaining, completed = self.recovery()
        left = GaugeMetricFamily(
            "guardian_table_recovery_remaining_records",
            "Changelog records still to read before the tables are recovered, per changelog partition.",
            labels=["topic", "partition"],
        )
        for (topic, partition), n in sorted(remaining.items()):
            left.add_metric([topic, str(partition)], n)
        yield left
        yield GaugeMetricFamily(
            "guardian_table_recovery_completed",
            "1 when table recovery is complete for the current assignment.",
            value=1.0 if completed else 0.0,
        )


#: where a worker writes its latency trace (JSON lines; unset: no trace). ``guardian bench`` sets it
TRACE_ENV = "GUARDIAN_LATENCY_TRACE"
#: event-loop lag and GC pauses shorter than this are not written
TRACE_MIN_PAUSE_S = 0.005
TRACE_LAG_EVERY_S = 0.01
#: an event-loop stall this long is sampled: where the loop's thread is, every ``TRACE_SAMPLE_EVERY_S``
TRACE_STALL_SAMPLE_S = 0.05
TRACE_SAMPLE_EVERY_S = 0.02
#: frames kept per sample (the innermost)
TRACE_STACK_DEPTH = 40


class LatencyTrace:
    """Where the time of each dispatch went inside the worker (a bench diagnostic).

    Per dispatched trigger, wall-clock times (``time.time()``) of: the input handed over by faust's
    conductor (``recv``), pushed into the timestamp merge (``pushed``), handled by the core
    (``handled``), its batch's flush started (``flush``) and handed to the producer (``sent``), and
    Kafka acknowledging all of the batch (``acked``). Also every garbage-collector pause and every
    event-loop stall of at least ``TRACE_MIN_PAUSE_S`` (when and how long), so a slow dispatch can
    be matched with what the worker was doing; and a line per batch acked (when, how many input
    records). A stall of ``TRACE_STALL_SAMPLE_S`` or more is sampled from a thread of its own: its
    ``lag`` line carries where the event loop's thread was (``stacks``: innermost frame last, one
    per sample), so each long stall names its cause, and every ``lag`` line the loop thread's CPU
    time during it (``cpu``: a stall the loop spent working, or one it spent waiting for a core).
    Costs a dict entry per input record while on."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._file = open(path, "ab", buffering=1 << 16)  # noqa: SIM115 - closed in close()
        self._seen: dict[tuple[str, int, int], list[float]] = {}
        self._gc_start = 0.0
        self._lag_task: Any = None
        #: when the event loop last ran the watcher (monotonic), read by the sampling thread
        self._beat = time.monotonic()
        #: (monotonic time, stack) samples of the current stall, taken by the sampling thread
        self._samples: list[tuple[float, list[str]]] = []
        self._sampler: Any = None
        self._stop_sampler: Any = None

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> LatencyTrace | None:
        path = env.get(TRACE_ENV)
        return cls(path) if path else None

    def start(self) -> None:
        """Watch the garbage collector and the event loop (call from inside the running loop)."""
        import asyncio
        import gc

        if self._lag_task is None:
            import threading

            gc.callbacks.append(self._on_gc)
            self._beat = time.monotonic()
            self._lag_task = asyncio.ensure_future(self._watch_loop())
            self._stop_sampler = threading.Event()
            self._sampler = threading.Thread(
                target=self._sample_stalls,
                args=(threading.get_ident(), self._stop_sampler),
                name="guardian-stall-sampler",
                daemon=True,
            )
            self._sampler.start()

    def received(self, message: Any) -> None:
        self._seen[(message.topic, message.partition, message.offset)] = [time.time(), 0.0]

    def pushed(self, message: Any) -> None:
        times = self._seen.get((message.topic, message.partition, message.offset))
        if times is not None:
            times[1] = time.time()

    def handled(self, message: Any, outs: Iterable[Out]) -> dict[str, Any] | None:
        """A record is handled: its entry if it caused a dispatch (completed by the flush)."""
        times = self._seen.pop((message.topic, message.partition, message.offset), None)
        for out in outs:
            if out.kind == "dispatch" and times is not None:
                return {
                    "kind": "dispatch",
                    "trigger": out.value.get("trigger_event_id"),
                    "kafka_ts": message.timestamp,
                    "recv": times[0],
                    "pushed": times[1] or times[0],
                    "handled": time.time(),
                }
        return None

    def write(self, entry: dict[str, Any]) -> None:
        import orjson

        self._file.write(orjson.dumps(entry) + b"\n")

    def delivered(self, entries: list[dict[str, Any]], flush: float, sent: float, records: int) -> None:
        acked = time.time()
        for entry in entries:
            entry.update(flush=flush, sent=sent, acked=acked, batch=records)
            self.write(entry)
        self._file.flush()

    def acked(self, records: int) -> None:
        """A batch of ``records`` input records is delivered and acked (``guardian bench`` times the
        worker's throughput by these lines)."""
        self.write({"kind": "acked", "at": time.time(), "records": records})
        self._file.flush()

    def forget(self) -> None:
        """A rebalance: records received so far are read again."""
        self._seen.clear()

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._gc_start = time.time()
            return
        took = time.time() - self._gc_start
        if took >= TRACE_MIN_PAUSE_S:
            self.write({"kind": "gc", "at": self._gc_start, "s": took, "generation": info.get("generation")})

    async def _watch_loop(self) -> None:
        import asyncio

        while True:
            before = time.monotonic()
            cpu_before = time.thread_time()
            at = time.time()
            self._beat = before
            await asyncio.sleep(TRACE_LAG_EVERY_S)
            now = time.monotonic()
            self._beat = now
            late = now - before - TRACE_LAG_EVERY_S
            samples, self._samples = self._samples, []
            if late >= TRACE_MIN_PAUSE_S:
                # the event loop's own CPU time meanwhile: about ``s`` when the loop worked all
                # along, much less when its thread waited (not scheduled, or another thread had
                # the GIL)
                cpu = time.thread_time() - cpu_before
                entry: dict[str, Any] = {"kind": "lag", "at": at + TRACE_LAG_EVERY_S, "s": late, "cpu": cpu}
                stacks = [stack for t, stack in samples if t >= before]
                if stacks:
                    entry["stacks"] = stacks
                self.write(entry)

    def _sample_stalls(self, loop_thread: int, stop: Any) -> None:
        """The sampling thread: while the event loop has not run the watcher for
        ``TRACE_STALL_SAMPLE_S``, note where the loop's thread is (read by the next ``lag`` line)."""
        import sys

        while not stop.wait(TRACE_SAMPLE_EVERY_S):
            if time.monotonic() - self._beat < TRACE_STALL_SAMPLE_S:
                continue
            frame = sys._current_frames().get(loop_thread)
            if frame is not None:
                self._samples.append((time.monotonic(), stack_of(frame)))

    def close(self) -> None:
        import gc

        if self._stop_sampler is not None:
            self._stop_sampler.set()
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)
        if self._lag_task is not None:
            self._lag_task.cancel()
        self._file.close()


def stack_of(frame: Any, depth: int = TRACE_STACK_DEPTH) -> list[str]:
    """``module-relative file:line function`` of the ``depth`` innermost frames (innermost last)."""
    out: list[str] = []
    while frame is not None and len(out) < depth:
        code = frame.f_code
        path = code.co_filename
        for marker in ("site-packages/", "/lib/python"):
            if marker in path:
                path = path.split(marker, 1)[1]
                break
        else:
            path = "/".join(path.rsplit("/", 2)[-2:])
        out.append(f"{path}:{frame.f_lineno} {code.co_name}")
        frame = frame.f_back
    out.reverse()
    return out
