"""What a simulated device physically is right now: :class:`DeviceState`, its security session,
where it is and goes, what it senses, and the phase progress displays show."""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any


class DeviceState:
    """The device's physical state; ``running`` is clear while its security session is paused."""

    def __init__(self) -> None:
        self.security = "idle"  # idle, running, paused, stopped
        self.docked = True
        self.current_area: str | None = None
        self.route: deque[str] = deque()
        #: area -> (dispatch_id, step_id) of a replan's move to it
        self.route_requests: dict[str, tuple[str, str]] = {}
        self.low_light = False
        self.voice_active = False
        self.connected = True
        self.person_areas: set[str] = set()
        self.winding_down = False
        #: for progress displays only
        self.phase = "idle"
        self.running = asyncio.Event()
        self.running.set()

    def voice_facts(self) -> dict[str, Any]:
        return {
            "pipeline_state": "listening" if self.voice_active else "idle",
            "voice_session_active": self.voice_active,
            "pipeline_busy": self.voice_active,
            "model_readiness": "ready",
        }
