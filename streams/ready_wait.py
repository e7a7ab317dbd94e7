"""The worker's wait to be ready (:class:`ReadyWait`), on the readiness clock
(``streams.stalls.WaitClock``): since when it waits, the recovery progress seen meanwhile, whether
the wait was told, when the worker last asked to rejoin its group, and the waits told so far.
:class:`streams.health.Readiness` finds what is missing; this object times the wait."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class ReadyWait:
    """The current wait to be ready and the waits told so far (times on the readiness clock)."""

    #: time since which the worker has been waiting to be ready (None: ready)
    waiting_since: float | None = None
    #: recovery progress seen last (records still to read), and when it last moved
    last_remaining: int | None = None
    last_progress: float = 0.0
    #: the current wait was told (``Readiness.on_timeout``) already
    told: bool = False
    #: waits told so far (``guardian_not_ready_timeouts_total``)
    timeouts: int = 0
    #: when the worker, without an assignment, last asked to rejoin its group
    rejoined: float = float("-inf")

    def begin(self, now: float) -> None:
        """A wait starts (or goes on) at ``now``: recovery progress is looked for afresh."""
        if self.waiting_since is None:
            self.waiting_since = now
        self.last_progress = now
        self.last_remaining = None

    def end(self) -> None:
        """The worker is ready: no wait, nothing told."""
        self.waiting_since = None
        self.told = False

    def progressed(self, remaining: int | None, now: float) -> None:
        """The recovery has ``remaining`` records still to read at ``now`` (None: no assignment)."""
        if remaining is not None and remaining != self.last_remaining:
            self.last_remaining = remaining
            self.last_progress = now

    def stuck_since(self) -> float:
        """Since when the wait has seen no recovery progress."""
        assert self.waiting_since is not None
        return max(self.waiting_since, self.last_progress)
