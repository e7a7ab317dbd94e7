"""The worker's metrics grouped by what they measure, each group one small object on the worker's
registry (:class:`streams.metrics.GuardianMetrics` holds one of each).

The groups are built in the order below, which is the order of the ``/metrics`` page.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from streams.batch_tally import BatchTally

#: trigger -> dispatch, from the trigger's receive time (its Kafka timestamp) to its dispatch
#: acknowledged by Kafka
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
FLUSH_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
BATCH_BUCKETS = (1, 10, 50, 100, 250, 500, 1000, 2000, 5000, 10000)
MODEL_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0)


def _histogram(r: CollectorRegistry, name: str, documentation: str, buckets: tuple[float, ...]) -> Histogram:
    """A histogram of ``buckets`` on the registry ``r``."""
    return Histogram(name, documentation, buckets=buckets, registry=r)


class RecordCounts:
    """The records of delivered batches: inputs and outputs per topic, dead letters, timeline drops
    and decisions per reason (added from a batch's tally once Kafka has acknowledged all of it)."""

    def __init__(self, r: CollectorRegistry) -> None:
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

    def add(self, tally: BatchTally) -> None:
        """Count a delivered batch's records."""
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


class InputIrregularities:
    """Input records read out of the ordinary: control records that could not be used, partitions
    read again after a record past the next one, records that reached the broker late."""

    def __init__(self, r: CollectorRegistry) -> None:
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


class ModelCalls:
    """The model backend's HTTP calls: per outcome, their retries and durations, and the decisions the
    rules made because the model failed."""

    def __init__(self, r: CollectorRegistry) -> None:
        self.calls = Counter(
            "guardian_model_calls_total",
            "HTTP calls to the model backend, per outcome (ok, http_429, http_5xx, http_4xx, timeout, "
            "connection, bad_response).",
            ["outcome"],
            registry=r,
        )
        self.retries = Counter(
            "guardian_model_retries_total", "Model calls that were a retry of a failed one.", registry=r
        )
        self.fallbacks = Counter(
            "guardian_model_fallbacks_total",
            "Decisions the rules made because the model failed, per reason (call_failed, bad_answer, "
            "invalid_decision).",
            ["reason"],
            registry=r,
        )
        self.latency = _histogram(
            r,
            "guardian_model_call_duration_seconds",
            "Duration of one HTTP call to the model backend.",
            MODEL_BUCKETS,
        )

    def call(self, outcome: str, seconds: float, attempt: int) -> None:
        """One HTTP call to the model (``attempt`` counts from 1)."""
        self.calls.labels(outcome).inc()
        self.latency.observe(seconds)
        if attempt > 1:
            self.retries.inc()

    def fallback(self, reason: str) -> None:
        self.fallbacks.labels(reason).inc()


class BatchTimings:
    """Each delivered batch's timings: trigger to dispatch acknowledged, records per batch, flush to
    acknowledged."""

    def __init__(self, r: CollectorRegistry) -> None:
        self.trigger_to_dispatch = _histogram(
            r,
            "guardian_trigger_to_dispatch_seconds",
            "From a trigger's receive time (its Kafka timestamp) to its dispatch acknowledged by Kafka.",
            LATENCY_BUCKETS,
        )
        self.batch_records = _histogram(
            r,
            "guardian_batch_records",
            "Records per flushed batch.",
            BATCH_BUCKETS,
        )
        self.flush_duration = _histogram(
            r,
            "guardian_flush_duration_seconds",
            "From a batch's flush to Kafka acknowledging all of it (tables, changelogs, outputs).",
            FLUSH_BUCKETS,
        )

    def observe(self, tally: BatchTally, records: int, flush_s: float, now_s: float) -> None:
        """A batch of ``records`` messages is in Kafka, ``flush_s`` after its flush."""
        for received_ms in tally.dispatch_triggers:
            self.trigger_to_dispatch.observe(max(0.0, now_s - received_ms / 1000))
        self.batch_records.observe(records)
        self.flush_duration.observe(flush_s)


class ClaimMetrics:
    """The experience claims: how long a claim's round trip takes, how many the worker holds and about
    the memory they take."""

    def __init__(self, r: CollectorRegistry) -> None:
        self.duration = _histogram(
            r,
            "guardian_experience_claim_duration_seconds",
            "A new experience's claim: written to the claims topic and read back, before its plan.",
            FLUSH_BUCKETS,
        )
        self.held = Gauge(
            "guardian_experience_claims",
            "Experience claims the worker holds (every claim of the claims log its device's rate allowed).",
            registry=r,
        )
        self.bytes = Gauge(
            "guardian_experience_claims_bytes",
            "About the memory the worker's experience claims take (their table, the devices' rates).",
            registry=r,
        )
