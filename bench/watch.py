"""Watching a measured process work through a topic: its group's commits and its CPU time."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from bench import kafka_ops

PIPELINE_TIMEOUT_S = 900.0


@dataclass
class Watched:
    """(monotonic s, committed total) at every change of the committed total, from the first advance
    to the end (when everything was committed at once: from the last poll that saw nothing
    committed); (wall-clock s, the process's CPU seconds so far) at every poll."""

    commits: list[tuple[float, int]] = field(default_factory=list)
    cpu: list[tuple[float, float]] = field(default_factory=list)


def commit_rate(samples: list[tuple[float, int]]) -> float:
    """Records committed per second between the first and the last commit sample."""
    (t_first, c_first), (t_last, c_last) = samples[0], samples[-1]
    return (c_last - c_first) / (t_last - t_first) if t_last > t_first else 0.0


async def watch(
    bootstrap: str,
    partitions: int,
    worker: kafka_ops.Worker,
    topic: str,
    expected: int,
    group: str,
    on_first: Callable[[], None] | None = None,
) -> Watched:
    """Poll ``group``'s commits on ``topic`` until it has committed all of it, and ``worker``'s CPU
    time meanwhile; RuntimeError when the worker exits, TimeoutError after ``PIPELINE_TIMEOUT_S``."""
    ends = await kafka_ops.end_offsets(bootstrap, [topic], partitions)
    target = sum(ends.values())
    if target < expected:
        raise RuntimeError(f"only {target} of {expected} records are on {topic}")
    out = Watched()
    last = -1
    deadline = time.monotonic() + PIPELINE_TIMEOUT_S
    async with kafka_ops.GroupWatch(bootstrap, group) as group_watch:
        base: int | None = None
        before_first = time.monotonic()
        while True:
            committed = sum((await group_watch.committed([topic])).values())
            now = time.monotonic()
            cpu = kafka_ops.proc_cpu_s(worker.pid)
            if cpu is not None:
                out.cpu.append((time.time(), cpu))
            if base is None:
                base = committed
            if committed == base:
                before_first = now
            if committed != last and committed > base:
                if not out.commits and on_first is not None:
                    on_first()
                out.commits.append((now, committed))
                last = committed
            if committed >= target:
                if len(out.commits) < 2:
                    out.commits = [(before_first, base), (now, committed)]
                return out
            if not worker.alive():
                raise RuntimeError(f"the worker exited:\n{worker.log_tail()}")
            if now > deadline:
                raise TimeoutError(
                    f"waited {PIPELINE_TIMEOUT_S:.0f} s for group {group} to commit the {target} records "
                    f"of {topic}: {committed} committed"
                )
            await asyncio.sleep(0.1)
