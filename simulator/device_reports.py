"""What a simulated device reports of its own state: :class:`StateReports` sends its routine
observations and its device_context.v2 snapshots (its own, or the domains its story gives)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from simulator.device_context import own_snapshot, story_snapshot
from simulator.device_records import LOW_LIGHT, NETWORK, PERSON, ROUTINE_TYPES, SCOPED_ROUTINE, DeviceRecords
from simulator.device_state import DeviceState
from simulator.story import Story


@dataclass(eq=False)
class StateReports:
    """The device's routine observations and context snapshots, and its answer to a refresh."""

    records: DeviceRecords
    state: DeviceState
    story: Story
    canary: str
    #: the bridge publishes device_context.v2 snapshots (and answers device_context.refresh)
    send_context: bool
    n_context: int = field(default=0, init=False)

    async def routine(self) -> None:
        """One routine observation, reflecting the device's state (state-only for the pipeline)."""
        s = self.state
        type_ = ROUTINE_TYPES[self.records.rng.randrange(len(ROUTINE_TYPES))]
        facts: dict[str, Any]
        if type_ == PERSON:
            if s.current_area is None:
                return
            present = s.current_area in s.person_areas
            facts = {
                "area_id": s.current_area,
                "presence": "detected" if present else "absent",
                "verification_state": "pending" if present else "none",
                "light": "low" if s.low_light else "normal",
            }
        elif type_ == LOW_LIGHT:
            facts = {"low_light": s.low_light}
        elif type_ == NETWORK:
            facts = {
                "connected": s.connected,
                "session_state": "connected" if s.connected else "disconnected",
            }
        else:
            facts = s.voice_facts()
        record = self.records.observation(type_, facts, story=False, scoped=type_ in SCOPED_ROUTINE)
        await self.records.emit_obs(record)

    def context_snapshot(self) -> bytes:
        """A device_context.v2 snapshot of the device's battery, map and movement (§9.1)."""
        self.n_context += 1
        return own_snapshot(
            self.records.device_id,
            self.n_context,
            self.records.clock.now_ms(),
            plan=self.records.plan,
            docked=self.state.docked,
            current_area=self.state.current_area,
        )

    async def send_domains(self, domains: Mapping[str, Mapping[str, Any]]) -> None:
        """Send a snapshot of the domains the story gives now (whatever ``send_context`` says)."""
        self.n_context += 1
        r = self.records
        value = story_snapshot(r.device_id, self.n_context, r.clock.now_ms(), domains, canary=self.canary)
        await r.outbox.emit("device-context", value, durable=False)

    async def publish_context(self) -> None:
        """Send a snapshot now (when the fleet has device context on and the story lets it)."""
        if self.send_context and self.story.sends_context:
            await self.records.outbox.emit("device-context", self.context_snapshot(), durable=False)

    async def answer_refresh(self) -> None:
        """A ``device_context.refresh``: the story's answer (or none), else the device's own snapshot."""
        story = self.story
        if not story.answers_refresh:
            return
        if story.refresh_reply is None:
            await self.publish_context()
            return
        await self.records.clock.sleep(story.refresh_delay_ms)
        await self.send_domains(story.refresh_reply)
