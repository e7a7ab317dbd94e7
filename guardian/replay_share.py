"""One job of a streamed replay: its share of the input (:class:`guardian.replay_spool.JobInput`)
put in order, run through a :class:`guardian.replay_engine.ReplayEngine` and written to its
output files (:func:`run_job`); with ``--jobs N``, each share in a process of its own (:func:`run_jobs`)."""

from __future__ import annotations

import itertools
import multiprocessing
import pickle
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from config.settings import Settings
from guardian.recorded import RecordedDecisions
from guardian.replay_engine import ReplayEngine, all_divergences, decider_for, fewer_collections
from guardian.replay_model import DeviceDecider
from guardian.replay_progress import Progress
from guardian.replay_spool import JobInput, Spool
from guardian.replay_states import states_file, write_states
from guardian.replay_summary import OUT_KINDS, SummaryCounts
from topics.envelope import Out


@dataclass
class _JobResult:
    counts: SummaryCounts
    records: int
    #: Kafka timestamps of the first and last records processed
    first_ts: int | None = None
    last_ts: int | None = None


def run_job(
    share: JobInput,
    tmp: Path,
    out_dir: Path,
    settings: Settings,
    mode: str,
    model_decider: DeviceDecider | None = None,
    states: bool = True,
    positions: bool = False,
    progress: Progress | None = None,
) -> _JobResult:
    """Replay one job's share into ``out_dir`` (its four output files and divergences.jsonl); with
    ``states``, the network and voice states the pipeline admitted go to :func:`states_file` for
    the report (without a report they are not looked for); with ``positions``, each output file
    ``F`` gets its ``F.pos``, the position of every line (:mod:`guardian.replay_jobs`)."""
    if mode == "model" and model_decider is None:
        from supervisor.sync import blocking_model_decider

        with blocking_model_decider(settings) as blocking:
            return run_job(share, tmp, out_dir, settings, mode, blocking, states, positions, progress)
    # on disk, read back by trigger (closed at the end; on an error, with the temporary folder)
    recorded = RecordedDecisions(share.recorded or ":memory:")
    decider, recorded_decider, model = decider_for(mode, recorded, model_decider)
    counts = SummaryCounts()
    names = [f"{k}.jsonl" for k in OUT_KINDS] + ([f"{k}.jsonl.pos" for k in OUT_KINDS] if positions else [])
    handles = {n: (out_dir / n).open("wb", buffering=1024 * 1024) for n in names}
    dumps = orjson.dumps
    try:
        writes = {k: handles[f"{k}.jsonl"].write for k in OUT_KINDS}
        at = {k: handles[f"{k}.jsonl.pos"].write for k in OUT_KINDS} if positions else None

        newline = orjson.OPT_APPEND_NEWLINE

        def emit(o: Out) -> None:
            writes[o.kind](dumps(o.value, option=newline))
            counts.add(o.kind, o.value)
            if at is not None:
                at[o.kind](engine.position())

        add_state, close_states = write_states(states_file(tmp, out_dir))
        try:
            engine = ReplayEngine(settings, decider, emit, add_state if states else None, model)
            total = progress_total(share)
            with fewer_collections():
                batches = share.ordered(tmp)
                if progress is not None:
                    batches = progress.counted(batches, total)
                engine.feed(itertools.chain.from_iterable(batches))
                engine.finish()
        finally:
            close_states()
    finally:
        for h in handles.values():
            h.close()
    path = out_dir / "divergences.jsonl"
    with path.open("wb") as fh:  # streamed: the divergences are never held
        for d in all_divergences(recorded, recorded_decider, _read_jsonl(out_dir / "decisions.jsonl")):
            fh.write(orjson.dumps(d) + b"\n")
            counts.divergences += 1
    recorded.close()
    if not counts.divergences:
        path.unlink()
    return _JobResult(counts, engine.records, engine.first_ts, engine.last_ts)


def progress_total(share: JobInput) -> int:
    """The rows a job will go through (runs on disk counted as they were spilled)."""
    return share.rows_total + len(share.chunk)


def _run_job_in_process(args: tuple[Path, Path, Path, Settings, str, bool]) -> _JobResult:
    share_file, tmp, out_dir, settings, mode, states = args
    with share_file.open("rb") as fh:
        share: JobInput = pickle.load(fh)
    return run_job(share, tmp, out_dir, settings, mode, states=states, positions=True)


def _read_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    with path.open("rb") as fh:
        for line in fh:
            yield orjson.loads(line)


def run_jobs(spool: Spool, tmp: Path, settings: Settings, mode: str, states: bool) -> list[_JobResult]:
    """Each job's share pickled to a file (its chunk and the names of its runs), replayed in its
    own process into ``tmp/job-N``."""
    tasks: list[tuple[Path, Path, Path, Settings, str, bool]] = []
    for j, share in enumerate(spool.jobs):
        job_dir = tmp / f"job-{j}"
        job_dir.mkdir()
        share_file = tmp / f"share-{j}"
        with share_file.open("wb") as fh:
            pickle.dump(share, fh, protocol=pickle.HIGHEST_PROTOCOL)
        spool.jobs[j] = JobInput(limit=spool.chunk_bytes)
        tasks.append((share_file, tmp, job_dir, settings, mode, states))
    ctx = multiprocessing.get_context("spawn")
    progress = spool.progress
    results: list[_JobResult] = []
    with ctx.Pool(len(tasks)) as pool:
        for done in pool.imap(_run_job_in_process, tasks):
            results.append(done)
            if progress is not None:
                progress.show(f"replaying in {len(tasks)} processes: {len(results)} done")
    return results
