"""The records a simulated device reports of its experience: :class:`DeviceRecords` builds its
observations and task events, numbers them and sends them through its outbox."""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

import orjson

from simulator.clock import Clock
from simulator.outbox import Outbox

PERSON = "security.person_detected"
LOW_LIGHT = "vision.low_light_changed"
NETWORK = "network.aws_iot_session_changed"
VOICE = "voice_llm.pipeline_state_changed"
ROUTINE_TYPES = (PERSON, LOW_LIGHT, NETWORK, VOICE)
SCOPED_ROUTINE = frozenset({PERSON, LOW_LIGHT})

_SOURCES = {
    PERSON: "DeviceAgent.WssVisionObserver",
    LOW_LIGHT: "DeviceAgent.WssVisionObserver",
    NETWORK: "DeviceAgent.AwsIotBridge",
    VOICE: "DeviceAgent.VoicePipeline",
    "user.cancel_requested": "DeviceAgent.UserInput",
}
_DEFAULT_SOURCE = "DeviceAgent.SecurityManager"


class DeviceRecords:
    """The experience a device plays (its accepted plan), and the numbered records it sends about it."""

    def __init__(self, device_id: str, seed: int, clock: Clock, outbox: Outbox) -> None:
        self.device_id = device_id
        self.seed = seed
        self.clock = clock
        self.outbox = outbox
        # a seeded stream of its own: story timing never shifts routine records and vice versa
        self.rng = random.Random(f"{seed}:{device_id}:routine")
        # the experience
        self.plan: dict[str, Any] = {}
        self.experience_id = ""
        self.workflow_id = ""
        # counters
        self.sequence = 0
        self.n_routine = 0
        self.n_story = 0
        #: every task event sent, as ``capability.operation:status[:signal]``
        self.log: list[str] = []

    def _correlation(self) -> dict[str, str]:
        return {
            "experience_id": self.experience_id,
            "workflow_id": self.workflow_id,
            "step_id": "patrol_areas",
        }

    def observation(
        self,
        type_: str,
        facts: Mapping[str, Any],
        *,
        story: bool,
        scoped: bool,
        correlation: Mapping[str, str] | None = None,
        rng: random.Random | None = None,
    ) -> dict[str, Any]:
        """A docs/CONTRACTS.md §4 observation as the device observed it a moment ago."""
        r = rng or self.rng
        if story:
            self.n_story += 1
            event_id = f"obs-{self.seed}-{self.device_id}-s{self.n_story:05d}"
        else:
            self.n_routine += 1
            event_id = f"obs-{self.seed}-{self.device_id}-r{self.n_routine:06d}"
        delay = r.randrange(20, 250)
        value: dict[str, Any] = {
            "event_id": event_id,
            "device_id": self.device_id,
            "type": type_,
            "source": _SOURCES.get(type_, _DEFAULT_SOURCE),
            "observed_at_ms": max(0, self.clock.now_ms() - delay),
            "freshness_ms": delay,
            "privacy_class": "semantic_only",
            "facts": dict(facts),
        }
        if type_ == PERSON:
            value["confidence"] = round(r.uniform(0.8, 0.99), 2)
        if correlation is not None:
            value["correlation"] = dict(correlation)
        elif scoped:
            value["correlation"] = self._correlation()
        return value

    async def emit_obs(self, value: dict[str, Any]) -> None:
        await self.outbox.emit("observations", orjson.dumps(value))

    async def task_event(
        self,
        capability: str,
        operation: str,
        status: str,
        *,
        step_id: str | None,
        dispatch_id: str | None = None,
        signal: str | None = None,
        area_id: str | None = None,
        ack: bool = False,
        reason_code: str | None = None,
    ) -> None:
        """Send a §5 task event with the next sequence."""
        self.sequence += 1
        evidence: dict[str, Any] | None = None
        if signal is not None:
            evidence = {"kind": "physical", "signal": signal}
            if area_id is not None:
                evidence["area_id"] = area_id
        elif ack:
            evidence = {"kind": "command_ack"}
        value = {
            "event_id": f"te-{self.seed}-{self.device_id}-{self.sequence:05d}",
            "device_id": self.device_id,
            "sequence": self.sequence,
            "occurred_at_ms": self.clock.now_ms(),
            "task_id": f"task-{self.device_id}-{step_id or operation}",
            "experience_id": self.experience_id,
            "workflow_id": self.workflow_id,
            "step_id": step_id,
            "dispatch_id": dispatch_id,
            "capability": capability,
            "operation": operation,
            "status": status,
            "reason_code": reason_code,
            "evidence": evidence,
        }
        self.log.append(f"{capability}.{operation}:{status}" + (f":{signal}" if signal else ""))
        await self.outbox.emit("task-events", orjson.dumps(value), sequence=self.sequence)
