"""Which cores the benchmark's processes run on: the measured worker on a core of its own.

A deployment gives a worker its own core; on the bench's machine the broker and the load
generator would otherwise take turns on the worker's, and its figures would be the machine's. So
the bench keeps itself (the load generator, the passthrough's client aside) and what it starts
(the broker, Kafka's tools) on the other cores, and pins the measured processes (the worker, the
floors, the passthrough while it runs, the micro-benchmarks and the replay) to the last core
allowed. On a machine with one core it says it cannot, and pins nothing.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Layout:
    """The measured processes' cores and everyone else's; ``why_not`` when nothing is pinned."""

    worker: frozenset[int]
    others: frozenset[int]
    why_not: str | None = None

    @property
    def pinned(self) -> bool:
        return self.why_not is None

    def as_dict(self) -> dict[str, object]:
        if not self.pinned:
            return {"pinned": False, "why_not": self.why_not}
        return {"pinned": True, "worker_cores": sorted(self.worker), "other_cores": sorted(self.others)}

    def describe(self) -> str:
        if not self.pinned:
            return f"cores: nothing pinned ({self.why_not})"
        return (
            f"cores: the measured worker on {_cores(self.worker)}, the broker and the load generator "
            f"on {_cores(self.others)}"
        )


def _cores(cores: Iterable[int]) -> str:
    listed = sorted(cores)
    return ("core " if len(listed) == 1 else "cores ") + ",".join(str(c) for c in listed)


def plan(allowed: Iterable[int]) -> Layout:
    """The layout on the cores this process may use: the last one for the measured worker."""
    cores = sorted(set(allowed))
    if len(cores) < 2:
        return Layout(
            frozenset(cores),
            frozenset(cores),
            why_not=f"{len(cores)} core allowed: the worker cannot have a core of its own",
        )
    return Layout(frozenset(cores[-1:]), frozenset(cores[:-1]))


def current() -> Layout:
    """The layout on the cores this process may use now."""
    return plan(os.sched_getaffinity(0))


def pin(pid: int, cores: frozenset[int]) -> None:
    """Every thread of process ``pid`` on ``cores`` (threads it starts later inherit it)."""
    tasks = Path(f"/proc/{pid}/task")
    tids = [int(t.name) for t in tasks.iterdir()] if tasks.exists() else [pid]
    for tid in tids:
        with contextlib.suppress(ProcessLookupError):  # a thread that has just ended
            os.sched_setaffinity(tid, cores)


@contextlib.contextmanager
def running_on(cores: frozenset[int]) -> Iterator[None]:
    """Within: this thread (and what it starts meanwhile) on ``cores``; restored on exit."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cores)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)
