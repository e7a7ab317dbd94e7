"""Is the worker alive, is it ready, and what does it count: ``/healthz``, ``/ready``, ``/metrics``.

A worker is *ready* when it has a partition assignment, its tables are recovered for that
assignment (``streams.seam.recovery.RecoveryWatch``: faust's own flag stays set after the first one),
the experience claims log is read to the end it had at start and no plan's claim is late
(``streams.claims``), the stream flows (faust suspends it during a rebalance), the producer runs
and no input partition it holds is stalled (``streams.stalls.InputWatch``).

A worker never stops itself for not being ready. Upstream, faust waits silently; before, this
watchdog stopped a worker not ready within ``GUARDIAN_READY_TIMEOUT_S`` with exit code 5, and
under rebalance storms (a worker killed every 15-40 s) workers waiting for an assignment exited
that way one after the other, shrinking the group, the time a worker was stopped (SIGSTOP)
counted as waiting. Now a worker not ready for ``GUARDIAN_READY_TIMEOUT_S`` while its recovery
makes no progress says in one log line what is missing (once per wait), counts it
(``guardian_not_ready_timeouts_total``) and keeps trying; ``/ready`` answers 503 with the reasons
throughout. A stalled input partition is healed in the process (``streams.stalls``), and time the
process spent stopped is not counted as waiting (``streams.stalls.WaitClock``). Tests:
``tests/unit/test_liveness.py``, ``tests/integration/test_worker_startup.py``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from aiokafka.errors import KafkaError
from faust.exceptions import ConsumerNotStarted
from faust.types import TP
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from streams.metrics import GuardianMetrics, LiveCollector
from streams.ready_wait import ReadyWait
from streams.seam import membership
from streams.seam.reads import assigned_topics, producer_started
from streams.seam.recovery import RecoveryWatch
from streams.stalls import Heal, InputWatch, WaitClock

log = logging.getLogger(__name__)

#: how often the watchdog looks
WATCH_EVERY_S = 0.5


@dataclass
class Readiness:
    """The worker's readiness, from faust's state (read through ``streams.seam``)."""

    app: Any
    timeout_s: float
    #: told the reason, once per wait, when the worker has not been ready for ``timeout_s`` with
    #: no recovery progress (the worker logs it; it keeps trying)
    on_timeout: Callable[[str], Any]
    #: whether the tables are recovered for the current assignment
    recovery: RecoveryWatch
    #: the time waits are measured in (without time the process spent stopped)
    clock: WaitClock = field(default_factory=WaitClock)
    assigned: bool = False
    #: the current wait to be ready (on ``clock``) and the waits told so far
    wait: ReadyWait = field(default_factory=ReadyWait)
    #: the claims reader (``streams.claims.ClaimsReader``): not ready until the log is read
    claims: Any = None
    #: the input partitions' watch: not ready while one is stalled
    inputs: InputWatch | None = None
    #: heal steps found by the last :meth:`check`, for the watchdog to carry out
    heals: list[Heal] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.wait.waiting_since = self.wait.last_progress = self.clock.now()

    def on_assigned(self) -> None:
        self.assigned = True
        self._moved()

    def on_revoked(self) -> None:
        self.assigned = False
        self._moved()

    def _moved(self) -> None:
        if self.inputs is not None:
            self.inputs.reset()
        self.wait.begin(self.clock.now())

    def _lacking(self) -> list[str]:
        app = self.app
        lacking: list[str] = []
        if not self.assigned:
            lacking.append("no partition assignment from the consumer group yet")
        else:
            rec = self.recovery.state()
            if not rec.completed:
                left = sum(rec.remaining.values())
                lacking.append(f"table recovery not complete ({left} changelog records to read)")
            elif not app.flow_control.is_active():
                lacking.append("the stream is suspended (a rebalance is in progress)")
        if self.claims is not None:
            lacking.extend(self.claims.missing())
        if not producer_started(app):
            lacking.append("the Kafka producer is not running")
        return lacking

    def missing(self) -> list[str]:
        """What the worker still lacks to be ready (empty: ready); reads only."""
        lacking = self._lacking()
        if self.inputs is not None:
            lacking.extend(self.inputs.open_stalls())
        return lacking

    def check(self, now: float) -> list[str]:
        """Look once at ``now`` (``clock`` time): the missing parts (empty: ready), the heal steps
        due (:attr:`heals`), and a wait past the timeout told once."""
        lacking = self._lacking()
        if self.inputs is not None:
            if not lacking:
                self.heals.extend(self.inputs.judge(now, int(time.time() * 1000)))
            lacking.extend(self.inputs.open_stalls())
        wait = self.wait
        if not lacking:
            wait.end()
            return lacking
        if wait.waiting_since is None:
            wait.begin(self.clock.now())
        wait.progressed(sum(self.recovery.state().remaining.values()) if self.assigned else None, now)
        stuck_since = wait.stuck_since()
        if not self.assigned and now - max(stuck_since, wait.rejoined) >= self.timeout_s:
            wait.rejoined = now  # no assignment for so long: rejoin, again every timeout
            self.heals.append(Heal("rejoin"))
        if not wait.told and now - stuck_since >= self.timeout_s:
            wait.told = True
            wait.timeouts += 1
            topics = ", ".join(assigned_topics(self.app.consumer)) if self.assigned else ""
            assert wait.waiting_since is not None
            reason = (
                f"worker not ready after {now - wait.waiting_since:.0f} s "
                f"(GUARDIAN_READY_TIMEOUT_S={self.timeout_s:g}), still trying: {'; '.join(lacking)}"
                + (f"; assigned partitions of {topics}" if topics else "")
            )
            self.on_timeout(reason)
        return lacking


async def heal(app: Any, step: Heal) -> bool:
    """Carry out one heal step on faust's consumer (False: it could not be done)."""
    consumer = app.consumer
    where = "the consumer group" if step.topic is None else f"input partition {step.topic}[{step.partition}]"
    try:
        if step.topic is None:  # no assignment for so long: is aiokafka holding an error back?
            held = await membership.request_rejoin(consumer, only_if_held=True)
            if held is not None:
                log.warning("guardian: joining the consumer group failed (%s): trying again", held)
            return True
        if step.step == "rejoin":
            log.warning("guardian: %s still stalled: rejoining the consumer group", where)
            await membership.request_rejoin(consumer)
            return True
        assert step.partition is not None
        tp = TP(step.topic, step.partition)
        offset = step.offset
        if offset is None and hasattr(consumer, "broker_committed"):
            offset = await consumer.broker_committed(tp)  # faust's own may not be known yet
        if offset is None:
            offset = int((await consumer.earliest_offsets(tp))[tp])
        log.warning("guardian: %s stalled: reading it again from offset %d", where, offset)
        await consumer.seek_wait({tp: offset})
        consumer.resume_partitions([tp])
        return True
    except (KafkaError, TimeoutError, ConsumerNotStarted, KeyError, AssertionError) as exc:
        log.warning("guardian: healing %s by %s failed (%r)", where, step.step, exc)
        return False


async def watchdog(
    readiness: Readiness,
    metrics: GuardianMetrics,
    heal_step: Callable[[Heal], Awaitable[bool]] | None = None,
    every_s: float = WATCH_EVERY_S,
) -> None:
    """Look at the worker's readiness every ``every_s``, and carry out the heal steps it finds
    (``heal_step``; a step that fails is followed by the next one at once).

    A plain task on the worker's event loop, started before faust's own start: faust starts its
    timers only once the App has started, and a start that hangs (a group that cannot be joined)
    must be noticed too."""
    readiness.clock.tick_s = every_s
    while True:
        lacking = readiness.check(readiness.clock.tick())
        metrics.ready.set(0 if lacking else 1)
        while readiness.heals:
            step: Heal | None = readiness.heals.pop(0)
            while step is not None and heal_step is not None and not await heal_step(step):
                inputs = readiness.inputs
                step = None if inputs is None else inputs.failed(step, readiness.clock.now())
        await asyncio.sleep(every_s)


class LivenessCollector(Collector):
    """The watchdog's counts, read when scraped."""

    def __init__(self, readiness: Readiness) -> None:
        self.readiness = readiness

    def describe(self) -> Iterable[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        readiness, inputs = self.readiness, self.readiness.inputs
        yield CounterMetricFamily(
            "guardian_not_ready_timeouts",
            "Times the worker was not ready for GUARDIAN_READY_TIMEOUT_S with no recovery progress "
            "(each one logged with what was missing; the worker keeps trying).",
            value=readiness.wait.timeouts,
        )
        yield GaugeMetricFamily(
            "guardian_consumer_group_generation",
            "The consumer group generation of the worker's assignment: a rebalance raises it, a static "
            "member restarted under its ID within the session timeout does not.",
            value=int(getattr(readiness.app, "consumer_generation_id", 0) or 0),
        )
        if inputs is None:
            return
        yield CounterMetricFamily(
            "guardian_stall_detected",
            "Input partitions found stalled: records past the committed offset, no fetch or commit "
            "progress for GUARDIAN_STALL_AFTER_S while the pipeline waited for input.",
            value=inputs.detected,
        )
        steps = CounterMetricFamily(
            "guardian_stall_heal_actions",
            "Heal steps taken for stalled input partitions (seek: read again from the committed "
            "offset; rejoin: rejoin the consumer group).",
            labels=["action"],
        )
        for step, n in sorted(inputs.steps_taken.items()):
            steps.add_metric([step], n)
        yield steps
        yield CounterMetricFamily(
            "guardian_stall_healed",
            "Stalled input partitions read again (their committed offset moved) after healing.",
            value=inputs.healed,
        )


def register(app: Any, readiness: Readiness, metrics: GuardianMetrics, lag_source: Any) -> None:
    """The scrape-time metrics and, when faust's web server is on, the three pages (the watchdog
    itself is :func:`watchdog`, started by the worker)."""

    def recovery() -> tuple[dict[tuple[str, int], int], bool]:
        rec = readiness.recovery.state()
        return rec.remaining, rec.completed

    metrics.add_live(LiveCollector(lag_source, recovery))
    metrics.registry.register(LivenessCollector(readiness))
    if not app.conf.web_enabled:
        return

    async def healthz(web: Any, request: Any) -> Any:
        # answering at all means the event loop runs
        return web.json({"status": "ok"})

    async def ready(web: Any, request: Any) -> Any:
        lacking = readiness.missing()
        if lacking:
            return web.json({"ready": False, "missing": lacking}, status=503)
        return web.json({"ready": True})

    async def metrics_page(web: Any, request: Any) -> Any:
        body = generate_latest(metrics.registry)  # in the loop: the collectors read faust state
        return web.bytes(body, content_type=CONTENT_TYPE_LATEST.split(";")[0])

    app.page("/healthz")(healthz)
    app.page("/ready")(ready)
    app.page("/metrics")(metrics_page)
