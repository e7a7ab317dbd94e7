"""``guardian replay FILE... --out DIR`` (docs/CONTRACTS.md §12): the live pipeline's logic, offline.

Reads ``kcat -C -J`` lines (files, ``-`` for stdin, gzip-compressed or not), orders the input records
as the live worker processes them (docs/CONTRACTS.md §2 rule 11, ``pipeline.order``: each device's
records of a topic in offset order, by order time across topics), runs them through the very same
:class:`pipeline.runner.Processor` the worker runs, confirms still-pending debounce changes at the
end, and writes the outputs, ``summary.json`` and ``report.html``. This module holds the replay's
entry points: :func:`replay_records` (a list of records, in memory) and :func:`replay_files`
(files, streamed), and the writers of their outputs and report.

At scale it streams, in bounded memory:

1. *Spool*: every line is read and checked once; input records are cut into chunks (about
   ``CHUNK_BYTES`` of payload each), each chunk sorted in memory by where its records are in Kafka
   (each device's records of a topic together, in offset order) and, when the input does not fit in
   one chunk, written to a temporary *run* file. No file is assumed to be sorted
   (:mod:`guardian.replay_spool`).
2. *Order*: the runs are merged batch by batch (``guardian.runs``, at most ``MAX_FAN_IN`` open at
   once), each record given its order time, and sorted again by it the same way; a record seen
   twice (same topic, partition and offset: overlapping exports) sorts next to its copy and is read
   once, so dedup needs no memory. (Two records at the same coordinates with different timestamps,
   keys or payloads are not copies of one Kafka record: both are judged.)
3. *Process*: records go through the processor one by one; outputs are written to their files as
   they come and counted for the summary; the dedup memory forgets keys older than the dedup window
   (as the live worker's sweep does), so memory holds per-device state, not the input
   (:mod:`guardian.replay_engine`; the counts: :mod:`guardian.replay_summary`; one job's run:
   :mod:`guardian.replay_share`).

``--jobs N`` splits the devices (a stable hash of the record key, the device ID) over N processes,
each with its own runs and outputs, merged at the end into ``--jobs 1``'s order
(:mod:`guardian.replay_jobs`). Plans of other jobs' devices still
update each job's experience→device index, so cross-device checks see what a single job sees.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from config.settings import Settings
from guardian.recorded import RecordedDecisions
from guardian.replay_engine import ReplayEngine, all_divergences, decider_for, fewer_collections, input_rows
from guardian.replay_input import (
    InputRecord,
    ReplayInputError,
    SpoolBudget,
    open_input,
    read_kcat_lines,
)
from guardian.replay_jobs import merge_divergences, merge_outputs
from guardian.replay_model import DeviceDecider
from guardian.replay_out import OUTPUT_FILES, OutputError, clear_outputs, input_conflict, staged_outputs
from guardian.replay_progress import Progress
from guardian.replay_provenance import describe, made_at, made_from
from guardian.replay_share import run_job, run_jobs
from guardian.replay_spool import CHUNK_BYTES, Spool, job_of
from guardian.replay_states import read_states, states_file
from guardian.replay_summary import OUT_KINDS, SummaryCounts
from report.bands import DeviceStateChange
from topics.envelope import Out
from topics.names import TopicNames


# ----------------------------------------------------------------------------------------------
# in memory: a list of records in, every output in lists (tests, the demo)
# ----------------------------------------------------------------------------------------------
@dataclass
class ReplayResult:
    outs: dict[str, list[dict[str, Any]]]
    summary: dict[str, Any]
    divergences: list[dict[str, Any]]
    #: network and voice states the pipeline admitted (they write no timeline entry): the report's bands
    device_states: list[DeviceStateChange] = field(default_factory=list)


def replay_records(
    records: list[InputRecord],
    *,
    settings: Settings,
    mode: str | None = None,
    model_decider: DeviceDecider | None = None,
) -> ReplayResult:
    """Run input records through the live pipeline's logic, in memory; pure apart from the registry load."""
    recorded = RecordedDecisions()
    for r in records:
        if r.suffix == "decisions":
            recorded.add_value(r.value, r.topic, r.partition, r.offset)
    if mode is None:
        mode = "recorded" if recorded.readable() else "rules"
    decider, recorded_decider, model = decider_for(mode, recorded, model_decider)
    outs: dict[str, list[dict[str, Any]]] = {k: [] for k in OUT_KINDS}
    counts = SummaryCounts()

    def collect(o: Out) -> None:
        outs[o.kind].append(o.value)
        counts.add(o.kind, o.value)

    device_states: list[DeviceStateChange] = []
    engine = ReplayEngine(settings, decider, collect, device_states.append, model)
    rows = input_rows(records)
    with fewer_collections():
        engine.feed(rows)
        engine.finish()
    divergences = list(all_divergences(recorded, recorded_decider, outs["decisions"]))
    recorded.close()
    counts.divergences = len(divergences)
    return ReplayResult(
        outs=outs, summary=counts.summary(mode), divergences=divergences, device_states=device_states
    )


def write_outputs(result: ReplayResult, out_dir: Path) -> None:
    """An in-memory replay's outputs, summary and report into ``out_dir``, published whole."""
    with staged_outputs(out_dir) as stage:
        for kind in OUT_KINDS:
            with (stage / f"{kind}.jsonl").open("wb") as fh:
                for value in result.outs[kind]:
                    fh.write(orjson.dumps(value) + b"\n")
        if result.divergences:
            with (stage / "divergences.jsonl").open("wb") as fh:
                for d in result.divergences:
                    fh.write(orjson.dumps(d) + b"\n")
        (stage / "summary.json").write_bytes(orjson.dumps(result.summary, option=orjson.OPT_INDENT_2))
        write_report(stage, result.device_states, made_from=f"From {out_dir.name or '.'}/:")


def write_report(
    out_dir: Path, device_states: Iterable[DeviceStateChange] = (), *, made_from: str = ""
) -> Path | None:
    """The incident report next to the outputs (report.html); ``device_states``: the network and
    voice states the pipeline admitted, drawn as bands; ``made_from``: what the outputs were made from."""
    from report.html import render_report_from_dir

    return render_report_from_dir(out_dir, device_states=device_states, made_from=made_from)


# ----------------------------------------------------------------------------------------------
# streaming: spool (sorted runs on disk), merge, process, outputs straight to files
# ----------------------------------------------------------------------------------------------
@dataclass
class StreamedReplay:
    """What a streamed replay did: input records, the summary and the number of divergences."""

    records: int
    summary: dict[str, Any]
    #: what it was made from (summary.json's ``made_from``)
    made_from: dict[str, Any] = field(default_factory=dict)


def check_inputs(files: list[str], out_dir: Path) -> None:
    """Before anything is read or written: every input file is there (ReplayInputError), and
    none is one of the outputs the replay would replace (OutputError)."""
    for name in files:
        if name == "-":
            continue
        path = Path(name)
        if not path.exists():
            raise ReplayInputError(f"{name}: no such file")
        if path.is_dir():
            raise ReplayInputError(f"{name} is a directory; name a kcat -C -J file")
    if out_dir.exists() and not out_dir.is_dir():
        raise OutputError(f"--out {out_dir} is a file, not a directory")
    conflict = input_conflict(files, out_dir)
    if conflict is not None:
        raise OutputError(conflict)


def replay_files(
    files: list[str],
    out_dir: Path,
    *,
    settings: Settings,
    mode: str | None = None,
    jobs: int = 1,
    chunk_bytes: int = CHUNK_BYTES,
    report: bool = True,
    model_decider: DeviceDecider | None = None,
    progress: Progress | None = None,
    env: dict[str, str] | None = None,
    budget: SpoolBudget | None = None,
) -> StreamedReplay:
    """Replay ``files`` into ``out_dir`` in bounded memory (see the module docstring) and bounded
    temporary disk (``budget``, by default :class:`guardian.replay_input.SpoolBudget`'s bounds).

    Every output is written into a staging folder and replaces the previous ones in ``out_dir``
    only when the replay succeeds (:mod:`guardian.replay_out`): if anything fails, ``out_dir`` is
    left as it was. Raises ReplayInputError for unreadable input, OutputError when ``out_dir``
    cannot be used. ``env``: where ``SOURCE_DATE_EPOCH`` is looked for (default: the process's)."""
    check_inputs(files, out_dir)
    at = made_at(os.environ if env is None else env)
    with staged_outputs(out_dir) as stage, tempfile.TemporaryDirectory(prefix="guardian-replay-") as tmp_name:
        tmp = Path(tmp_name)
        spool = Spool(TopicNames(settings.topic_prefix), tmp, jobs, chunk_bytes, progress, budget)
        with fewer_collections():  # (the rows of a chunk live until it is spilled)
            for name in files:
                spool.add_file(name)
        if mode is None:
            mode = "recorded" if spool.has_decisions else "rules"
        counts = SummaryCounts()
        if jobs == 1:
            results = [
                run_job(spool.jobs[0], tmp, stage, settings, mode, model_decider, report, False, progress)
            ]
        else:
            job_dirs = [tmp / f"job-{j}" for j in range(jobs)]
            results = run_jobs(spool, tmp, settings, mode, report)
            for kind in OUT_KINDS:
                with (stage / f"{kind}.jsonl").open("wb") as target:
                    merge_outputs(job_dirs, f"{kind}.jsonl", target)
            merge_divergences(job_dirs, stage / "divergences.jsonl")
        for done in results:
            counts.merge(done.counts)
        firsts = [r.first_ts for r in results if r.first_ts is not None]
        lasts = [r.last_ts for r in results if r.last_ts is not None]
        records = sum(r.records for r in results)
        made = made_from(files, records, min(firsts, default=None), max(lasts, default=None), at=at)
        summary = counts.summary(mode)
        (stage / "summary.json").write_bytes(
            orjson.dumps({**summary, "made_from": made}, option=orjson.OPT_INDENT_2)
        )
        if report:
            job_dirs = [stage] if jobs == 1 else [tmp / f"job-{j}" for j in range(jobs)]
            states = read_states(states_file(tmp, d) for d in job_dirs)
            write_report(stage, states, made_from=describe(made))
    return StreamedReplay(records, summary, made)


__all__ = [
    "CHUNK_BYTES",
    "OUTPUT_FILES",
    "OUT_KINDS",
    "InputRecord",
    "OutputError",
    "ReplayEngine",
    "ReplayInputError",
    "ReplayResult",
    "StreamedReplay",
    "SummaryCounts",
    "check_inputs",
    "clear_outputs",
    "job_of",
    "open_input",
    "read_kcat_lines",
    "replay_files",
    "replay_records",
    "write_outputs",
    "write_report",
]
