"""One simulated home robot: the device side of the wire contract, honestly played.

A :class:`Device` receives its plan (bytes, as the planner published it), validates it against its
own capability catalog (the gate: device policy is authoritative, an invalid plan does not run) and
follows it: task events with increasing ``sequence`` (``command_ack`` first, physical evidence only
when the simulated action has finished), routine observations that reflect its own state, the
beats of its scenario's story, and the dispatches that reach its ``inbox``. Everything it sends goes
through its :class:`Outbox` (durable: it re-sends its last 50 records with the same event IDs after
a bridge restart, and buffers while the AWS IoT session is down).

The device owns its identity, its gate and its run; it delegates the rest: the records it sends
(:mod:`simulator.device_records`), its physical state (:mod:`simulator.device_state`), its routine
observations and context snapshots (:mod:`simulator.device_reports`), its physical actions
(:mod:`simulator.device_actions`), its plan and patrol (:mod:`simulator.plan_follower`), its story
(:mod:`simulator.story_player`), its dispatches (:mod:`simulator.dispatch_handler`) and the tasks of
its run (:mod:`simulator.device_tasks`).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import orjson

from simulator.clock import Clock
from simulator.dependency_order import topo_order as topo_order
from simulator.device_actions import Actions
from simulator.device_records import DeviceRecords
from simulator.device_reports import StateReports
from simulator.device_state import DeviceState
from simulator.device_tasks import TaskRunner
from simulator.device_timing import Timing as Timing
from simulator.dispatch_handler import DispatchHandler
from simulator.outbox import Outbox, Transport
from simulator.plan_follower import PlanFollower
from simulator.story import Story
from simulator.story_player import StoryPlayer
from topics.gate import Admitted, Gate


class Device:
    """One robot with its bridge. ``phase`` is for progress displays only."""

    def __init__(
        self,
        device_id: str,
        *,
        seed: int,
        story: Story,
        transport: Transport,
        clock: Clock,
        gate: Gate,
        timing: Timing,
        partner: tuple[str, str] | None = None,
        send_context: bool = True,
    ) -> None:
        self.device_id = device_id
        self.story = story
        self.gate = gate
        self.refused: str | None = None
        self.canary = canary = f"CANARY-{seed}-{device_id}"
        self.records = DeviceRecords(device_id, seed, clock, Outbox(transport, device_id, clock))
        self.state = DeviceState()
        self.reports = StateReports(self.records, self.state, story, canary=canary, send_context=send_context)
        self.player = StoryPlayer(self.records, self.state, self.reports, partner=partner, canary=canary)
        self.runner = TaskRunner(self.state)
        # separate seeded streams: story timing never shifts routine records and vice versa
        rng_timing = random.Random(f"{seed}:{device_id}:timing")
        actions = Actions(self.records, self.state, self.reports, timing, rng_timing)
        self.steps = PlanFollower(
            self.records, self.state, self.reports, actions, self.player, story, timing, self.runner
        )
        self.dispatches = DispatchHandler(self.records, self.state, actions, self.runner)

    # ------------------------------------------------------------------ what the fleet reads
    @property
    def phase(self) -> str:
        return self.state.phase

    @property
    def crashed(self) -> bool:
        return self.runner.crashed

    @property
    def log(self) -> list[str]:
        """Every task event sent, as ``capability.operation:status[:signal]``."""
        return self.records.log

    # ------------------------------------------------------------------ life cycle
    def accept_plan(self, plan_bytes: bytes) -> bool:
        """Validate the plan against the device's own catalog; False (and ``refused``) when invalid."""
        verdict = self.gate.admit(
            "plans",
            self.device_id,
            plan_bytes,
            source_topic="device",
            partition=0,
            offset=0,
            received_at_ms=self.records.clock.now_ms(),
        )
        if not isinstance(verdict, Admitted):
            self.refused = verdict.dead_letter.detail
            self.state.phase = "refused"
            return False
        r = self.records
        r.plan = orjson.loads(plan_bytes)
        r.experience_id = str(r.plan["experience_id"])
        r.workflow_id = str(r.plan["workflow_id"])
        return True

    async def send_domains(self, domains: Mapping[str, Mapping[str, Any]]) -> None:
        """Send a snapshot of the domains the story gives now (whatever ``send_context`` says)."""
        await self.reports.send_domains(domains)

    async def obey(self, dispatch: Mapping[str, Any]) -> None:
        """Carry out one dispatch of this device's experience; requests in ``depends_on`` order."""
        await self.dispatches.obey(dispatch)

    async def run(self, plan_bytes: bytes, started: Callable[[], Awaitable[bool]] | None = None) -> None:
        """Follow the plan and obey dispatches until docked (and the story has played out).

        The plan runs only once ``started`` says the pipeline started it (its goal); meanwhile the
        device obeys what is dispatched to it (a context refresh, a question). A plan the pipeline
        blocked or refused is never played: the device stands down, still obeying what is
        dispatched to it (a question may arrive after the end), until the fleet stops it."""
        if not self.accept_plan(plan_bytes):
            return
        runner, state = self.runner, self.state
        inbox = asyncio.create_task(self.dispatches.obey_inbox())
        inbox.add_done_callback(runner.on_done)
        plan_task: asyncio.Task[None] | None = None
        try:
            if started is not None and not await started():
                state.phase = "stood down"
                await inbox
                return
            await self.reports.publish_context()
            state.phase = "running"
            plan_task = runner.plan_task = asyncio.create_task(self.steps.follow())
            plan_task.add_done_callback(runner.on_done)
            await runner.finished.wait()
            while not runner.crashed:
                pending = [t for t in runner.tasks if not t.done()]
                if not pending:
                    break
                await asyncio.wait(pending)
        finally:
            tasks = [t for t in (inbox, plan_task, *runner.tasks) if t is not None]
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            if state.phase not in ("refused", "stood down"):
                state.phase = "docked" if state.docked else state.phase
