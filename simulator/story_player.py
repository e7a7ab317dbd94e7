"""A simulated device playing its story: :class:`StoryPlayer` plays beats (observations, state
changes, invalid records, disconnects, bridge restarts, context snapshots) at their offsets."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import orjson

from simulator.clock import Clock
from simulator.device_records import LOW_LIGHT, NETWORK, PERSON, VOICE, DeviceRecords
from simulator.device_reports import StateReports
from simulator.device_state import DeviceState
from simulator.story import Beat


@dataclass(eq=False)
class StoryPlayer:
    """The device's story beats; ``cross_event_ids`` are the event IDs of records correlated to
    another device's experience (HG-12)."""

    records: DeviceRecords
    state: DeviceState
    reports: StateReports
    partner: tuple[str, str] | None
    canary: str
    cross_event_ids: list[str] = field(default_factory=list, init=False)
    n_restarts: int = field(default=0, init=False)

    @property
    def clock(self) -> Clock:
        return self.records.clock

    async def play(self, beats: Iterable[Beat]) -> None:
        elapsed = 0
        for beat in sorted(beats, key=lambda b: b.after_ms):
            if beat.after_ms > elapsed:
                await self.clock.sleep(beat.after_ms - elapsed)
                elapsed = beat.after_ms
            await self.play_beat(beat)

    async def play_beat(self, beat: Beat) -> None:
        """Play one story beat now."""
        p, r, s = beat.params, self.records, self.state
        if beat.kind == "observe":
            type_ = str(p["type"])
            facts = dict(p.get("facts") or {})
            if p.get("person"):
                s.person_areas.add(str(facts["area_id"]))
            correlation: Mapping[str, str] | None = None
            if p.get("cross_device") and self.partner is not None:
                exp_id, wf_id = self.partner
                correlation = {"experience_id": exp_id, "workflow_id": wf_id, "step_id": "patrol_areas"}
            scoped = bool(p.get("scoped", True))
            value = r.observation(type_, facts, story=True, scoped=scoped, correlation=correlation)
            if correlation is not None:
                self.cross_event_ids.append(str(value["event_id"]))
            await r.emit_obs(value)
        elif beat.kind == "state":
            if "low_light" in p:
                s.low_light = bool(p["low_light"])
                await r.emit_obs(
                    r.observation(LOW_LIGHT, {"low_light": s.low_light}, story=True, scoped=True)
                )
            if "voice" in p:
                s.voice_active = bool(p["voice"])
                await r.emit_obs(r.observation(VOICE, s.voice_facts(), story=True, scoped=False))
        elif beat.kind == "invalid":
            await r.outbox.emit("observations", self.invalid_record(str(p["variant"])), durable=False)
        elif beat.kind == "disconnect":
            s.connected = False
            r.outbox.go_offline()
            facts = {"connected": False, "session_state": "disconnected"}
            await r.emit_obs(r.observation(NETWORK, facts, story=True, scoped=False))
        elif beat.kind == "reconnect":
            s.connected = True
            await r.outbox.go_online()
            facts = {"connected": True, "session_state": "connected"}
            await r.emit_obs(r.observation(NETWORK, facts, story=True, scoped=False))
        elif beat.kind == "restart":
            await self.restart(int(p.get("down_ms", 2000)))
        elif beat.kind == "context":
            await self.reports.send_domains(p["domains"])
        else:
            raise ValueError(f"unknown beat kind {beat.kind!r}")

    async def restart(self, down_ms: int) -> None:
        """The bridge restarts: down for ``down_ms``, then its outbox relays its last records again
        (same event IDs), and the task manager re-reports its current task from a stale checkpoint
        (a new event ID with an old sequence), before the records buffered meanwhile go out."""
        r, outbox = self.records, self.records.outbox
        self.n_restarts += 1
        outbox.go_offline()
        await self.clock.sleep(down_ms)
        await outbox.resend_last()
        stale = max(1, outbox.last_sequence_sent - 2)
        value = {
            "event_id": f"te-{r.seed}-{r.device_id}-restart{self.n_restarts}",
            "device_id": r.device_id,
            "sequence": stale,
            "occurred_at_ms": self.clock.now_ms(),
            "task_id": f"task-{r.device_id}-patrol_areas",
            "experience_id": r.experience_id,
            "workflow_id": r.workflow_id,
            "step_id": "patrol_areas",
            "dispatch_id": None,
            "capability": "security_patrol",
            "operation": "patrol",
            "status": "progress",
            "reason_code": None,
            "evidence": None,
        }
        await outbox.send_now("task-events", orjson.dumps(value))
        await outbox.go_online()

    def invalid_record(self, variant: str) -> bytes:
        """The HG-11 records: each carries the canary where it must never be copied."""
        area = self.state.current_area or "2"
        base = self.records.observation(
            PERSON,
            {"area_id": area, "presence": "absent", "verification_state": "none"},
            story=True,
            scoped=True,
        )
        if variant == "bbox":
            base["facts"]["bbox"] = {"x": 120, "y": 64, "w": 88, "h": 190, "label": self.canary}
        elif variant == "nested_pin":
            base["facts"]["verification"] = {"method": "pin", "pin": self.canary}
        elif variant == "unknown_contract":
            base["type"] = "security.door_opened"
            base["facts"] = {"area_id": area, "door": "front"}
        elif variant == "too_large":
            base["facts"]["padding"] = self.canary + "x" * (20 * 1024)
        elif variant == "not_json":
            return f"not-json {self.canary} {{".encode()
        else:
            raise ValueError(f"unknown invalid variant {variant!r}")
        return orjson.dumps(base)
