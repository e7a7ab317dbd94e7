"""The faults of one chaos run, from its seed alone (no clock, no I/O): the same seed gives the same
schedule, so a failing run is rerun from the seed it printed.

Two shapes:

- ``storm``: a fault every 15-40 s for the run's duration, mostly SIGKILLs of a random worker; once
  a run a SIGTERM, a SIGSTOP held 20 s, a burst (three SIGKILLs 0.1-1 s apart, as faust's own
  stress killer sends them) and the broker stopped for 70 s;
- ``scale``: SIGKILLs only (each one a rebalance of a larger group), every 15-40 s.

After a worker dies the run starts it again under its own ID after 1-5 s, on its table folder or
(one time in three) on an empty one (a machine that lost its disk: tables recovered from the
changelogs), as a process supervisor would.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Literal

FaultKind = Literal["kill", "term", "stop", "burst", "broker"]
Shape = Literal["storm", "scale"]

#: the seconds between two faults
GAP_S = (15.0, 40.0)
#: no fault in the run's first seconds (the group forms, the first wave starts)
FIRST_AT_S = 10.0
STOP_HOLD_S = 20.0
BROKER_HOLD_S = 70.0
BURST_GAP_S = (0.1, 1.0)
BURST_KILLS = 3
REPLACE_AFTER_S = (1.0, 5.0)
#: a replacement worker starts on a fresh table folder this often (else on the dead one's)
FRESH_FOLDER_SHARE = 1 / 3
#: the kinds every storm holds once
ONCE: tuple[FaultKind, ...] = ("term", "stop", "burst", "broker")


@dataclass(frozen=True)
class Fault:
    """One fault: at ``at_s`` after the run's start, on worker slot ``slot`` (``kind`` broker: none).

    ``hold_s``: how long a stop or a broker outage lasts; ``gaps_s``: a burst's gaps between kills;
    ``replace_after_s`` and ``fresh_folder``: how the dead worker is replaced."""

    at_s: float
    kind: FaultKind
    slot: int
    hold_s: float = 0.0
    gaps_s: tuple[float, ...] = ()
    replace_after_s: float = 0.0
    fresh_folder: bool = False

    def describe(self) -> str:
        what = {
            "kill": f"SIGKILL worker slot {self.slot}",
            "term": f"SIGTERM worker slot {self.slot}",
            "stop": f"SIGSTOP worker slot {self.slot} for {self.hold_s:.0f} s",
            "burst": f"burst of {len(self.gaps_s) + 1} SIGKILLs from slot {self.slot}, "
            + ", ".join(f"{g:.2f}" for g in self.gaps_s)
            + " s apart",
            "broker": f"broker stopped for {self.hold_s:.0f} s",
        }[self.kind]
        return f"t+{self.at_s:.1f}s {what}"


def plan(seed: int, duration_s: float, workers: int, shape: Shape = "storm") -> list[Fault]:
    """The faults of a run of ``duration_s`` with ``workers`` workers.

    A storm holds each of :data:`ONCE` once whatever its length: a short run gets as many slots as
    it needs (its fault phase then outlasts ``duration_s``)."""
    if workers < 1:
        raise ValueError("a chaos run needs at least one worker")
    rng = random.Random(seed)
    times: list[float] = []
    t = FIRST_AT_S
    while t < duration_s:
        times.append(round(t, 3))
        t += rng.uniform(*GAP_S)
    if shape == "storm":
        while len(times) < len(ONCE):
            times.append(round(t, 3))
            t += rng.uniform(*GAP_S)
    kinds: list[FaultKind] = ["kill"] * len(times)
    if shape == "storm":
        for kind, index in zip(ONCE, rng.sample(range(len(times)), len(ONCE)), strict=True):
            kinds[index] = kind
    faults: list[Fault] = []
    for at, kind in zip(times, kinds, strict=True):
        slot = rng.randrange(workers)
        replace_after = round(rng.uniform(*REPLACE_AFTER_S), 3)
        fresh = rng.random() < FRESH_FOLDER_SHARE
        if kind == "stop":
            faults.append(Fault(at, kind, slot, hold_s=STOP_HOLD_S))
        elif kind == "broker":
            faults.append(Fault(at, kind, -1, hold_s=BROKER_HOLD_S))
        elif kind == "burst":
            gaps = tuple(round(rng.uniform(*BURST_GAP_S), 3) for _ in range(BURST_KILLS - 1))
            faults.append(
                Fault(at, kind, slot, gaps_s=gaps, replace_after_s=replace_after, fresh_folder=fresh)
            )
        else:
            faults.append(Fault(at, kind, slot, replace_after_s=replace_after, fresh_folder=fresh))
    return faults


def end_of(faults: list[Fault]) -> float:
    """When the last fault is over (its hold included), seconds after the start."""
    return max((f.at_s + f.hold_s + sum(f.gaps_s) for f in faults), default=0.0)
