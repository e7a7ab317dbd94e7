"""The physical actions of a simulated device: :class:`Actions` carries out one request (of its
plan or of a dispatch), acknowledged first and with physical evidence once the action has finished."""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from simulator.clock import Clock
from simulator.device_records import DeviceRecords
from simulator.device_reports import StateReports
from simulator.device_state import DeviceState
from simulator.device_timing import Timing


@dataclass(eq=False)
class Actions:
    """The device's actions on its security session, its movement, air cleaning and speech."""

    records: DeviceRecords
    state: DeviceState
    reports: StateReports
    timing: Timing
    #: a seeded stream of its own: story timing never shifts routine records and vice versa
    rng: random.Random

    @property
    def clock(self) -> Clock:
        return self.records.clock

    def jitter(self, ms: int) -> float:
        return ms * self.rng.uniform(0.85, 1.15)

    async def security_start(self, step_id: str, dispatch_id: str | None) -> None:
        cap, op = "security_patrol", "start"
        te = self.records.task_event
        await te(cap, op, "accepted", step_id=step_id, dispatch_id=dispatch_id, ack=True)
        await self.clock.sleep(self.jitter(self.timing.start_ms))
        self.state.security, self.state.docked = "running", False
        await te(cap, op, "completed", step_id=step_id, dispatch_id=dispatch_id, signal="security.started")

    async def security_stop(self, step_id: str, dispatch_id: str | None) -> None:
        cap, op = "security_patrol", "stop"
        te = self.records.task_event
        await te(cap, op, "accepted", step_id=step_id, dispatch_id=dispatch_id, ack=True)
        await self.clock.sleep(self.jitter(self.timing.stop_ms))
        self.state.security = "stopped"
        self.state.running.set()
        await te(cap, op, "completed", step_id=step_id, dispatch_id=dispatch_id, signal="security.stopped")

    async def return_to_station(self, step_id: str, dispatch_id: str | None) -> None:
        cap, op = "movement", "return_to_station"
        te = self.records.task_event
        await te(cap, op, "accepted", step_id=step_id, dispatch_id=dispatch_id, ack=True)
        self.state.phase = "returning"
        await te(cap, op, "started", step_id=step_id, dispatch_id=dispatch_id)
        await self.clock.sleep(self.jitter(self.timing.dock_ms))
        self.state.docked, self.state.current_area = True, None
        await te(
            cap, op, "completed", step_id=step_id, dispatch_id=dispatch_id, signal="movement.station_charging"
        )

    async def move(self, area: str, step_id: str) -> None:
        """A plan's move to a room: acknowledged, travelled, arrived (physical evidence)."""
        cap, op = "movement", "move_to_room"
        await self.records.task_event(cap, op, "accepted", step_id=step_id, ack=True)
        self.state.docked = False
        await self.clock.sleep(self.jitter(self.timing.travel_ms))
        self.state.current_area = area
        await self.records.task_event(
            cap, op, "completed", step_id=step_id, signal="movement.arrived", area_id=area
        )

    async def _invalid_transition(self, cap: str, op: str, step_id: str, dispatch_id: str | None) -> bool:
        """Refuse a request the security session's state does not allow (always False)."""
        await self.records.task_event(
            cap, op, "blocked", step_id=step_id, dispatch_id=dispatch_id, reason_code="invalid_transition"
        )
        return False

    async def execute(self, req: Mapping[str, Any], dispatch_id: str | None) -> bool:
        """One request; whether it succeeded."""
        cap, op, step_id = str(req.get("capability")), str(req.get("operation")), str(req.get("step_id"))
        t, s, te = self.timing, self.state, self.records.task_event
        if (cap, op) == ("security_patrol", "pause"):
            if s.security != "running":
                return await self._invalid_transition(cap, op, step_id, dispatch_id)
            await te(cap, op, "accepted", step_id=step_id, dispatch_id=dispatch_id, ack=True)
            s.running.clear()
            s.phase = "paused"
            await self.clock.sleep(self.jitter(t.pause_ms))
            s.security = "paused"
            await te(cap, op, "paused", step_id=step_id, dispatch_id=dispatch_id, signal="security.paused")
            return True
        if (cap, op) == ("security_patrol", "resume"):
            if s.security != "paused":
                return await self._invalid_transition(cap, op, step_id, dispatch_id)
            await te(cap, op, "accepted", step_id=step_id, dispatch_id=dispatch_id, ack=True)
            await self.clock.sleep(self.jitter(t.pause_ms))
            s.security = "running"
            s.phase = "running"
            await te(cap, op, "resumed", step_id=step_id, dispatch_id=dispatch_id, signal="security.resumed")
            s.running.set()
            return True
        if (cap, op) == ("security_patrol", "stop"):
            await self.security_stop(step_id, dispatch_id)
            return True
        if (cap, op) == ("movement", "return_to_station"):
            await self.return_to_station(step_id, dispatch_id)
            return True
        if (cap, op) == ("device_context", "refresh"):
            await self.reports.answer_refresh()
            return True
        if (cap, op) == ("movement", "move_to_room"):  # a plan's step (a replan's moves: DispatchHandler)
            await self.move(str((req.get("args") or {}).get("area_id")), step_id)
            return True
        if cap == "air_cleaning":
            await te(cap, op, "accepted", step_id=step_id, dispatch_id=dispatch_id, ack=True)
            await self.clock.sleep(self.jitter(t.check_ms))
            signal = "cleaning.stopped" if op == "stop" else None
            await te(cap, op, "completed", step_id=step_id, dispatch_id=dispatch_id, signal=signal)
            return True
        if (cap, op) == ("voice_content", "speak"):
            await te(cap, op, "accepted", step_id=step_id, dispatch_id=dispatch_id, ack=True)
            await self.clock.sleep(self.jitter(t.speak_ms))
            await te(
                cap,
                op,
                "completed",
                step_id=step_id,
                dispatch_id=dispatch_id,
                signal="tts.playback_completed",
            )
            return True
        await te(cap, op, "failed", step_id=step_id, dispatch_id=dispatch_id, reason_code="unsupported")
        return False
