"""How long a simulated device's actions take: :class:`Timing`, its simulated durations and its
observation rate during patrol."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Timing:
    """Simulated durations (ms) of the device's actions, and its observation rate during patrol."""

    rate: float = 2.0
    patrol_ms: int = 10_000
    travel_ms: int = 2_000
    ack_ms: int = 200
    check_ms: int = 300
    start_ms: int = 1_200
    stop_ms: int = 800
    dock_ms: int = 4_000
    pause_ms: int = 500
    speak_ms: int = 3_000

    def ticks(self) -> int:
        """Observation ticks in one area's patrol."""
        if self.rate <= 0:
            return max(1, round(self.patrol_ms / 1000))
        return max(1, round(self.rate * self.patrol_ms / 1000))

    def tick_ms(self) -> float:
        return self.patrol_ms / self.ticks()
