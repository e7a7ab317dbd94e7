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
import functools
import gc
import gzip
import hashlib
import io
import itertools
import multiprocessing
import os
import pickle
import sys
import tempfile
import zlib
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, cast

import orjson

from config.settings import Settings
from guardian import runs
from guardian.recorded import RecordedDecider, RecordedDecisions, decision_device
from guardian.replay_jobs import end_position, merge_divergences, merge_outputs, row_position
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
from topics.names import CONTRACT_SUFFIXES, TopicNames
from topics.records import ExperiencePlan
from topics.registry import load_registry

_TIE_ORDER = RANK
_OBSERVATIONS_TIE = _TIE_ORDER["observations"]
#: §12: ``ts`` is a non-negative integer below 2^53
MAX_TS = 2**53
#: the outputs, in the order of their files
OUT_KINDS = ("decisions", "dispatch", "timeline", "deadletter")
#: payload bytes (plus a per-record allowance) per sorted chunk of the spool
CHUNK_BYTES = 48 * 1024 * 1024
#: run files merged at once; more are merged into bigger runs first
MAX_FAN_IN = 128
#: how often (records) the dedup memory forgets keys older than the window
_SWEEP_EVERY = 4096
_MAX_TOPICS_LISTED = 10


class ReplayInputError(ValueError):
    """An input file or line cannot be read; the message names the file and line."""


@dataclass(frozen=True, slots=True)
class InputRecord:
    suffix: str
    topic: str
    partition: int
    offset: int
    ts: int
    key: bytes | None
    value: bytes | None


# ----------------------------------------------------------------------------------------------
# reading (a small public reader: other commands read replay files with it)
# ----------------------------------------------------------------------------------------------
@contextlib.contextmanager
def open_input(name: str | Path) -> Iterator[IO[bytes]]:
    """A replay input for reading: a file, or stdin for ``-``; gzip when it starts like gzip."""
    with contextlib.ExitStack() as stack:
        raw: Any
        if str(name) == "-":
            # a terminal ends its input with one Ctrl-D, but reads on after it: read it up to there
            raw = io.BytesIO(sys.stdin.buffer.read()) if sys.stdin.isatty() else sys.stdin.buffer
        else:
            try:
                raw = stack.enter_context(Path(name).open("rb"))
            except OSError as exc:
                raise ReplayInputError(f"{name}: cannot read: {exc.strerror or exc}") from exc
        buffered = raw if isinstance(raw, io.BufferedReader) else io.BufferedReader(raw)
        if buffered.peek(2)[:2] == b"\x1f\x8b":
            unzipped = gzip.GzipFile(fileobj=buffered, mode="rb")
            stack.callback(unzipped.close)
            yield cast(IO[bytes], unzipped)
        else:
            yield cast(IO[bytes], buffered)


def _lines(
    name: str | Path, names: TopicNames
) -> Iterator[tuple[str, str, int, int, int, bytes | None, bytes | None]]:
    """(suffix, topic, partition, offset, ts, key, value) of every record of ours in one file.

    Raises ReplayInputError for a line that is not such a record (naming file and line), and at the
    end of a file that has records but none under the prefix (listing the topics seen)."""
    known: dict[str, tuple[str, str] | None] = {}
    seen_topics: list[str] = []
    ours = 0
    lineno = 0
    prefix = names.prefix
    with open_input(name) as handle:
        try:
            # read a megabyte of lines at a time: a third less than a readline per line
            lines = itertools.chain.from_iterable(iter(functools.partial(handle.readlines, 1 << 20), []))
            for lineno, line in enumerate(lines, start=1):
                try:
                    obj = orjson.loads(line)
                except orjson.JSONDecodeError as exc:
                    if not line.strip():  # a blank line (looked for only when a line does not parse)
                        continue
                    raise ReplayInputError(f"{name}:{lineno}: not a JSON line ({exc})") from exc
                if type(obj) is not dict:
                    raise ReplayInputError(f"{name}:{lineno}: not a JSON object")
                topic = obj.get("topic")
                partition, offset, ts = obj.get("partition"), obj.get("offset"), obj.get("ts")
                if type(topic) is not str:
                    raise ReplayInputError(f"{name}:{lineno}: needs a string 'topic'")
                if type(partition) is not int or partition < 0 or type(offset) is not int or offset < 0:
                    raise ReplayInputError(
                        f"{name}:{lineno}: 'partition' and 'offset' must be non-negative integers"
                    )
                if type(ts) is not int or not 0 <= ts < MAX_TS:
                    raise ReplayInputError(f"{name}:{lineno}: 'ts' must be a non-negative integer below 2^53")
                key, payload = obj.get("key"), obj.get("payload")
                if key is not None and type(key) is not str:
                    raise ReplayInputError(f"{name}:{lineno}: 'key' must be a string or null")
                if payload is not None and type(payload) is not str:
                    raise ReplayInputError(f"{name}:{lineno}: 'payload' must be a string or null")
                hit = known.get(topic)
                if hit is None and topic not in known:
                    suffix = names.suffix_of(topic)
                    hit = (suffix, topic) if suffix is not None else None
                    if len(known) < 1000:
                        known[topic] = hit
                    if hit is None and len(seen_topics) < _MAX_TOPICS_LISTED and topic not in seen_topics:
                        seen_topics.append(topic)
                if hit is None:
                    continue
                ours += 1
                try:
                    key_b = key.encode("utf-8") if key is not None else None
                    value_b = payload.encode("utf-8") if payload is not None else None
                except UnicodeEncodeError as exc:
                    raise ReplayInputError(f"{name}:{lineno}: not valid UTF-8 text ({exc.reason})") from exc
                yield hit[0], hit[1], partition, offset, ts, key_b, value_b
        except (OSError, EOFError, zlib.error) as exc:
            raise ReplayInputError(f"{name}:{lineno + 1}: cannot read: {exc}") from exc
    if ours == 0 and seen_topics:
        listed = ", ".join(seen_topics)
        raise ReplayInputError(
            f"{name}: no topic under the prefix {prefix!r} (expected {prefix}<"
            f"{'|'.join(CONTRACT_SUFFIXES)}>; topics seen: {listed}); pass --topic-prefix"
        )


def read_kcat_lines(path: Path | str, names: TopicNames) -> Iterator[InputRecord]:
    """Records of one ``kcat -C -J`` file (``-``: stdin; gzip or not) under the prefix of ``names``.

    A line that is not such a record raises ReplayInputError naming the file and line; so does a
    file whose topics are none of ours (the message lists the topics seen and the prefix)."""
    for suffix, topic, partition, offset, ts, key, value in _lines(path, names):
        yield InputRecord(suffix, topic, partition, offset, ts, key, value)


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
    """One replay's state: the processor over an in-memory store, fed rows in order."""

    def __init__(
        self,
        settings: Settings,
        decider: Decider,
        emit: Callable[[Out], None],
        on_state: Callable[[DeviceStateChange], None] | None = None,
    ) -> None:
        registry = load_registry(settings.contracts_file, settings.capabilities_file)
        self.processor = Processor(registry, Pipeline(registry, language=settings.language), decider)
        self.store = ReplayStore()
        self.emit = emit
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
            for o in self.processor.confirm_quiet(self.store, device_id, None).outs:
                self.emit(o)


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
    mode: str, recorded: RecordedDecisions, model_decider: Decider | None
) -> tuple[Decider, RecordedDecider | None]:
    if mode == "recorded":
        recorded_decider = RecordedDecider(recorded)
        return recorded_decider, recorded_decider
    if mode == "model":
        if model_decider is None:
            raise ReplayInputError(
                "--decisions model needs GUARDIAN_SUPERVISOR=gemini and a configured model"
            )
        return model_decider, None
    return rules.decide, None


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
    model_decider: Decider | None = None,
) -> ReplayResult:
    """Run input records through the live pipeline's logic, in memory; pure apart from the registry load."""
    recorded = RecordedDecisions()
    for r in records:
        if r.suffix == "decisions":
            recorded.add_value(r.value, r.topic, r.partition, r.offset)
    if mode is None:
        mode = "recorded" if recorded.readable() else "rules"
    decider, recorded_decider = _decider_for(mode, recorded, model_decider)
    outs: dict[str, list[dict[str, Any]]] = {k: [] for k in OUT_KINDS}
    counts = SummaryCounts()

    def collect(o: Out) -> None:
        outs[o.kind].append(o.value)
        counts.add(o.kind, o.value)

    device_states: list[DeviceStateChange] = []
    engine = ReplayEngine(settings, decider, collect, device_states.append)
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
        self, names: TopicNames, tmp: Path, jobs: int, chunk_bytes: int, progress: Progress | None = None
    ) -> None:
        self.names = names
        self.progress = progress
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
        for suffix, topic, partition, offset, ts, key, value in _lines(name, self.names):
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
        share.spill(self.tmp / f"run-{j}-{self._runs}")


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
    model_decider: Decider | None = None,
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

        with blocking_model_decider(settings) as model:
            return _run_job(share, tmp, out_dir, settings, mode, model, states, positions, progress)
    # on disk, read back by trigger (closed at the end; on an error, with the temporary folder)
    recorded = RecordedDecisions(share.recorded or ":memory:")
    decider, recorded_decider = _decider_for(mode, recorded, model_decider)
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
            engine = ReplayEngine(settings, decider, emit, add_state if states else None)
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
    model_decider: Decider | None = None,
    progress: Progress | None = None,
    env: dict[str, str] | None = None,
) -> StreamedReplay:
    """Replay ``files`` into ``out_dir`` in bounded memory (see the module docstring).

    Every output is written into a staging folder and replaces the previous ones in ``out_dir``
    only when the replay succeeds (:mod:`guardian.replay_out`): if anything fails, ``out_dir`` is
    left as it was. Raises ReplayInputError for unreadable input, OutputError when ``out_dir``
    cannot be used. ``env``: where ``SOURCE_DATE_EPOCH`` is looked for (default: the process's)."""
    check_inputs(files, out_dir)
    at = made_at(os.environ if env is None else env)
    with staged_outputs(out_dir) as stage, tempfile.TemporaryDirectory(prefix="guardian-replay-") as tmp_name:
        tmp = Path(tmp_name)
        spool = _Spool(TopicNames(settings.topic_prefix), tmp, jobs, chunk_bytes, progress)
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
