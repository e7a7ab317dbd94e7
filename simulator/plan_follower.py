"""A simulated device following its plan: :class:`PlanFollower` carries out the plan's steps in
dependency order (the patrol among them: area by area, observing at its rate and playing the story
beats anchored to each area) and ends the run when the last one is done."""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from simulator.clock import Clock
from simulator.dependency_order import topo_order
from simulator.device_actions import Actions
from simulator.device_records import DeviceRecords
from simulator.device_reports import StateReports
from simulator.device_state import DeviceState
from simulator.device_tasks import TaskRunner
from simulator.device_timing import Timing
from simulator.story import Anchor, Story
from simulator.story_player import StoryPlayer


@dataclass(eq=False)
class PlanFollower:
    """The steps of the device's accepted plan, one after the other; ``leg`` counts the areas its
    patrol has set out for."""

    records: DeviceRecords
    state: DeviceState
    reports: StateReports
    actions: Actions
    player: StoryPlayer
    story: Story
    timing: Timing
    runner: TaskRunner
    leg: int = field(default=-1, init=False)

    @property
    def clock(self) -> Clock:
        return self.records.clock

    async def follow(self) -> None:
        for step in topo_order(self.records.plan.get("steps") or ()):
            await self.run_step(step)
        self.runner.finish()

    async def run_step(self, step: Mapping[str, Any]) -> None:
        cap, op, step_id = str(step["capability"]), str(step["operation"]), str(step["step_id"])
        act = self.actions
        if (cap, op) == ("security_patrol", "check"):
            await self.records.task_event(cap, op, "accepted", step_id=step_id, ack=True)
            await self.clock.sleep(act.jitter(self.timing.check_ms))
            await self.records.task_event(cap, op, "completed", step_id=step_id)
        elif (cap, op) == ("security_patrol", "start"):
            areas = (step.get("args") or {}).get("area_ids") or self.records.plan.get("areas") or []
            self.state.route = deque(str(a) for a in areas)
            await act.security_start(step_id, None)
        elif (cap, op) == ("security_patrol", "patrol"):
            await self.patrol(step_id)
        elif (cap, op) == ("security_patrol", "stop"):
            await act.security_stop(step_id, None)
        elif (cap, op) == ("movement", "return_to_station"):
            await act.return_to_station(step_id, None)
        else:
            await act.execute(step, None)

    async def patrol(self, step_id: str) -> None:
        cap, op = "security_patrol", "patrol"
        te, s = self.records.task_event, self.state
        await te(cap, op, "started", step_id=step_id)
        t = self.timing
        while s.route:
            await s.running.wait()
            area = s.route.popleft()
            self.leg += 1
            await self.clock.sleep(self.actions.jitter(t.travel_ms))
            await s.running.wait()
            s.current_area = area
            requested = s.route_requests.pop(area, None)
            if requested is not None:
                await te(
                    "movement",
                    "move_to_room",
                    "completed",
                    step_id=requested[1],
                    dispatch_id=requested[0],
                    signal="movement.arrived",
                    area_id=area,
                )
            else:
                await te(cap, op, "progress", step_id=step_id, signal="movement.arrived", area_id=area)
            ticks = t.ticks()
            anchors: dict[int, list[Anchor]] = {}
            for anchor in self.story.anchors_for(self.leg):
                anchors.setdefault(min(ticks - 1, int(anchor.fraction * ticks)), []).append(anchor)
            # ticks on an absolute schedule: the time sending takes does not slow the rate down
            due = float(self.clock.now_ms())
            for tick in range(ticks):
                if not s.running.is_set():
                    await s.running.wait()
                    due = float(self.clock.now_ms())
                for anchor in anchors.get(tick, ()):
                    self.runner.spawn(self.player.play(anchor.beats))
                due += t.tick_ms()
                await self.clock.sleep(max(0.0, due - self.clock.now_ms()))
                if not s.running.is_set():
                    await s.running.wait()
                    due = float(self.clock.now_ms())
                if t.rate > 0:
                    await self.reports.routine()
            await te(cap, op, "progress", step_id=step_id, signal="security.area_patrolled", area_id=area)
            await self.reports.publish_context()
        await te(cap, op, "completed", step_id=step_id)
