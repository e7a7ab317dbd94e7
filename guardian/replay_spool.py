"""A streamed replay's spool, :class:`Spool`: every input line read and checked once, each record
routed to the job that replays its device (:func:`job_of`), and each job's share of the input
(:class:`JobInput`) cut into sorted runs on disk."""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from guardian import runs
from guardian.recorded import RecordedDecisions, decision_device
from guardian.replay_input import ReadMeter, SpoolBudget, input_lines
from guardian.replay_progress import Progress
from guardian.runs import RECORD_OVERHEAD, Row, StreamRow
from pipeline.order import RANK
from topics.names import TopicNames

#: payload bytes (plus a per-record allowance) per sorted chunk of the spool
CHUNK_BYTES = 48 * 1024 * 1024
#: run files merged at once; more are merged into bigger runs first
MAX_FAN_IN = 128


def job_of(key: bytes | None, jobs: int) -> int:
    """The job (of ``jobs``) that replays the device keyed ``key``: a stable hash, so a device's
    records all go to one job."""
    if jobs == 1 or key is None:
        return 0
    return zlib.crc32(key) % jobs


@dataclass
class JobInput(runs.Runs):
    """One job's share of the input (:data:`guardian.runs.StreamRow`): sorted runs on disk and/or
    one sorted chunk in memory, and the recorded decisions."""

    #: the share's recorded decisions (guardian.recorded), when the input has any
    recorded: Path | None = None
    #: rows spilled to the runs
    rows_total: int = 0

    def ordered(self, tmp: Path) -> Iterator[list[Row]]:
        """Every row in the order of §2 rule 11, in sorted batches (its runs are used up)."""
        return runs.in_order(self, tmp, MAX_FAN_IN)


class Spool:
    """Reads every input file once, checks each line, routes rows to jobs and spills sorted runs."""

    def __init__(
        self,
        names: TopicNames,
        tmp: Path,
        jobs: int,
        chunk_bytes: int,
        progress: Progress | None = None,
        budget: SpoolBudget | None = None,
    ) -> None:
        self.names = names
        self.progress = progress
        #: the temporary disk the runs may take (replay_input.SpoolBudget)
        self.budget = budget if budget is not None else SpoolBudget(ReadMeter())
        self._reading = ""
        self.tmp = tmp
        self.jobs = [JobInput(limit=chunk_bytes) for _ in range(jobs)]
        self.chunk_bytes = chunk_bytes
        self.seq = 0
        self.records = 0
        self.has_decisions = False
        self._runs = 0
        self._recorded: dict[int, RecordedDecisions] = {}

    def add_file(self, name: str) -> None:
        jobs = len(self.jobs)
        seq = self.seq
        tie_of = RANK.get
        single = self.jobs[0] if jobs == 1 else None
        limit = self.chunk_bytes
        progress = self.progress
        self._reading = name
        meter = self.budget.meter
        for suffix, topic, partition, offset, ts, key, value in input_lines(name, self.names, meter):
            if progress is not None and seq & 0xFFFF == 0:
                progress.reading(name, seq)
            tie = tie_of(suffix)
            if tie is None:
                if suffix == "decisions":
                    device, read = decision_device(key, value)
                    self._recorded_of(job_of(device, jobs)).add(read, topic, partition, offset)
                    self.has_decisions = self.has_decisions or isinstance(read, dict)
                continue
            seq += 1
            row = (partition, key or b"", tie, offset, seq, ts, suffix, topic, key, value, True)
            size = RECORD_OVERHEAD + (len(value) if value is not None else 0)
            if single is not None:  # one job: the common case, inlined
                single.chunk.append(row)
                single.chunk_bytes += size
                if single.chunk_bytes >= limit:
                    self._spill(0)
                continue
            j = job_of(key, jobs)
            self._add(j, row, size)
            if tie == 0:  # a plan: every other job keeps its claim on the experience ID
                foreign = (partition, key or b"", tie, offset, seq, ts, suffix, topic, key, value, False)
                for other in range(jobs):
                    if other != j:
                        self._add(other, foreign, size)
        self.records += seq - self.seq
        self.seq = seq
        for recorded in self._recorded.values():
            recorded.close()
        self._recorded.clear()

    def _recorded_of(self, j: int) -> RecordedDecisions:
        """Job ``j``'s recorded decisions, on disk (open while a file is read)."""
        recorded = self._recorded.get(j)
        if recorded is None:
            share = self.jobs[j]
            share.recorded = share.recorded or self.tmp / f"recorded-{j}.sqlite"
            recorded = self._recorded[j] = RecordedDecisions(share.recorded)
        return recorded

    def _add(self, j: int, row: StreamRow, size: int) -> None:
        share = self.jobs[j]
        share.chunk.append(row)
        share.chunk_bytes += size
        if share.chunk_bytes >= self.chunk_bytes:
            self._spill(j)

    def _spill(self, j: int) -> None:
        """Sort job ``j``'s chunk into a run file."""
        share = self.jobs[j]
        share.rows_total += len(share.chunk)
        self._runs += 1
        run = self.tmp / f"run-{j}-{self._runs}"
        share.spill(run)
        self.budget.spend(run.stat().st_size, self._reading)
