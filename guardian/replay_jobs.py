"""``guardian replay --jobs N``: how many processes, and the jobs' outputs put back in one order.

One job replays its devices in the order of the whole replay (docs/CONTRACTS.md §2 rule 11: order
time, then the topic's rank, partition, offset and input order: the first five fields of a
:data:`guardian.runs.Row`), then confirms its devices' pending changes in device-ID order. A
record's order time depends only on its device's records of its topic, which are all in the job
that replays the device (plans, which every job reads, too), so it is the same with any ``--jobs``.
Each output line a job writes is paired with the *position* of what caused it, a text that sorts
as that order does; merging the jobs' files by position gives, line for line, what ``--jobs 1``
writes.
"""

from __future__ import annotations

import contextlib
import heapq
import os
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from guardian.recorded import divergence_order


def available_cpus() -> int:
    """The CPUs this process may run on (at least 1)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not on Linux
        return max(1, os.cpu_count() or 1)


def bounded_jobs(requested: int, cpus: int) -> tuple[int, str | None]:
    """The jobs to run for ``--jobs requested`` on ``cpus`` CPUs, and a warning when fewer: more
    processes than CPUs add memory (each holds its devices' state and input chunk), not speed."""
    if requested <= cpus:
        return requested, None
    return cpus, f"--jobs {requested} is more than the {cpus} CPU(s) available: replaying with --jobs {cpus}"


def row_position(order_ts: int, tie: int, partition: int, offset: int, seq: int) -> bytes:
    """The position of an input row's outputs (fixed width hex: sorts as the row order)."""
    return b"0%016x%02x%016x%016x%016x\n" % (order_ts, tie, partition, offset, seq)


def end_position(device_id: str) -> bytes:
    """The position of the outputs confirmed at the end of the input for ``device_id`` (after
    every row's, in device-ID order: UTF-8 bytes in hex sort as the text does)."""
    return b"1" + device_id.encode("utf-8", "surrogatepass").hex().encode() + b"\n"


def _positioned(lines: Path, positions: Path) -> Iterator[tuple[bytes, bytes]]:
    with lines.open("rb") as out, positions.open("rb") as pos:
        for line, at in zip(out, pos, strict=True):
            yield at, line


def merge_outputs(job_dirs: list[Path], name: str, target: IO[bytes]) -> None:
    """The jobs' ``name`` files (each with its ``name.pos``) into ``target``, in replay order."""
    sources = [_positioned(d / name, d / f"{name}.pos") for d in job_dirs if (d / name).exists()]
    for _, line in heapq.merge(*sources, key=lambda pair: pair[0]):
        target.write(line)


def merge_divergences(job_dirs: list[Path], target: Path) -> None:
    """The jobs' divergences, grouped as one job writes them (:func:`guardian.recorded.divergence_order`:
    by device, each device's in the order its one job met them; unreadable records last, by where
    they are), merged as they stream by; no file when there are none."""
    sources: list[Iterator[bytes]] = []
    with contextlib.ExitStack() as stack:
        for d in job_dirs:
            part = d / "divergences.jsonl"
            if part.exists():
                sources.append(iter(stack.enter_context(part.open("rb"))))
        if not sources:
            return
        with target.open("wb") as out:
            for line in heapq.merge(*sources, key=divergence_order):
                out.write(line)
