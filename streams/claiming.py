"""What the claims reader (:class:`streams.claims.ClaimsReader`) keeps of the claims it writes, one
object each: the claims under way (:class:`ClaimsUnderWay`), the claims found void
(:class:`VoidClaims`) and the round trips of those written (:class:`RoundTrips`)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

#: void claims remembered for plans in the merge at most (more: some a rebalance took away)
MAX_REFUSED = 10_000


@dataclass
class ClaimsUnderWay:
    """The claims this worker is writing, until each is settled: who asked for them since when,
    the tasks claiming them, and each device's turn (one claim of a device at a time)."""

    #: experience -> (device, monotonic time it was first asked for) of claims not settled yet
    pending: dict[str, tuple[str, float]] = field(default_factory=dict)
    #: the tasks claiming them
    tasks: set[asyncio.Task[None]] = field(default_factory=set)
    #: device -> its claims' turn (a lock, and how many claims of it wait or run)
    turns: dict[str, list[Any]] = field(default_factory=dict)


@dataclass
class VoidClaims:
    """The plans whose claim is void for the device's rate (forgotten once the plan leaves the
    merge; at most ``MAX_REFUSED``), and how many claims were found void."""

    #: (experience, device) of plans whose claim is void
    refused: set[tuple[str, str]] = field(default_factory=set)
    #: claims found void (their plans refused, counted as ``experience_rate`` dead letters)
    voided: int = 0

    def add(self, experience_id: str, device_id: str) -> None:
        """``device_id``'s claim on ``experience_id`` is void."""
        if len(self.refused) >= MAX_REFUSED:  # left by plans a rebalance took away: asked again
            self.refused.clear()
        self.refused.add((experience_id, device_id))
        self.voided += 1


@dataclass
class RoundTrips:
    """The claims written and read back, and their round trips (seconds, written + read back), for
    the log and the metrics (``on_round_trip``)."""

    on_round_trip: Callable[[float], None] | None = None
    claimed: int = 0
    last_round_trip_s: float = 0.0

    def done(self, seconds: float) -> None:
        """A claim is written and read back ``seconds`` after it was sent."""
        self.claimed += 1
        self.last_round_trip_s = seconds
        if self.on_round_trip is not None:
            self.on_round_trip(self.last_round_trip_s)
