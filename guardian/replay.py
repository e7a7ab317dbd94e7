"""``guardian replay FILE... --out DIR`` (docs/CONTRACTS.md §12): the live pipeline's logic, offline.

Reads ``kcat -C -J`` lines (files, ``-`` for stdin, gzip-compressed or not), orders the input records
as the live worker processes them (docs/CONTRACTS.md §2 rule 11, ``pipeline.order``: each device's
records of a topic in offset order, by order time across topics), runs them through the very same
:class:`pipeline.runner.Processor` the worker runs, confirms still-pending debounce changes at the
end, and writes the outputs, ``summary.json`` and ``report.html``.

At scale it streams, in bounded memory:

1. *Spool*: every line is read and checked once; input records are cut into chunks (about
   ``CHUNK_BYTES`` of payload each), each chunk sorted in memory by where its records are in Kafka
   (each device's records of a topic together, in offset order) and, when the input does not fit in
   one chunk, written to a temporary *run* file. No file is assumed to be sorted.
2. *Order*: the runs are merged batch by batch (``guardian.runs``, at most ``MAX_FAN_IN`` open at
   once), each record given its order time, and sorted again by it the same way; a record seen
   twice (same topic, partition and offset: overlapping exports) sorts next to its copy and is read
   once, so dedup needs no memory. (Two records at the same coordinates with different timestamps,
   keys or payloads are not copies of one Kafka record: both are judged.)
3. *Process*: records go through the processor one by one; outputs are written to their files as
   they come and counted for the summary; the dedup memory forgets keys older than the dedup window
   (as the live worker's sweep does), so memory holds per-device state, not the input.

``--jobs N`` splits the devices (a stable hash of the record key, the device ID) over N processes,
each with its own runs and outputs, merged at the end into ``--jobs 1``'s order
(:mod:`guardian.replay_jobs`). Plans of other jobs' devices still
update each job's experience→device index, so cross-device checks see what a single job sees.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import itertools
import multiprocessing
import os
import pickle
import tempfile
import zlib
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from config.settings import Settings
from guardian import runs
from guardian.recorded import RecordedDecider, RecordedDecisions, decision_device
from guardian.replay_input import (
    InputRecord,
    ReadMeter,
    ReplayInputError,
    SpoolBudget,
    input_lines,
    open_input,
    read_kcat_lines,
)
from guardian.replay_jobs import end_position, merge_divergences, merge_outputs, row_position
from guardian.replay_model import DeferredDecisions, DeviceDecider
from guardian.replay_out import OUTPUT_FILES, OutputError, clear_outputs, input_conflict, staged_outputs
from guardian.replay_progress import Progress
from guardian.replay_provenance import describe, made_at, made_from
from guardian.runs import RECORD_OVERHEAD, Row, StreamRow
from pipeline.core import Pipeline
from pipeline.order import RANK, in_order
from pipeline.runner import Processor, ReplayStore
from pipeline.step import Decider
from report.bands import AdmittedStates, DeviceStateChange
from supervisor import rules
from topics.envelope import Out
from topics.gate import Admitted
from topics.names import TopicNames
from topics.records import ExperiencePlan
from topics.registry import load_registry

_TIE_ORDER = RANK
_OBSERVATIONS_TIE = _TIE_ORDER["observations"]
#: the outputs, in the order of their files
OUT_KINDS = ("decisions", "dispatch", "timeline", "deadletter")
#: payload bytes (plus a per-record allowance) per sorted chunk of the spool
CHUNK_BYTES = 48 * 1024 * 1024
#: run files merged at once; more are merged into bigger runs first
MAX_FAN_IN = 128
#: how often (records) the dedup memory forgets keys older than the window
_SWEEP_EVERY = 4096


# ----------------------------------------------------------------------------------------------
# the summary, counted as outputs stream by
# ----------------------------------------------------------------------------------------------
@dataclass
class SummaryCounts:
    """Counts per output and per drop reason, and each experience's status (§12); mergeable."""

    counts: Counter[str] = field(default_factory=Counter)
    drops: Counter[str] = field(default_factory=Counter)
    deadletters: Counter[str] = field(default_factory=Counter)
    kinds: Counter[str] = field(default_factory=Counter)
    backends: Counter[str] = field(default_factory=Counter)
    experiences: dict[str, str] = field(default_factory=dict)
    divergences: int = 0

    def add(self, kind: str, value: dict[str, Any]) -> None:
        self.counts[kind] += 1
        if kind == "timeline":
            exp_id = value.get("experience_id")
            stage = value.get("stage")
            if stage == "drop":
                self.drops[value["drop_reason"]] += 1
            if not exp_id:
                return
            if stage == "end":
                self.experiences[exp_id] = str(value.get("status"))
            else:  # a goal, or a plan waiting for its preconditions (its refresh dispatch)
                self.experiences.setdefault(exp_id, "active")
        elif kind == "deadletter":
            self.deadletters[value["reason_code"]] += 1
        elif kind == "decisions":
            self.kinds[value["decision"]] += 1
            self.backends[value["backend"]] += 1

    def merge(self, other: SummaryCounts) -> None:
        for mine, theirs in (
            (self.counts, other.counts),
            (self.drops, other.drops),
            (self.deadletters, other.deadletters),
            (self.kinds, other.kinds),
            (self.backends, other.backends),
        ):
            mine.update(theirs)
        for exp_id, status in other.experiences.items():
            if exp_id not in self.experiences or status != "active":
                self.experiences[exp_id] = status
        self.divergences += other.divergences

    def summary(self, mode: str) -> dict[str, Any]:
        return {
            "decisions_mode": mode,
            "counts": {k: self.counts.get(k, 0) for k in OUT_KINDS},
            "drop_reasons": dict(sorted(self.drops.items())),
            "deadletter_reasons": dict(sorted(self.deadletters.items())),
            "decisions_by_kind": dict(sorted(self.kinds.items())),
            "decisions_by_backend": dict(sorted(self.backends.items())),
            "experiences": dict(sorted(self.experiences.items())),
            "divergences": self.divergences,
        }


# ----------------------------------------------------------------------------------------------
# the engine: ordered rows through the processor, outputs handed to a sink
# ----------------------------------------------------------------------------------------------
class ReplayEngine:
    """One replay's state: the processor over an in-memory store, fed rows in order. ``decider``
    decides inline (rules, recorded); with ``model`` instead, triggers are queued and decided as a
    live model lane decides them (:class:`guardian.replay_model.DeferredDecisions`)."""

    def __init__(
        self,
        settings: Settings,
        decider: Decider | None,
        emit: Callable[[Out], None],
        on_state: Callable[[DeviceStateChange], None] | None = None,
        model: DeviceDecider | None = None,
    ) -> None:
        if (decider is None) == (model is None):
            raise ValueError("a replay decides inline or with a model, one of the two")
        registry = load_registry(settings.contracts_file, settings.capabilities_file)
        self.processor = Processor(registry, Pipeline(registry, language=settings.language), decider)
        self.store = ReplayStore()
        self.emit = emit
        self.deferred = DeferredDecisions(self.processor, self.store, model, emit) if model else None
        #: receives the network and voice states the pipeline admitted (the report's bands)
        self.on_state = on_state
        self._states = AdmittedStates()
        self.records = 0
        #: (experience_id, device_id) claims by other jobs' plans already in the index
        self._foreign_claims: set[tuple[str, str]] = set()
        #: the row being processed, then the device whose changes :meth:`finish` confirms
        self.row: Row | None = None
        self.ending: str | None = None
        #: the earliest and latest Kafka timestamps of the records processed (the order of §2 rule
        #: 11 goes by order time: its first and last records need not be the earliest and latest)
        self.first_ts: int | None = None
        self.last_ts: int | None = None

    def feed(self, rows: Iterable[Row]) -> None:
        """Process rows in order. A row equal to the one before it in coordinates and content is a
        copy of it (overlapping exports): skipped."""
        process = self.processor.process
        store = self.store
        emit = self.emit
        deferred = self.deferred
        on_state = self.on_state
        states_after = self._states.after
        devices = store.devices
        window = self.processor.pipeline.dedup_window_ms
        n = self.records
        first_ts, last_ts = self.first_ts, self.last_ts
        # the previous row's coordinates and content (a copy of it is skipped)
        l_ts = l_tie = l_part = l_off = -1
        l_key: bytes | None = None
        l_value: bytes | None = None
        for row in rows:
            order_ts, tie, partition, offset, _, suffix, topic, key, value, own, ts = row
            if (
                offset == l_off
                and ts == l_ts
                and partition == l_part
                and tie == l_tie
                and value == l_value
                and key == l_key
            ):
                continue
            l_ts, l_tie, l_part, l_off, l_key, l_value = ts, tie, partition, offset, key, value
            if not own:
                self._foreign_plan(row)
                continue
            n += 1
            self.row = row
            if first_ts is None or ts < first_ts:
                first_ts = ts
            if last_ts is None or ts > last_ts:
                last_ts = ts
            if n % _SWEEP_EVERY == 0:
                store.forget_seen_before(order_ts - window)
            done = process(store, suffix, key, value, topic, partition, offset, ts)  # positional
            for o in done.outs:
                emit(o)
            if deferred is not None and done.queued:
                deferred.settle(done.device_id, done.queued)
            if on_state is not None and tie == _OBSERVATIONS_TIE and done.device_id is not None:
                # the bands follow the snapshot: only what the gate, dedup and key check admitted
                for change in states_after(done.device_id, devices[done.device_id].snapshot):
                    on_state(change)
        self.records = n
        self.first_ts, self.last_ts = first_ts, last_ts

    def _foreign_plan(self, row: Row) -> None:
        """Another job's plan: only its claim on the experience ID (the cross-device index)."""
        verdict = self.processor.gate.admit(
            "plans",
            row[7],
            row[8],
            source_topic=row[6],
            partition=row[2],
            offset=row[3],
            received_at_ms=row[10],
        )
        if isinstance(verdict, Admitted) and isinstance(verdict.record, ExperiencePlan):
            claim = (verdict.record.experience_id, verdict.record.device_id)
            if claim not in self._foreign_claims:
                self._foreign_claims.add(claim)
                # the first device's plan owns it (§2 rule 9), within its claim rate (rule 12)
                if self.store.owner_of(claim[0]) is None and self.store.claim(*claim, row[0]):
                    self.store.put_owner(*claim)

    def position(self) -> bytes:
        """Where the output being emitted stands in the replay's order (:mod:`guardian.replay_jobs`)."""
        if self.ending is not None:
            return end_position(self.ending)
        row = self.row
        assert row is not None, "an output before any record"
        return row_position(row[0], row[1], row[2], row[3], row[4])  # (order time, tie, …, seq)

    def finish(self) -> None:
        """End of input: confirm every device's still-pending debounce changes."""
        for device_id in sorted(self.store.devices):
            self.ending = device_id
            done = self.processor.confirm_quiet(self.store, device_id, None)
            for o in done.outs:
                self.emit(o)
            if self.deferred is not None:
                self.deferred.settle(done.device_id, done.queued)


@contextlib.contextmanager
def _fewer_collections() -> Iterator[None]:
    """Run the cyclic garbage collector less often while records stream by: the state built so far
    is frozen out of its scans and a collection waits for 100,000 new objects instead of 700 (a
    replay allocates and drops a few objects per record; the per-device state only grows)."""
    old = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(100_000, 50, 100)
    try:
        yield
    finally:
        gc.set_threshold(*old)
        gc.unfreeze()


def _decider_for(
    mode: str, recorded: RecordedDecisions, model_decider: DeviceDecider | None
) -> tuple[Decider | None, RecordedDecider | None, DeviceDecider | None]:
    """(the inline decider, the recorded one when it is that, the model decider)"""
    if mode == "recorded":
        recorded_decider = RecordedDecider(recorded)
        return recorded_decider, recorded_decider, None
    if mode == "model":
        if model_decider is None:
            raise ReplayInputError(
                "--decisions model needs GUARDIAN_SUPERVISOR=gemini and a configured model"
            )
        return None, None, model_decider
    return rules.decide, None, None


def _all_divergences(
    recorded: RecordedDecisions,
    recorded_decider: RecordedDecider | None,
    produced: Iterable[dict[str, Any]],
) -> Iterator[dict[str, Any]]:
    """Every divergence of a replay (none unless recorded decisions were reused), by device."""
    if recorded_decider is None:
        return iter(())
    return recorded.divergences(produced)


def _rows(records: Iterable[InputRecord]) -> list[Row]:
    """Input records (decisions aside) as rows, in the order of §2 rule 11."""
    ours = (r for r in records if r.suffix in _TIE_ORDER)
    return [
        (t, _TIE_ORDER[r.suffix], r.partition, r.offset, seq, r.suffix, r.topic, r.key, r.value, True, r.ts)
        for seq, (t, r) in enumerate(in_order(ours))
    ]


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
    decider, recorded_decider, model = _decider_for(mode, recorded, model_decider)
    outs: dict[str, list[dict[str, Any]]] = {k: [] for k in OUT_KINDS}
    counts = SummaryCounts()

    def collect(o: Out) -> None:
        outs[o.kind].append(o.value)
        counts.add(o.kind, o.value)

    device_states: list[DeviceStateChange] = []
    engine = ReplayEngine(settings, decider, collect, device_states.append, model)
    rows = _rows(records)
    with _fewer_collections():
        engine.feed(rows)
        engine.finish()
    divergences = list(_all_divergences(recorded, recorded_decider, outs["decisions"]))
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


def _states_file(tmp: Path, out_dir: Path) -> Path:
    """Where a job spools its device-state changes: in the temporary folder, never in --out."""
    return tmp / f"states-{hashlib.sha256(str(out_dir).encode()).hexdigest()[:12]}"


def _write_states(path: Path) -> tuple[Callable[[DeviceStateChange], None], Callable[[], None]]:
    """A sink spooling device-state changes to ``path`` (one pickled batch per 4,096), and its close."""
    fh = path.open("wb")
    batch: list[DeviceStateChange] = []

    def add(change: DeviceStateChange) -> None:
        batch.append(change)
        if len(batch) >= 4_096:
            pickle.dump(batch, fh, protocol=pickle.HIGHEST_PROTOCOL)
            batch.clear()

    def close() -> None:
        if batch:
            pickle.dump(batch, fh, protocol=pickle.HIGHEST_PROTOCOL)
        fh.close()

    return add, close


def _read_states(paths: Iterable[Path]) -> Iterator[DeviceStateChange]:
    for path in paths:
        if not path.exists():
            continue
        with path.open("rb") as fh:
            while True:
                try:
                    batch: list[DeviceStateChange] = pickle.load(fh)
                except EOFError:
                    break
                yield from batch


# ----------------------------------------------------------------------------------------------
# streaming: spool (sorted runs on disk), merge, process, outputs straight to files
# ----------------------------------------------------------------------------------------------
def job_of(key: bytes | None, jobs: int) -> int:
    """The job (of ``jobs``) that replays the device keyed ``key``: a stable hash, so a device's
    records all go to one job."""
    if jobs == 1 or key is None:
        return 0
    return zlib.crc32(key) % jobs


@dataclass
class _JobInput(runs.Runs):
    """One job's share of the input (:data:`guardian.runs.StreamRow`): sorted runs on disk and/or
    one sorted chunk in memory, and the recorded decisions."""

    #: the share's recorded decisions (guardian.recorded), when the input has any
    recorded: Path | None = None
    #: rows spilled to the runs
    rows_total: int = 0

    def ordered(self, tmp: Path) -> Iterator[list[Row]]:
        """Every row in the order of §2 rule 11, in sorted batches (its runs are used up)."""
        return runs.in_order(self, tmp, MAX_FAN_IN)


class _Spool:
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
        self.jobs = [_JobInput(limit=chunk_bytes) for _ in range(jobs)]
        self.chunk_bytes = chunk_bytes
        self.seq = 0
        self.records = 0
        self.has_decisions = False
        self._runs = 0
        self._recorded: dict[int, RecordedDecisions] = {}

    def add_file(self, name: str) -> None:
        jobs = len(self.jobs)
        seq = self.seq
        tie_of = _TIE_ORDER.get
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


@dataclass
class _JobResult:
    counts: SummaryCounts
    records: int
    #: Kafka timestamps of the first and last records processed
    first_ts: int | None = None
    last_ts: int | None = None


def _run_job(
    share: _JobInput,
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
    ``states``, the network and voice states the pipeline admitted go to :func:`_states_file` for
    the report (without a report they are not looked for); with ``positions``, each output file
    ``F`` gets its ``F.pos``, the position of every line (:mod:`guardian.replay_jobs`)."""
    if mode == "model" and model_decider is None:
        from supervisor.sync import blocking_model_decider

        with blocking_model_decider(settings) as blocking:
            return _run_job(share, tmp, out_dir, settings, mode, blocking, states, positions, progress)
    # on disk, read back by trigger (closed at the end; on an error, with the temporary folder)
    recorded = RecordedDecisions(share.recorded or ":memory:")
    decider, recorded_decider, model = _decider_for(mode, recorded, model_decider)
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

        add_state, close_states = _write_states(_states_file(tmp, out_dir))
        try:
            engine = ReplayEngine(settings, decider, emit, add_state if states else None, model)
            total = progress_total(share)
            with _fewer_collections():
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
        for d in _all_divergences(recorded, recorded_decider, _read_jsonl(out_dir / "decisions.jsonl")):
            fh.write(orjson.dumps(d) + b"\n")
            counts.divergences += 1
    recorded.close()
    if not counts.divergences:
        path.unlink()
    return _JobResult(counts, engine.records, engine.first_ts, engine.last_ts)


def progress_total(share: _JobInput) -> int:
    """The rows a job will go through (runs on disk counted as they were spilled)."""
    return share.rows_total + len(share.chunk)


def _run_job_in_process(args: tuple[Path, Path, Path, Settings, str, bool]) -> _JobResult:
    share_file, tmp, out_dir, settings, mode, states = args
    with share_file.open("rb") as fh:
        share: _JobInput = pickle.load(fh)
    return _run_job(share, tmp, out_dir, settings, mode, states=states, positions=True)


def _read_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    with path.open("rb") as fh:
        for line in fh:
            yield orjson.loads(line)


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
        spool = _Spool(TopicNames(settings.topic_prefix), tmp, jobs, chunk_bytes, progress, budget)
        with _fewer_collections():  # (the rows of a chunk live until it is spilled)
            for name in files:
                spool.add_file(name)
        if mode is None:
            mode = "recorded" if spool.has_decisions else "rules"
        counts = SummaryCounts()
        if jobs == 1:
            results = [
                _run_job(spool.jobs[0], tmp, stage, settings, mode, model_decider, report, False, progress)
            ]
        else:
            job_dirs = [tmp / f"job-{j}" for j in range(jobs)]
            results = _run_jobs(spool, tmp, settings, mode, report)
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
            states = _read_states(_states_file(tmp, d) for d in job_dirs)
            write_report(stage, states, made_from=describe(made))
    return StreamedReplay(records, summary, made)


def _run_jobs(spool: _Spool, tmp: Path, settings: Settings, mode: str, states: bool) -> list[_JobResult]:
    """Each job's share pickled to a file (its chunk and the names of its runs), replayed in its
    own process into ``tmp/job-N``."""
    tasks: list[tuple[Path, Path, Path, Settings, str, bool]] = []
    for j, share in enumerate(spool.jobs):
        job_dir = tmp / f"job-{j}"
        job_dir.mkdir()
        share_file = tmp / f"share-{j}"
        with share_file.open("wb") as fh:
            pickle.dump(share, fh, protocol=pickle.HIGHEST_PROTOCOL)
        spool.jobs[j] = _JobInput(limit=spool.chunk_bytes)
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


__all__ = [
    "OUTPUT_FILES",
    "InputRecord",
    "OutputError",
    "ReplayInputError",
    "ReplayResult",
    "clear_outputs",
    "open_input",
    "read_kcat_lines",
    "replay_files",
    "replay_records",
    "write_outputs",
]
