"""``guardian replay FILE... --out DIR`` (docs/CONTRACTS.md §12): the live pipeline's logic, offline.

Reads ``kcat -C -J`` lines (files, ``-`` for stdin, gzip-compressed or not), orders the input records
by Kafka timestamp (ties: plans, device-context, task-events, observations, then partition and
offset), runs them through the very same :class:`pipeline.runner.Processor` the worker runs,
confirms still-pending debounce changes at the end, and writes the outputs, ``summary.json`` and
``report.html``.

At scale it streams, in bounded memory:

1. *Spool*: every line is read and checked once; input records are cut into chunks (about
   ``CHUNK_BYTES`` of payload each), each chunk sorted in memory and, when the input does not fit in
   one chunk, written to a temporary *run* file. Exports are in offset order per partition, not in
   timestamp order across partitions, so no file is assumed to be sorted.
2. *Merge*: the runs are merged batch by batch (:func:`merge_batches`, at most ``MAX_FAN_IN``
   open at once); a record seen twice (same topic, partition and offset: overlapping exports)
   sorts next to its copy and is read once, so dedup needs no memory. (Two records at the same
   coordinates with different timestamps, keys or payloads are not copies of one Kafka record:
   both are judged.)
3. *Process*: records go through the processor one by one; outputs are written to their files as
   they come and counted for the summary; the dedup memory forgets keys older than the dedup window
   (as the live worker's sweep does), so memory holds per-device state, not the input.

``--jobs N`` splits the devices (a stable hash of the record key, the device ID) over N processes,
each with its own runs and outputs, concatenated at the end. Plans of other jobs' devices still
update each job's experience→device index, so cross-device checks see what a single job sees.
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import gc
import hashlib
import itertools
import multiprocessing
import pickle
import shutil
import sys
import tempfile
import zlib
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from config.exitcodes import Exit
from config.settings import Settings
from guardian.replay_input import (
    InputRecord,
    ReadMeter,
    ReplayInputError,
    SpoolBudget,
    input_lines,
    open_input,
    read_kcat_lines,
)
from guardian.replay_model import DeferredDecisions, DeviceDecider
from pipeline.core import Pipeline
from pipeline.runner import Processor, ReplayStore
from pipeline.step import Decider
from report.html import DeviceStateChange, device_state_change
from supervisor import rules
from supervisor.checks import recorded_verdict
from supervisor.verdict import Verdict
from tables.state import ExperienceState, Trigger
from topics.envelope import Out
from topics.gate import Admitted
from topics.names import INPUT_SUFFIXES, TopicNames
from topics.records import ExperiencePlan
from topics.registry import load_registry

_TIE_ORDER = {suffix: i for i, suffix in enumerate(INPUT_SUFFIXES)}
_OBSERVATIONS_TIE = _TIE_ORDER["observations"]
#: the outputs, in the order of their files
OUT_KINDS = ("decisions", "dispatch", "timeline", "deadletter")
#: Guardian's own files in ``--out``: removed before a replay writes, never anything else.
OUTPUT_FILES = (
    "decisions.jsonl",
    "dispatch.jsonl",
    "timeline.jsonl",
    "deadletter.jsonl",
    "divergences.jsonl",
    "summary.json",
    "report.html",
)
#: payload bytes (plus a per-record allowance) per sorted chunk of the spool
CHUNK_BYTES = 48 * 1024 * 1024
_RECORD_OVERHEAD = 400
#: run files merged at once; more are merged into bigger runs first
MAX_FAN_IN = 128
#: records per pickled batch in a run file
_RUN_BATCH = 256
#: rows per slice of the in-memory chunk handed to the merge
_CHUNK_SLICE = 4096
#: how often (records) the dedup memory forgets keys older than the window
_SWEEP_EVERY = 4096


#: (ts, tie, partition, offset, seq, suffix, topic, key, value, own): the sort key comes first and
#: ``seq`` (input order) is unique, so rows compare without reaching the payload; ``own`` is False
#: for another job's plan, kept only for the experience→device index.
Row = tuple[int, int, int, int, int, str, str, bytes | None, bytes | None, bool]


# ----------------------------------------------------------------------------------------------
# recorded decisions: matching, checking and divergences (--decisions recorded), in one place
# ----------------------------------------------------------------------------------------------
@dataclass
class RecordedDecisions:
    """Decisions found in the input, by trigger: (device_id, experience_id, trigger_event_id).
    Never by decision ID, whose formula may differ in an older export."""

    by_trigger: dict[tuple[str, str, str], dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def from_records(cls, records: Iterable[InputRecord]) -> RecordedDecisions:
        found = cls()
        for r in records:
            if r.suffix != "decisions" or r.value is None:
                continue
            try:
                d = orjson.loads(r.value)
            except orjson.JSONDecodeError:
                continue
            if isinstance(d, dict) and isinstance(d.get("experience_id"), str):
                found.by_trigger[
                    (str(d.get("device_id")), d["experience_id"], str(d.get("trigger_event_id")))
                ] = d
        return found


@dataclass
class RecordedDecider:
    """Reuses recorded decisions for the same triggers; the rules decide (and it is reported) otherwise."""

    recorded: RecordedDecisions
    missing: list[str] = field(default_factory=list)
    #: (trigger_event_id, why) of recorded decisions the contract does not allow: the rules decided
    invalid: list[tuple[str, str]] = field(default_factory=list)

    def __call__(self, exp: ExperienceState, trigger: Trigger) -> Verdict:
        d = self.recorded.by_trigger.get((exp.device_id, exp.experience_id, trigger.event_id))
        if d is None:
            self.missing.append(trigger.event_id)
            return rules.decide(exp, trigger)
        verdict = recorded_verdict(d, exp, trigger)
        if isinstance(verdict, str):
            self.invalid.append((trigger.event_id, verdict))
            return rules.decide(exp, trigger)
        return verdict


def _divergences(recorded: RecordedDecisions, produced: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    seen: set[tuple[str, str, str]] = set()
    for d in produced:
        key = (d["device_id"], d["experience_id"], d["trigger_event_id"])
        seen.add(key)
        rec = recorded.by_trigger.get(key)
        if rec is None:
            continue
        for fld in ("decision", "reason_code", "backend", "state_etag", "budget_after"):
            if rec.get(fld) != d.get(fld):
                found.append(
                    {
                        "trigger_event_id": d["trigger_event_id"],
                        "kind": "different",
                        "field": fld,
                        "recorded": rec.get(fld),
                        "replayed": d.get(fld),
                    }
                )
    for key, rec in recorded.by_trigger.items():
        if key not in seen:
            found.append(
                {"trigger_event_id": key[2], "kind": "not_reproduced", "recorded": rec.get("decision_id")}
            )
    return found


def _decision_device(key: bytes | None, value: bytes | None) -> bytes | None:
    """The device a recorded decision belongs to (for --jobs): its ``device_id``, else its key."""
    if value is not None:
        with contextlib.suppress(orjson.JSONDecodeError):
            d = orjson.loads(value)
            if isinstance(d, dict) and isinstance(d.get("device_id"), str):
                return str(d["device_id"]).encode("utf-8")
    return key


def _is_recorded_decision(value: bytes | None) -> bool:
    """Would :meth:`RecordedDecisions.from_records` keep this value (the default mode depends on it)."""
    if value is None:
        return False
    try:
        d = orjson.loads(value)
    except orjson.JSONDecodeError:
        return False
    return isinstance(d, dict) and isinstance(d.get("experience_id"), str)


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
        #: receives the network and voice observations of the input (the report's bands)
        self.on_state = on_state
        self.records = 0
        #: (experience_id, device_id) claims by other jobs' plans already in the index
        self._foreign_claims: set[tuple[str, str]] = set()

    def feed(self, rows: Iterable[Row]) -> None:
        """Process rows in order. A row equal to the one before it in coordinates and content is a
        copy of it (overlapping exports): skipped."""
        process = self.processor.process
        store = self.store
        emit = self.emit
        deferred = self.deferred
        on_state = self.on_state
        window = self.processor.pipeline.dedup_window_ms
        n = self.records
        # the previous row's coordinates and content (a copy of it is skipped)
        l_ts = l_tie = l_part = l_off = -1
        l_key: bytes | None = None
        l_value: bytes | None = None
        for row in rows:
            ts, tie, partition, offset, _, suffix, topic, key, value, own = row
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
            if on_state is not None and tie == _OBSERVATIONS_TIE:
                change = device_state_change(ts, value)
                if change is not None:
                    on_state(change)
            if n % _SWEEP_EVERY == 0:
                store.forget_seen_before(ts - window)
            done = process(store, suffix, key, value, topic, partition, offset, ts)  # positional
            for o in done.outs:
                emit(o)
            if deferred is not None and done.queued:
                deferred.settle(done.device_id, done.queued)
        self.records = n

    def _foreign_plan(self, row: Row) -> None:
        """Another job's plan: only its claim on the experience ID (the cross-device index)."""
        verdict = self.processor.gate.admit(
            "plans",
            row[7],
            row[8],
            source_topic=row[6],
            partition=row[2],
            offset=row[3],
            received_at_ms=row[0],
        )
        if isinstance(verdict, Admitted) and isinstance(verdict.record, ExperiencePlan):
            claim = (verdict.record.experience_id, verdict.record.device_id)
            if claim not in self._foreign_claims:
                self._foreign_claims.add(claim)
                if self.store.owner_of(claim[0]) is None:  # the first device's plan owns it (§2 rule 9)
                    self.store.put_owner(*claim)

    def finish(self) -> None:
        """End of input: confirm every device's still-pending debounce changes."""
        for device_id in sorted(self.store.devices):
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
) -> list[dict[str, Any]]:
    if recorded_decider is None:
        return []
    divergences = _divergences(recorded, produced)
    for event_id in recorded_decider.missing:
        divergences.append({"trigger_event_id": event_id, "kind": "no_recorded_decision"})
    for event_id, why in recorded_decider.invalid:
        divergences.append({"trigger_event_id": event_id, "kind": "invalid_recorded_decision", "why": why})
    return divergences


def _row(r: InputRecord, seq: int, own: bool = True) -> Row:
    return (r.ts, _TIE_ORDER[r.suffix], r.partition, r.offset, seq, r.suffix, r.topic, r.key, r.value, own)


# ----------------------------------------------------------------------------------------------
# in memory: a list of records in, every output in lists (tests, the demo)
# ----------------------------------------------------------------------------------------------
@dataclass
class ReplayResult:
    outs: dict[str, list[dict[str, Any]]]
    summary: dict[str, Any]
    divergences: list[dict[str, Any]]
    #: network and voice observations of the input (they write no timeline entry): the report's bands
    device_states: list[DeviceStateChange] = field(default_factory=list)


def replay_records(
    records: list[InputRecord],
    *,
    settings: Settings,
    mode: str | None = None,
    model_decider: DeviceDecider | None = None,
) -> ReplayResult:
    """Run input records through the live pipeline's logic, in memory; pure apart from the registry load."""
    recorded = RecordedDecisions.from_records(records)
    if mode is None:
        mode = "recorded" if recorded.by_trigger else "rules"
    decider, recorded_decider, model = _decider_for(mode, recorded, model_decider)
    outs: dict[str, list[dict[str, Any]]] = {k: [] for k in OUT_KINDS}
    counts = SummaryCounts()

    def collect(o: Out) -> None:
        outs[o.kind].append(o.value)
        counts.add(o.kind, o.value)

    device_states: list[DeviceStateChange] = []
    engine = ReplayEngine(settings, decider, collect, device_states.append, model)
    rows = sorted(_row(r, i) for i, r in enumerate(records) if r.suffix in _TIE_ORDER)
    with _fewer_collections():
        engine.feed(rows)
        engine.finish()
    divergences = _all_divergences(recorded, recorded_decider, outs["decisions"])
    counts.divergences = len(divergences)
    return ReplayResult(
        outs=outs, summary=counts.summary(mode), divergences=divergences, device_states=device_states
    )


def clear_outputs(out_dir: Path) -> None:
    """Remove Guardian's own output files from ``out_dir`` (nothing else)."""
    for name in OUTPUT_FILES:
        with contextlib.suppress(FileNotFoundError):
            (out_dir / name).unlink()


def write_outputs(result: ReplayResult, out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    clear_outputs(out_dir)
    for kind in OUT_KINDS:
        with (out_dir / f"{kind}.jsonl").open("wb") as fh:
            for value in result.outs[kind]:
                fh.write(orjson.dumps(value) + b"\n")
    if result.divergences:
        with (out_dir / "divergences.jsonl").open("wb") as fh:
            for d in result.divergences:
                fh.write(orjson.dumps(d) + b"\n")
    (out_dir / "summary.json").write_bytes(orjson.dumps(result.summary, option=orjson.OPT_INDENT_2))
    write_report(out_dir, result.device_states)


def write_report(out_dir: Path, device_states: Iterable[DeviceStateChange] = ()) -> Path | None:
    """The incident report next to the outputs (report.html); ``device_states``: the network and
    voice observations of the input, drawn as bands."""
    from report.html import render_report_from_dir

    return render_report_from_dir(out_dir, device_states=device_states)


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


def _slices(rows: list[Row], size: int = _RUN_BATCH) -> Iterator[list[Row]]:
    """``rows`` in consecutive slices of ``size``."""
    for i in range(0, len(rows), size):
        yield rows[i : i + size]


def _write_run(batches: Iterable[list[Row]], path: Path) -> Path:
    """Sorted ``batches`` into a run file, a pickled list of at most ``_RUN_BATCH`` rows at a time."""
    with path.open("wb") as fh:
        for batch in batches:
            for part in _slices(batch) if len(batch) > _RUN_BATCH else (batch,):
                if part:
                    pickle.dump(part, fh, protocol=pickle.HIGHEST_PROTOCOL)
    return path


def _read_run(path: Path) -> Iterator[list[Row]]:
    """A run file's batches, in order."""
    with path.open("rb", buffering=256 * 1024) as fh:
        while True:
            try:
                batch: list[Row] = pickle.load(fh)
            except EOFError:
                return
            yield batch


def merge_batches(sources: list[Iterator[list[Row]]]) -> Iterator[list[Row]]:
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
        out: list[Row] = []
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
class _JobInput:
    """One job's share of the input: sorted runs on disk and/or one sorted chunk in memory."""

    runs: list[Path] = field(default_factory=list)
    chunk: list[Row] = field(default_factory=list)
    chunk_bytes: int = 0
    decisions: list[InputRecord] = field(default_factory=list)

    def rows(self, tmp: Path) -> Iterator[Row]:
        """Every row in order (runs merged, at most MAX_FAN_IN files open at once)."""
        return itertools.chain.from_iterable(self.batches(tmp))

    def batches(self, tmp: Path) -> Iterator[list[Row]]:
        """Every row in order, in sorted batches (runs merged, at most MAX_FAN_IN files open at
        once)."""
        self.chunk.sort()
        runs = list(self.runs)
        n = 0
        while len(runs) + (1 if self.chunk else 0) > MAX_FAN_IN:
            group, runs = runs[:MAX_FAN_IN], runs[MAX_FAN_IN:]
            n += 1
            runs.append(
                _write_run(merge_batches([_read_run(p) for p in group]), tmp / f"merged-{n}-{id(self)}")
            )
            for p in group:
                p.unlink()
        sources: list[Iterator[list[Row]]] = [_read_run(p) for p in runs]
        if self.chunk:
            sources.append(_slices(self.chunk, _CHUNK_SLICE))
        return merge_batches(sources)


class _Spool:
    """Reads every input file once, checks each line, routes rows to jobs and spills sorted runs."""

    def __init__(
        self, names: TopicNames, tmp: Path, jobs: int, chunk_bytes: int, budget: SpoolBudget | None = None
    ) -> None:
        self.names = names
        self.tmp = tmp
        self.jobs = [_JobInput() for _ in range(jobs)]
        self.chunk_bytes = chunk_bytes
        #: the temporary disk the runs may take (replay_input.SpoolBudget)
        self.budget = budget if budget is not None else SpoolBudget(ReadMeter())
        self._reading = ""
        self.seq = 0
        self.records = 0
        self.has_decisions = False
        self._runs = 0

    def add_file(self, name: str) -> None:
        jobs = len(self.jobs)
        seq = self.seq
        tie_of = _TIE_ORDER.get
        single = self.jobs[0] if jobs == 1 else None
        limit = self.chunk_bytes
        self._reading = name
        meter = self.budget.meter
        for suffix, topic, partition, offset, ts, key, value in input_lines(name, self.names, meter):
            tie = tie_of(suffix)
            if tie is None:
                if suffix == "decisions":
                    rec = InputRecord(suffix, topic, partition, offset, ts, key, value)
                    self.jobs[job_of(_decision_device(key, value), jobs)].decisions.append(rec)
                    self.has_decisions = self.has_decisions or _is_recorded_decision(value)
                continue
            seq += 1
            row = (ts, tie, partition, offset, seq, suffix, topic, key, value, True)
            size = _RECORD_OVERHEAD + (len(value) if value is not None else 0)
            if single is not None:  # one job: the common case, inlined
                single.chunk.append(row)
                single.chunk_bytes += size
                if single.chunk_bytes >= limit:
                    self._spill(0)
                continue
            j = job_of(key, jobs)
            self._add(j, row, size)
            if tie == 0:  # a plan: every other job keeps its claim on the experience ID
                foreign = (ts, tie, partition, offset, seq, suffix, topic, key, value, False)
                for other in range(jobs):
                    if other != j:
                        self._add(other, foreign, size)
        self.records += seq - self.seq
        self.seq = seq

    def _add(self, j: int, row: Row, size: int) -> None:
        share = self.jobs[j]
        share.chunk.append(row)
        share.chunk_bytes += size
        if share.chunk_bytes >= self.chunk_bytes:
            self._spill(j)

    def _spill(self, j: int) -> None:
        """Sort job ``j``'s chunk into a run file."""
        share = self.jobs[j]
        share.chunk.sort()
        self._runs += 1
        run = _write_run((share.chunk,), self.tmp / f"run-{j}-{self._runs}")
        share.runs.append(run)
        self.budget.spend(run.stat().st_size, self._reading)
        share.chunk = []
        share.chunk_bytes = 0


@dataclass
class _JobResult:
    counts: SummaryCounts
    records: int


def _run_job(
    share: _JobInput,
    tmp: Path,
    out_dir: Path,
    settings: Settings,
    mode: str,
    model_decider: DeviceDecider | None = None,
    states: bool = True,
) -> _JobResult:
    """Replay one job's share into ``out_dir`` (its four output files and divergences.jsonl); with
    ``states``, the network and voice observations it saw go to :func:`_states_file` for the
    report (without a report they are not looked for: one JSON parse per observation less)."""
    recorded = RecordedDecisions.from_records(share.decisions)
    share.decisions = []
    if mode == "model" and model_decider is None:
        from supervisor.sync import blocking_model_decider

        with blocking_model_decider(settings) as blocking:
            return _run_job(share, tmp, out_dir, settings, mode, blocking, states)
    decider, recorded_decider, model = _decider_for(mode, recorded, model_decider)
    counts = SummaryCounts()
    handles = {k: (out_dir / f"{k}.jsonl").open("wb", buffering=1024 * 1024) for k in OUT_KINDS}
    dumps = orjson.dumps
    try:
        writes = {k: h.write for k, h in handles.items()}

        newline = orjson.OPT_APPEND_NEWLINE

        def emit(o: Out) -> None:
            writes[o.kind](dumps(o.value, option=newline))
            counts.add(o.kind, o.value)

        add_state, close_states = _write_states(_states_file(tmp, out_dir))
        try:
            engine = ReplayEngine(settings, decider, emit, add_state if states else None, model)
            with _fewer_collections():
                engine.feed(share.rows(tmp))
                engine.finish()
        finally:
            close_states()
    finally:
        for h in handles.values():
            h.close()
    divergences = _all_divergences(recorded, recorded_decider, _read_jsonl(out_dir / "decisions.jsonl"))
    counts.divergences = len(divergences)
    if divergences:
        with (out_dir / "divergences.jsonl").open("wb") as fh:
            for d in divergences:
                fh.write(orjson.dumps(d) + b"\n")
    return _JobResult(counts, engine.records)


def _run_job_in_process(args: tuple[Path, Path, Path, Settings, str, bool]) -> _JobResult:
    share_file, tmp, out_dir, settings, mode, states = args
    with share_file.open("rb") as fh:
        share: _JobInput = pickle.load(fh)
    return _run_job(share, tmp, out_dir, settings, mode, states=states)


def _read_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    with path.open("rb") as fh:
        for line in fh:
            yield orjson.loads(line)


@dataclass
class StreamedReplay:
    """What a streamed replay did: input records, the summary and the number of divergences."""

    records: int
    summary: dict[str, Any]


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
    budget: SpoolBudget | None = None,
) -> StreamedReplay:
    """Replay ``files`` into ``out_dir`` in bounded memory (see the module docstring) and bounded
    temporary disk (``budget``, by default :class:`guardian.replay_input.SpoolBudget`'s bounds).

    ``out_dir`` is emptied of Guardian's own files first; if anything fails, none of them is left
    behind. Raises ReplayInputError for unreadable input."""
    if out_dir.exists() and not out_dir.is_dir():
        raise ReplayInputError(f"--out {out_dir} is a file, not a directory")
    out_dir.mkdir(parents=True, exist_ok=True)
    clear_outputs(out_dir)
    try:
        with tempfile.TemporaryDirectory(prefix="guardian-replay-") as tmp_name:
            tmp = Path(tmp_name)
            spool = _Spool(TopicNames(settings.topic_prefix), tmp, jobs, chunk_bytes, budget)
            with _fewer_collections():  # (the rows of a chunk live until it is spilled)
                for name in files:
                    spool.add_file(name)
            if mode is None:
                mode = "recorded" if spool.has_decisions else "rules"
            counts = SummaryCounts()
            records = 0
            if jobs == 1:
                done = _run_job(spool.jobs[0], tmp, out_dir, settings, mode, model_decider, report)
                counts, records = done.counts, done.records
            else:
                results = _run_jobs(spool, tmp, settings, mode, report)
                for done in results:
                    counts.merge(done.counts)
                    records += done.records
                _concatenate(out_dir, [tmp / f"job-{j}" for j in range(jobs)])
            summary = counts.summary(mode)
            (out_dir / "summary.json").write_bytes(orjson.dumps(summary, option=orjson.OPT_INDENT_2))
            if report:
                job_dirs = [out_dir] if jobs == 1 else [tmp / f"job-{j}" for j in range(jobs)]
                write_report(out_dir, _read_states(_states_file(tmp, d) for d in job_dirs))
    except BaseException:
        clear_outputs(out_dir)
        raise
    return StreamedReplay(records, summary)


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
        spool.jobs[j] = _JobInput()
        tasks.append((share_file, tmp, job_dir, settings, mode, states))
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(len(tasks)) as pool:
        return pool.map(_run_job_in_process, tasks)


def _concatenate(out_dir: Path, job_dirs: list[Path]) -> None:
    for name in (*(f"{k}.jsonl" for k in OUT_KINDS), "divergences.jsonl"):
        parts = [d / name for d in job_dirs if (d / name).exists()]
        if name == "divergences.jsonl" and not any(p.stat().st_size for p in parts):
            continue
        with (out_dir / name).open("wb") as out:
            for p in parts:
                with p.open("rb") as fh:
                    shutil.copyfileobj(fh, out, 1024 * 1024)


def cmd_replay(args: argparse.Namespace, settings: Settings) -> int:
    out_dir = Path(args.out)
    jobs = getattr(args, "jobs", None)
    jobs = 1 if jobs is None else int(jobs)
    if jobs < 1:
        print("guardian replay: --jobs must be at least 1", file=sys.stderr)
        return Exit.USAGE
    if out_dir.exists() and not out_dir.is_dir():
        print(f"guardian replay: --out {out_dir} is a file, not a directory", file=sys.stderr)
        return Exit.USAGE
    report = not getattr(args, "no_report", False)
    try:
        if args.decisions == "model" and jobs == 1:
            from supervisor.sync import blocking_model_decider

            with blocking_model_decider(settings) as model:
                done = replay_files(
                    args.files, out_dir, settings=settings, mode="model", model_decider=model, report=report
                )
        else:
            done = replay_files(
                args.files, out_dir, settings=settings, mode=args.decisions, jobs=jobs, report=report
            )
    except ReplayInputError as exc:
        print(f"guardian replay: {exc}", file=sys.stderr)
        return Exit.BAD_INPUT
    s = done.summary
    print(
        f"replayed {done.records} records: {s['counts']['decisions']} decisions, "
        f"{s['counts']['dispatch']} dispatches, {s['counts']['timeline']} timeline entries, "
        f"{s['counts']['deadletter']} dead letters; {len(s['experiences'])} experiences; "
        f"{s['divergences']} divergences -> {out_dir}"
    )
    return 0


__all__ = [
    "InputRecord",
    "ReplayInputError",
    "ReplayResult",
    "open_input",
    "read_kcat_lines",
    "replay_files",
    "replay_records",
    "write_outputs",
]
