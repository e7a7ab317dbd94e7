"""The simulated clock: epoch milliseconds that run ``speed`` times faster than the wall clock.

It starts at the wall clock's now, so simulated time is never behind real time (a live worker
confirms quiet debounce changes on the wall clock, and must not see them as overdue). Its
readings are also the records' Kafka timestamps (their receive time, docs/CONTRACTS.md §2 rule 4).
Brokers refuse timestamps too far in the future (``log.message.timestamp.after.max.ms``, one hour
by default on Kafka 4): keep ``(speed - 1) * run length`` under that.
"""

from __future__ import annotations

import asyncio
import time
from typing import Protocol


class Clock(Protocol):
    """What a device needs of time."""

    def now_ms(self) -> int: ...

    async def sleep(self, sim_ms: float) -> None: ...


class SimClock:
    """Simulated epoch ms = start + (monotonic elapsed) x speed."""

    def __init__(self, speed: float = 1.0, start_ms: int | None = None) -> None:
        if speed <= 0:
            raise ValueError("speed must be positive")
        self.speed = float(speed)
        self.start_ms = int(time.time() * 1000) if start_ms is None else start_ms
        self._m0 = time.monotonic()

    def now_ms(self) -> int:
        return self.start_ms + int((time.monotonic() - self._m0) * 1000.0 * self.speed)

    def wall_s(self, sim_ms: float) -> float:
        """Wall seconds that ``sim_ms`` simulated milliseconds take."""
        return max(0.0, sim_ms / 1000.0 / self.speed)

    async def sleep(self, sim_ms: float) -> None:
        await asyncio.sleep(self.wall_s(sim_ms))
