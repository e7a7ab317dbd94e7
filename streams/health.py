"""Is the worker alive, is it ready, and what does it count: ``/healthz``, ``/ready``, ``/metrics``.

A worker is *ready* when it has a partition assignment, its tables are recovered for that
assignment (``streams.faust_seam.RecoveryWatch``: faust's own flag stays set after the first one),
the experience claims log is read to the end it had at start and no plan's claim is late
(``streams.claims``), the stream flows (faust suspends it during a rebalance), the producer runs
and no input partition it holds is left unread (:class:`InputWatch`).
:class:`Readiness` also watches start-up and every rebalance: a worker not ready within
``GUARDIAN_READY_TIMEOUT_S`` while its recovery makes no progress says in one log line what is
missing and stops with exit code 5 (``config.exitcodes.Exit.NOT_READY``), so its process
supervisor restarts it instead of it waiting silently.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from streams import faust_seam
from streams.metrics import GuardianMetrics, LiveCollector

log = logging.getLogger(__name__)

#: how often the watchdog looks
WATCH_EVERY_S = 0.5
#: how long an input partition may hold records past its committed offset, none committed
#: meanwhile, while the pipeline waits for input and the broker answers fetches, before the worker
#: says it is not ready (:class:`InputWatch`)
STARVED_AFTER_S = 30.0

Lag = Mapping[tuple[str, int], tuple[int, int | None]]


@dataclass
class InputWatch:
    """Input partitions a ready worker holds and does not read.

    Ready says the worker is assigned, recovered and flowing; it does not say every record of its
    partitions reaches the pipeline. A partition whose records stay past its committed offset, none
    committed for ``after_s`` while the pipeline waits for input and the broker answers the
    consumer's fetches, is one the worker holds and has stopped reading (say, records fetched and
    dropped during a rebalance that its fetch went past): the worker is not ready, says which
    partition and where its fetch stands, and the watchdog's timeout then stops it, so another
    worker reads the partition from its committed offset. A broker that does not answer is not
    this (every partition waits alike); a busy pipeline is not either (it commits as it goes)."""

    #: (topic, partition) -> (high watermark, committed offset) of the assigned input partitions
    lag: Callable[[], Lag]
    #: (topic, partition) -> where the consumer's fetch stands (``faust_seam.fetch_states``)
    fetch: Callable[[], Mapping[tuple[str, int], faust_seam.FetchState]]
    #: does the pipeline wait for input (nothing taken, nothing to do)?
    idle: Callable[[], bool]
    after_s: float = STARVED_AFTER_S
    #: (topic, partition) -> (committed offset, fetch position) seen last, and since when
    seen: dict[tuple[str, int], tuple[tuple[int | None, int | None], float]] = field(default_factory=dict)

    def reset(self) -> None:
        """Partitions moved: nothing seen so far counts."""
        self.seen.clear()

    def starved(self, now: float, wall_ms: int) -> list[str]:
        """What the worker lacks for its input partitions (empty: every one moves or has nothing
        to read). ``now`` is monotonic, ``wall_ms`` the wall clock (the broker's answers' time)."""
        lag = self.lag()
        states = self.fetch()
        for key in [k for k in self.seen if k not in lag]:
            del self.seen[key]
        late: list[tuple[str, int, int, int | None, float, faust_seam.FetchState | None]] = []
        for key, (high, committed) in lag.items():
            state = states.get(key)
            mark = (committed, None if state is None else state.position)
            before = self.seen.get(key)
            if before is None or before[0] != mark or high <= (committed or 0):
                self.seen[key] = (mark, now)
                continue
            if now - before[1] >= self.after_s:
                late.append((key[0], key[1], high, committed, now - before[1], state))
        if not late or not self.idle() or not self._broker_answers(states, wall_ms):
            return []
        return [self._say(*entry) for entry in sorted(late, key=lambda e: (e[0], e[1]))]

    def _broker_answers(self, states: Mapping[tuple[str, int], faust_seam.FetchState], wall_ms: int) -> bool:
        answered = [s.answered_ms for s in states.values() if s.answered_ms is not None]
        return bool(answered) and wall_ms - max(answered) <= self.after_s * 1000

    @staticmethod
    def _say(topic: str, partition: int, high: int, committed: int | None, for_s: float, state: Any) -> str:
        if state is None:
            where = "the consumer has no fetch state for it"
        elif state.position is None:
            where = "its fetch has no position"
        else:
            where = f"fetch position {state.position}"
            if state.fetched_unread:
                where += ", fetched records not taken"
            if not state.active:
                where += ", not among the partitions the consumer asks for"
        return (
            f"input partition {topic}[{partition}] has {high - (committed or 0)} record(s) past its "
            f"committed offset ({'none' if committed is None else committed}, end {high}), none "
            f"committed for {for_s:.0f} s while the pipeline waits for input ({where})"
        )


@dataclass
class Readiness:
    """The worker's readiness, from faust's state (read through ``streams.faust_seam``)."""

    app: Any
    timeout_s: float
    #: called with the reason when the worker was not ready in time (stops the worker)
    on_timeout: Callable[[str], Any]
    #: whether the tables are recovered for the current assignment
    recovery: faust_seam.RecoveryWatch
    assigned: bool = False
    #: monotonic time since which the worker has been waiting to be ready (None: ready)
    waiting_since: float | None = field(default_factory=time.monotonic)
    #: recovery progress seen last (records still to read), and when it last moved
    last_remaining: int | None = None
    last_progress: float = field(default_factory=time.monotonic)
    gave_up: bool = False
    #: the claims reader (``streams.claims.ClaimsReader``): not ready until the log is read
    claims: Any = None
    #: the input partitions' watch (:class:`InputWatch`): not ready while one is starved
    inputs: InputWatch | None = None

    def on_assigned(self) -> None:
        self.assigned = True
        self._moved()

    def on_revoked(self) -> None:
        self.assigned = False
        self._moved()

    def _moved(self) -> None:
        if self.inputs is not None:
            self.inputs.reset()
        self._wait()

    def _wait(self) -> None:
        if self.waiting_since is None:
            self.waiting_since = time.monotonic()
        self.last_progress = time.monotonic()
        self.last_remaining = None

    def missing(self, now: float | None = None) -> list[str]:
        """What the worker still lacks to be ready (empty: ready)."""
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
        if not faust_seam.producer_started(app):
            lacking.append("the Kafka producer is not running")
        if not lacking and self.inputs is not None:
            lacking.extend(
                self.inputs.starved(time.monotonic() if now is None else now, int(time.time() * 1000))
            )
        return lacking

    def check(self, now: float) -> list[str]:
        """Look once: the missing parts (empty: ready); gives up past the timeout."""
        lacking = self.missing(now)
        if not lacking:
            self.waiting_since = None
            return lacking
        if self.waiting_since is None:
            self._wait()
        remaining = sum(self.recovery.state().remaining.values()) if self.assigned else None
        if remaining is not None and remaining != self.last_remaining:
            self.last_remaining = remaining
            self.last_progress = now
        assert self.waiting_since is not None
        stuck_since = max(self.waiting_since, self.last_progress)
        if not self.gave_up and now - stuck_since >= self.timeout_s:
            self.gave_up = True
            topics = ", ".join(faust_seam.assigned_topics(self.app.consumer)) if self.assigned else ""
            reason = (
                f"worker not ready after {now - self.waiting_since:.0f} s "
                f"(GUARDIAN_READY_TIMEOUT_S={self.timeout_s:g}): {'; '.join(lacking)}"
                + (f"; assigned partitions of {topics}" if topics else "")
            )
            self.on_timeout(reason)
        return lacking


async def watchdog(readiness: Readiness, metrics: GuardianMetrics, every_s: float = WATCH_EVERY_S) -> None:
    """Look at the worker's readiness every ``every_s`` until it gives up.

    A plain task on the worker's event loop, started before faust's own start: faust starts its
    timers only once the App has started, and a start that hangs (a group that cannot be joined)
    must be noticed too."""
    while not readiness.gave_up:
        lacking = readiness.check(time.monotonic())
        metrics.ready.set(0 if lacking else 1)
        await asyncio.sleep(every_s)


def register(app: Any, readiness: Readiness, metrics: GuardianMetrics, lag_source: Any) -> None:
    """The scrape-time metrics and, when faust's web server is on, the three pages (the watchdog
    itself is :func:`watchdog`, started by the worker)."""

    def recovery() -> tuple[dict[tuple[str, int], int], bool]:
        rec = readiness.recovery.state()
        return rec.remaining, rec.completed

    metrics.add_live(LiveCollector(lag_source, recovery))
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
