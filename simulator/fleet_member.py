"""One device of a simulated fleet as the fleet tracks it: :class:`Member`, its experience, what
the pipeline said about it so far, and its phase; and :func:`experience_ids`, how its IDs are named."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from simulator.device import Device
from simulator.scenarios import Expect, Observed


@dataclass
class Member:
    """One device and its experience, as the fleet tracks it."""

    index: int
    device: Device
    scenario: str
    experience_id: str
    workflow_id: str
    areas: list[str]
    expect: Expect
    start_offset_ms: int
    seen: Observed = field(default_factory=Observed)
    accepted: asyncio.Event = field(default_factory=asyncio.Event)
    #: the experience's end entry arrived
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    plan: dict[str, Any] | None = None
    rejected_by_guardian: bool = False
    error: str | None = None
    canary_leaked: bool = False

    @property
    def device_id(self) -> str:
        return self.device.device_id

    @property
    def settled(self) -> bool:
        return (
            self.seen.status is not None
            or self.rejected_by_guardian
            or self.error is not None
            or (self.device.refused is not None)
        )

    @property
    def phase(self) -> str:
        if self.seen.status is not None:
            return f"ended: {self.seen.status}"
        if self.error is not None:
            return "error"
        if self.device.refused is not None or self.rejected_by_guardian:
            return "refused"
        if self.plan is None:
            return "starting"
        if not self.accepted.is_set():
            return "waiting for guardian"
        return self.device.phase


def experience_ids(device_id: str, scenario: str) -> tuple[str, str]:
    slug = scenario.lower().replace("-", "")
    return f"exp-{device_id}-{slug}", f"wf-{device_id}-{slug}"
