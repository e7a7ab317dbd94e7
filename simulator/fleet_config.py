"""What a simulated fleet runs: :class:`FleetConfig`, the options of ``guardian simulate``."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FleetConfig:
    """What ``guardian simulate`` runs."""

    devices: int = 20
    scenarios: tuple[str, ...] = ()
    mix: bool = False
    seed: int = 7
    speed: float = 1.0
    timeout_s: float = 300.0
    rate: float = 2.0
    patrol_seconds: float = 10.0
    device_prefix: str | None = None
    start_spread_s: float = 2.0
    areas_per_device: int = 3
    max_decisions: int = 3
    #: after the last experience ended, wait until no output arrived for this long (wall s)
    drain_s: float = 1.0
    #: devices publish device_context.v2 snapshots and answer device_context.refresh (§9)
    device_context: bool = True

    def prefix(self) -> str:
        return self.device_prefix if self.device_prefix is not None else f"sim{self.seed}-"
