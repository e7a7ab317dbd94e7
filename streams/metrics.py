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

from collections.abc import Callable, Iterable, Iterator, Mapping

from prometheus_client import CollectorRegistry, Gauge, ProcessCollector
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from streams.batch_tally import BatchTally
from streams.latency_trace import LatencyTrace
from streams.metric_groups import BatchTimings, ClaimMetrics, InputIrregularities, ModelCalls, RecordCounts


class GuardianMetrics:
    """Every metric of one worker, on its own registry: the groups of :mod:`streams.metric_groups`
    (built in the order of the ``/metrics`` page), the readiness gauge and the latency trace."""

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        #: the latency trace (``GUARDIAN_LATENCY_TRACE`` in ``env``), off by default
        self.trace = LatencyTrace.from_env(env or {})
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.records = RecordCounts(r)
        self.irregular = InputIrregularities(r)
        self.model = ModelCalls(r)
        self.batches = BatchTimings(r)
        self.claims = ClaimMetrics(r)
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
        self.records.add(tally)
        self.batches.observe(tally, records, flush_s, now_s)
        if self.trace is not None:
            if tally.traced:
                self.trace.delivered(tally.traced, *tally.sent_at, records)
            inputs = sum(tally.inputs.values()) if acked_inputs is None else acked_inputs
            if inputs:
                self.trace.acked(inputs)

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
