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
each with its own runs and outputs, concatenated at the end. Plans of other jobs' devices still
update each job's experience→device index, so cross-device checks see what a single job sees.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import gc
import gzip
import hashlib
import io
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
from typing import IO, Any, cast

import orjson

from config.exitcodes import Exit
from config.settings import Settings
from guardian import runs
from guardian.runs import RECORD_OVERHEAD, Row, StreamRow
from pipeline.core import Pipeline
from pipeline.order import RANK, in_order
from pipeline.runner import Processor, ReplayStore
from pipeline.step import Decider
from report.html import DeviceStateChange, device_state_change
from supervisor import rules
from supervisor.checks import recorded_verdict
from supervisor.verdict import Verdict
from tables.state import ExperienceState, Trigger
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
            raw = sys.stdin.buffer
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
        on_state = self.on_state
        window = self.processor.pipeline.dedup_window_ms
        n = self.records
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
            if on_state is not None and tie == _OBSERVATIONS_TIE:
                change = device_state_change(ts, value)
                if change is not None:
                    on_state(change)
            if n % _SWEEP_EVERY == 0:
                store.forget_seen_before(order_ts - window)
            for o in process(store, suffix, key, value, topic, partition, offset, ts).outs:  # positional
                emit(o)
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
            received_at_ms=row[10],
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
) -> list[dict[str, Any]]:
    if recorded_decider is None:
        return []
    divergences = _divergences(recorded, produced)
    for event_id in recorded_decider.missing:
        divergences.append({"trigger_event_id": event_id, "kind": "no_recorded_decision"})
    for event_id, why in recorded_decider.invalid:
        divergences.append({"trigger_event_id": event_id, "kind": "invalid_recorded_decision", "why": why})
    return divergences


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
    #: network and voice observations of the input (they write no timeline entry): the report's bands
    device_states: list[DeviceStateChange] = field(default_factory=list)


def replay_records(
    records: list[InputRecord],
    *,
    settings: Settings,
    mode: str | None = None,
    model_decider: Decider | None = None,
) -> ReplayResult:
    """Run input records through the live pipeline's logic, in memory; pure apart from the registry load."""
    recorded = RecordedDecisions.from_records(records)
    if mode is None:
        mode = "recorded" if recorded.by_trigger else "rules"
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


@dataclass
class _JobInput(runs.Runs):
    """One job's share of the input (:data:`guardian.runs.StreamRow`): sorted runs on disk and/or
    one sorted chunk in memory, and the recorded decisions."""

    decisions: list[InputRecord] = field(default_factory=list)

    def ordered(self, tmp: Path) -> Iterator[Row]:
        """Every row in the order of §2 rule 11 (its runs are used up)."""
        return itertools.chain.from_iterable(runs.in_order(self, tmp, MAX_FAN_IN))


class _Spool:
    """Reads every input file once, checks each line, routes rows to jobs and spills sorted runs."""

    def __init__(self, names: TopicNames, tmp: Path, jobs: int, chunk_bytes: int) -> None:
        self.names = names
        self.tmp = tmp
        self.jobs = [_JobInput(limit=chunk_bytes) for _ in range(jobs)]
        self.chunk_bytes = chunk_bytes
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
        for suffix, topic, partition, offset, ts, key, value in _lines(name, self.names):
            tie = tie_of(suffix)
            if tie is None:
                if suffix == "decisions":
                    rec = InputRecord(suffix, topic, partition, offset, ts, key, value)
                    self.jobs[job_of(_decision_device(key, value), jobs)].decisions.append(rec)
                    self.has_decisions = self.has_decisions or _is_recorded_decision(value)
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

    def _add(self, j: int, row: StreamRow, size: int) -> None:
        share = self.jobs[j]
        share.chunk.append(row)
        share.chunk_bytes += size
        if share.chunk_bytes >= self.chunk_bytes:
            self._spill(j)

    def _spill(self, j: int) -> None:
        """Sort job ``j``'s chunk into a run file."""
        self._runs += 1
        self.jobs[j].spill(self.tmp / f"run-{j}-{self._runs}")


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
    model_decider: Decider | None = None,
    states: bool = True,
) -> _JobResult:
    """Replay one job's share into ``out_dir`` (its four output files and divergences.jsonl); with
    ``states``, the network and voice observations it saw go to :func:`_states_file` for the
    report (without a report they are not looked for: one JSON parse per observation less)."""
    recorded = RecordedDecisions.from_records(share.decisions)
    share.decisions = []
    if mode == "model" and model_decider is None:
        from supervisor.sync import blocking_model_decider

        with blocking_model_decider(settings) as model:
            return _run_job(share, tmp, out_dir, settings, mode, model, states)
    decider, recorded_decider = _decider_for(mode, recorded, model_decider)
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
            engine = ReplayEngine(settings, decider, emit, add_state if states else None)
            with _fewer_collections():
                engine.feed(share.ordered(tmp))
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
    model_decider: Decider | None = None,
) -> StreamedReplay:
    """Replay ``files`` into ``out_dir`` in bounded memory (see the module docstring).

    ``out_dir`` is emptied of Guardian's own files first; if anything fails, none of them is left
    behind. Raises ReplayInputError for unreadable input."""
    if out_dir.exists() and not out_dir.is_dir():
        raise ReplayInputError(f"--out {out_dir} is a file, not a directory")
    out_dir.mkdir(parents=True, exist_ok=True)
    clear_outputs(out_dir)
    try:
        with tempfile.TemporaryDirectory(prefix="guardian-replay-") as tmp_name:
            tmp = Path(tmp_name)
            spool = _Spool(TopicNames(settings.topic_prefix), tmp, jobs, chunk_bytes)
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
        spool.jobs[j] = _JobInput(limit=spool.chunk_bytes)
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
