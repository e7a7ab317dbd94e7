"""Per-device decision lanes for an asynchronous backend (Gemini): no head-of-line blocking.

With ``GUARDIAN_SUPERVISOR=gemini`` the core queues each promoted trigger in the experience's
``pending`` list (durable in the table's changelog before any model call) and the shell hands it
to :meth:`Lanes.submit`. Each device has one lane, an asyncio queue worked by one task, so the
decisions of one experience are made in trigger order; different devices run concurrently, at most
``GeminiOptions.concurrency`` model calls at once (a semaphore). A slow answer for one device
never delays another device, nor the stream: the agent only enqueues.

For each trigger a lane:

1. reads the device's current experience (``shell.store``); a trigger that is no longer pending
   (decided, or its experience replaced) is skipped;
2. takes a private copy of the state and its ``etag`` *now* (the state the model decides on);
3. calls the backend, which makes no HTTP call at all when the decision budget is spent or the
   experience is winding down: the rules answer instead, and the core drops that verdict with
   ``budget_exhausted`` / ``winding_down`` — a verdict is still sent, so the trigger leaves
   ``pending`` and the experience can still complete;
4. sends the verdict as a ``verdict`` control record (``shell.send_control``), which the agent
   applies in stream context (``Processor.apply``: etag, dedup and budget checks);
5. waits (at most ``apply_wait_ms``) until the verdict has been applied, so the device's next
   decision is made on the state that includes this one (otherwise its etag would be stale).

Crash safety: after every table recovery (worker start, rebalance) the lanes re-submit every
pending trigger of the active partitions' experiences (:meth:`Lanes.resubmit_recovered`).

A lane task that dies of a bug is logged and restarted for the jobs still queued; its trigger
stays pending and is re-submitted by the next recovery.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from mode import Service

from config.settings import Settings
from supervisor.gemini import GeminiBackend, GeminiOptions
from supervisor.verdict import Verdict
from tables.state import DeviceState, ExperienceState, Trigger

logger = logging.getLogger(__name__)

#: First and largest poll interval while waiting for a verdict to be applied.
APPLY_POLL_MIN_S = 0.005
APPLY_POLL_MAX_S = 0.1


class Backend(Protocol):
    async def decide(self, exp: ExperienceState, device: DeviceState | None, trigger: Trigger) -> Verdict: ...

    async def aclose(self) -> None: ...


class Store(Protocol):
    def get_device(self, device_id: str) -> DeviceState | None: ...

    def get_experience(self, device_id: str) -> ExperienceState | None: ...

    def pending_experiences(self) -> Iterator[tuple[int, ExperienceState]]: ...


class Shell(Protocol):
    """What the lanes use of ``streams.shell.PipelineShell``."""

    @property
    def store(self) -> Store: ...

    def send_control(self, partition: int, key: str, cmd: dict[str, Any]) -> None: ...


@dataclass(frozen=True, slots=True)
class Job:
    device_id: str
    partition: int
    trigger: Trigger
    etag: int


@dataclass
class LaneStats:
    """Counters for tests, logs and benchmarks."""

    submitted: int = 0
    skipped: int = 0
    verdicts: int = 0
    apply_timeouts: int = 0
    lane_crashes: int = 0
    max_queue: int = 0
    #: seconds from submit to verdict sent, per verdict (the last 10,000)
    latencies: list[float] = field(default_factory=list)


def verdict_record(
    device_id: str, trigger: Trigger, verdict: Verdict, etag: int, at_ms: int
) -> dict[str, Any]:
    """The ``verdict`` control record the agent applies."""
    return {
        "op": "verdict",
        "device_id": device_id,
        "trigger": trigger.to_dict(),
        "verdict": verdict.to_dict(),
        "etag": etag,
        "at_ms": at_ms,
    }


def _still_pending(exp: ExperienceState | None, trigger: Trigger) -> bool:
    return exp is not None and exp.awaits_decision(trigger)


class Lanes:
    """One decision lane per device over a shared backend; see the module docstring."""

    def __init__(self, shell: Shell, backend: Backend, options: GeminiOptions) -> None:
        self.shell = shell
        self.backend = backend
        self.options = options
        self.stats = LaneStats()
        self._queues: dict[str, asyncio.Queue[tuple[Job, float]]] = {}
        self._queued: dict[str, set[str]] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._semaphore: asyncio.Semaphore | None = None
        self._closed = False

    # -- the shell's submit -------------------------------------------------------------------
    def submit(self, device_id: str, partition: int, trigger: Trigger, etag: int) -> None:
        """Queue ``trigger`` on the device's lane (called by the agent; returns at once)."""
        if self._closed:
            return
        queued = self._queued.setdefault(device_id, set())
        if trigger.event_id in queued:
            return
        queue = self._queues.get(device_id)
        if queue is None:
            queue = self._queues[device_id] = asyncio.Queue()
        queued.add(trigger.event_id)
        queue.put_nowait((Job(device_id, partition, trigger, etag), time.monotonic()))
        self.stats.submitted += 1
        self.stats.max_queue = max(self.stats.max_queue, queue.qsize())
        if device_id not in self._tasks:
            self._start_lane(device_id)

    def _start_lane(self, device_id: str) -> None:
        task = asyncio.get_running_loop().create_task(
            self._lane(device_id), name=f"guardian.lane.{device_id}"
        )
        self._tasks[device_id] = task
        task.add_done_callback(lambda t: self._lane_done(device_id, t))

    def _lane_done(self, device_id: str, task: asyncio.Task[None]) -> None:
        if self._tasks.get(device_id) is task:
            del self._tasks[device_id]
        if task.cancelled() or self._closed:
            return
        exc = task.exception()
        if exc is None:
            return
        self.stats.lane_crashes += 1
        logger.error("decision lane of %s failed", device_id, exc_info=exc)
        queue = self._queues.get(device_id)
        if queue is not None and not queue.empty():
            self._start_lane(device_id)

    # -- a lane -----------------------------------------------------------------------------------
    async def _lane(self, device_id: str) -> None:
        queue = self._queues[device_id]
        while True:
            try:
                job, submitted_at = queue.get_nowait()
            except asyncio.QueueEmpty:
                # no await between the empty check and the removal: submit() cannot slip in, and
                # a submit() right after this starts a new lane
                del self._queues[device_id]
                self._queued.pop(device_id, None)
                if self._tasks.get(device_id) is asyncio.current_task():
                    del self._tasks[device_id]
                return
            try:
                await self._decide(job, submitted_at)
            finally:
                self._queued.get(device_id, set()).discard(job.trigger.event_id)

    async def _decide(self, job: Job, submitted_at: float) -> None:
        if self._semaphore is None:
            self._semaphore = asyncio.Semaphore(self.options.concurrency)
        async with self._semaphore:
            store = self.shell.store
            live = store.get_experience(job.device_id)
            if live is None or not _still_pending(live, job.trigger):
                self.stats.skipped += 1
                return
            # a private copy taken at call time: the agent mutates the live state meanwhile
            exp = ExperienceState.from_json(live.to_json())
            dev = store.get_device(job.device_id)
            device = DeviceState.from_json(dev.to_json()) if dev is not None else None
            etag = exp.etag
            verdict = await self.backend.decide(exp, device, job.trigger)
        if self._closed:
            return
        at_ms = int(time.time() * 1000)
        self.shell.send_control(
            job.partition, job.device_id, verdict_record(job.device_id, job.trigger, verdict, etag, at_ms)
        )
        self.stats.verdicts += 1
        if len(self.stats.latencies) < 10_000:
            self.stats.latencies.append(time.monotonic() - submitted_at)
        await self._wait_applied(job)

    async def _wait_applied(self, job: Job) -> None:
        loop = asyncio.get_running_loop()
        give_up = loop.time() + self.options.apply_wait_ms / 1000
        pause = APPLY_POLL_MIN_S
        while _still_pending(self.shell.store.get_experience(job.device_id), job.trigger):
            if loop.time() >= give_up:
                self.stats.apply_timeouts += 1
                logger.warning(
                    "verdict for %s of %s not applied within %d ms; deciding the next trigger anyway",
                    job.trigger.event_id,
                    job.device_id,
                    self.options.apply_wait_ms,
                )
                return
            await asyncio.sleep(pause)
            pause = min(pause * 2, APPLY_POLL_MAX_S)

    # -- recovery and rebalancing ---------------------------------------------------------------
    def resubmit(self, found: Iterable[tuple[int, ExperienceState]]) -> int:
        """Submit the pending, undecided triggers of these (partition, experience) pairs."""
        count = 0
        for partition, exp in found:
            if exp.phase == "ended":
                continue
            for trigger in list(exp.pending):
                if trigger.event_id in exp.decided:
                    continue
                self.submit(exp.device_id, partition, trigger, exp.etag)
                count += 1
        return count

    async def resubmit_recovered(self) -> None:
        """After a table recovery: re-submit the pending triggers of the active partitions."""
        if getattr(self.shell, "tables", None) is None:
            return
        # every experience of this worker's partitions with pending triggers (a store that cannot
        # list them is an error, never an empty result)
        count = self.resubmit(self.shell.store.pending_experiences())
        if count:
            logger.info("re-submitted %d pending trigger(s) after recovery", count)

    def drop_partitions(self, partitions: set[int]) -> None:
        """Forget the queued jobs of revoked partitions (their new owner re-submits them)."""
        for device_id, queue in list(self._queues.items()):
            kept: list[tuple[Job, float]] = []
            while not queue.empty():
                item = queue.get_nowait()
                if item[0].partition in partitions:
                    self._queued.get(device_id, set()).discard(item[0].trigger.event_id)
                else:
                    kept.append(item)
            for item in kept:
                queue.put_nowait(item)

    # -- lifecycle -------------------------------------------------------------------------------
    def busy(self) -> int:
        """Lanes with work queued or in flight."""
        return len(self._tasks)

    async def drain(self, timeout_s: float) -> bool:
        """Wait until every lane is idle (tests, graceful stop); False when time ran out."""
        loop = asyncio.get_running_loop()
        give_up = loop.time() + timeout_s
        while self._tasks:
            if loop.time() >= give_up:
                return False
            await asyncio.sleep(0.01)
        return True

    async def stop(self) -> None:
        """Cancel every lane and close the backend (queued triggers stay pending in the table)."""
        self._closed = True
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        self._tasks.clear()
        self._queues.clear()
        self._queued.clear()
        await self.backend.aclose()


class LanesService(Service):
    """Starts with the faust app (after table recovery) and closes the lanes when it stops."""

    def __init__(self, lanes: Lanes, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.lanes = lanes

    async def on_stop(self) -> None:
        await self.lanes.stop()


def attach_lanes(
    app: Any,
    shell: Any,
    settings: Settings,
    *,
    backend: Backend | None = None,
    options: GeminiOptions | None = None,
) -> Lanes:
    """Make ``shell.outlets.submit`` enqueue on per-device lanes deciding with the Gemini backend.

    Registers the lanes with the app: a service stopped with it, a table-recovery callback that
    re-submits pending triggers, and the partition-revoke signal. Raises
    :class:`supervisor.gemini.GeminiConfigError` (a ``SettingsError``) when Gemini cannot be set up."""
    opts = options if options is not None else GeminiOptions.from_env()
    lanes = Lanes(shell, backend if backend is not None else GeminiBackend(settings, options=opts), opts)
    shell.outlets.submit = lanes.submit
    app.service(LanesService(lanes))
    # the ``devices`` table's values carry the experience (under ``"e"``)
    shell.tables.devices.on_recover(lanes.resubmit_recovered)

    def on_revoked(_sender: Any, revoked: Any = None, **__: Any) -> None:
        parts = {int(tp.partition) for tp in revoked or ()}
        if parts:
            lanes.drop_partitions(parts)

    app.on_partitions_revoked.connect(on_revoked)
    return lanes
