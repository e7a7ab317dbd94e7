"""Sorted runs: ``guardian replay``'s sort in bounded memory, and its order (docs/CONTRACTS.md §2
rule 11) computed in two such sorts.

Rows are tuples compared as they are: what they sort by comes first, then a unique input sequence
number, so two rows never compare their payloads. :class:`Runs` keeps a sorted chunk in memory and
spills it to a *run* file (pickled batches) when it holds ``limit`` bytes; :meth:`Runs.batches`
merges the runs and the chunk (:func:`merge_batches`, at most ``fan_in`` files open at once).

The order needs each record's order time, the running maximum of its device's timestamps in its
topic in offset order (:class:`pipeline.order.OrderClocks`, the live merge's own clocks). So the
rows are first sorted by where they are in Kafka (:data:`StreamRow`: partition, key, topic, offset),
given their order times in that order (:func:`timed`), and sorted again by them (:data:`Row`).
"""

from __future__ import annotations

import bisect
import pickle
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.order import OrderClocks

#: (order time, tie, partition, offset, seq, suffix, topic, key, value, own, ts): the order of §2
#: rule 11 (``tie`` is the topic's rank), then the input sequence number (unique); ``own`` is False
#: for another job's plan, kept only for the experience→device index; ``ts`` the Kafka timestamp
Row = tuple[int, int, int, int, int, str, str, bytes | None, bytes | None, bool, int]
#: (partition, key or b"", tie, offset, seq, ts, suffix, topic, key, value, own): each device's
#: records of a topic together, in offset order
StreamRow = tuple[int, bytes, int, int, int, int, str, str, bytes | None, bytes | None, bool]

#: rows per pickled batch in a run file
RUN_BATCH = 256
#: rows per slice of the in-memory chunk handed to the merge
CHUNK_SLICE = 4096
#: payload bytes a row is counted for beyond its value's
RECORD_OVERHEAD = 400


def slices(rows: list[Any], size: int = RUN_BATCH) -> Iterator[list[Any]]:
    """``rows`` in consecutive slices of ``size``."""
    for i in range(0, len(rows), size):
        yield rows[i : i + size]


def write_run(batches: Iterable[list[Any]], path: Path) -> Path:
    """Sorted ``batches`` into a run file, a pickled list of at most ``RUN_BATCH`` rows at a time."""
    with path.open("wb") as fh:
        for batch in batches:
            for part in slices(batch) if len(batch) > RUN_BATCH else (batch,):
                if part:
                    pickle.dump(part, fh, protocol=pickle.HIGHEST_PROTOCOL)
    return path


def read_run(path: Path) -> Iterator[list[Any]]:
    """A run file's batches, in order."""
    with path.open("rb", buffering=256 * 1024) as fh:
        while True:
            try:
                batch: list[Any] = pickle.load(fh)
            except EOFError:
                return
            yield batch


def merge_batches(sources: list[Iterator[list[Any]]]) -> Iterator[list[Any]]:
    """Merge sources, each sorted batches of unique rows, into sorted batches.

    Each step takes from every source the rows up to the smallest of the last rows of their current
    batches (no row still to come from any source is smaller), sorts them together (the sort merges
    the sorted pieces it is given) and yields them: the comparisons run in C, batch by batch, not a
    Python step per row as ``heapq.merge`` takes. The source whose batch ends at that bound is
    emptied, so every step moves on by at least one batch."""
    heads: list[list[Any]] = []  # [batch, next index, the source]
    for source in sources:
        first = next((b for b in source if b), None)
        if first is not None:
            heads.append([first, 0, source])
    while len(heads) > 1:
        bound = min(h[0][-1] for h in heads)
        out: list[Any] = []
        for h in heads:
            batch, i = h[0], h[1]
            j = bisect.bisect_right(batch, bound, i)
            if j > i:
                out.extend(batch[i:j] if i or j < len(batch) else batch)
                h[1] = j
        out.sort()
        yield out
        kept: list[list[Any]] = []
        for h in heads:
            if h[1] < len(h[0]):
                kept.append(h)
                continue
            refill = next((b for b in h[2] if b), None)
            if refill is not None:
                kept.append([refill, 0, h[2]])
        heads = kept
    if heads:
        batch, i, source = heads[0]
        yield batch[i:] if i else batch
        yield from (b for b in source if b)


@dataclass
class Runs:
    """Rows sorted in bounded memory: sorted run files and one chunk in memory."""

    runs: list[Path] = field(default_factory=list)
    chunk: list[Any] = field(default_factory=list)
    chunk_bytes: int = 0
    #: chunk bytes before it is spilled to a run
    limit: int = 48 * 1024 * 1024

    def add(self, row: Any, size: int, folder: Path) -> None:
        """A row of ``size`` bytes; the chunk goes to a run file in ``folder`` once full (its path is
        made then only: a path made per row took about 5 % of a replay's CPU)."""
        self.chunk.append(row)
        self.chunk_bytes += size
        if self.chunk_bytes >= self.limit:
            self.spill(folder / f"sorted-{id(self)}-{len(self.runs)}")

    def spill(self, path: Path) -> None:
        self.chunk.sort()
        self.runs.append(write_run((self.chunk,), path))
        self.chunk = []
        self.chunk_bytes = 0

    def batches(self, tmp: Path, fan_in: int) -> Iterator[list[Any]]:
        """Every row in order, in sorted batches (runs merged, at most ``fan_in`` files open at
        once; run files are removed once merged into bigger ones)."""
        self.chunk.sort()
        runs = list(self.runs)
        n = 0
        while len(runs) + (1 if self.chunk else 0) > fan_in:
            group, runs = runs[:fan_in], runs[fan_in:]
            n += 1
            runs.append(
                write_run(merge_batches([read_run(p) for p in group]), tmp / f"merged-{n}-{id(self)}")
            )
            for p in group:
                p.unlink()
        sources: list[Iterator[list[Any]]] = [read_run(p) for p in runs]
        if self.chunk:
            sources.append(slices(self.chunk, CHUNK_SLICE))
        return merge_batches(sources)


def timed(batches: Iterable[list[StreamRow]]) -> Iterator[tuple[Row, int]]:
    """Rows in :data:`StreamRow` order, each as a :data:`Row` with its order time, and its size."""
    order_time = OrderClocks().order_time
    for batch in batches:
        for partition, _, tie, offset, seq, ts, suffix, topic, key, value, own in batch:
            row = (
                order_time(partition, key, tie, ts),
                tie,
                partition,
                offset,
                seq,
                suffix,
                topic,
                key,
                value,
                own,
                ts,
            )
            yield row, RECORD_OVERHEAD + (len(value) if value is not None else 0)


def in_order(stream: Runs, tmp: Path, fan_in: int) -> Iterator[list[Row]]:
    """The rows of ``stream`` (:data:`StreamRow`) in the order of §2 rule 11, in sorted batches;
    what does not fit in memory goes to run files in a folder of its own under ``tmp``."""
    work = Path(tempfile.mkdtemp(prefix="order-", dir=tmp))
    if stream.runs and stream.chunk:
        stream.spill(work / "first")  # (read back from disk: one chunk in memory at a time)
    ordered = Runs(limit=stream.limit)
    for row, size in timed(stream.batches(work, fan_in)):
        ordered.add(row, size, work)
    stream.chunk = []
    for p in stream.runs:
        p.unlink(missing_ok=True)
    stream.runs = []
    return ordered.batches(work, fan_in)
