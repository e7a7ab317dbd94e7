"""The replay engine, :class:`ReplayEngine`: input rows, in the order of docs/CONTRACTS.md §2 rule 11,
through the live worker's :class:`pipeline.runner.Processor` over an in-memory store, every output
handed to a sink; with the decider of each ``--decisions`` mode and the rows of a list of records."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from config.settings import Settings
from guardian.recorded import RecordedDecider, RecordedDecisions
from guardian.replay_input import InputRecord, ReplayInputError
from guardian.replay_jobs import end_position, row_position
from guardian.replay_model import DeferredDecisions, DeviceDecider
from guardian.runs import Row
from pipeline.core import Pipeline
from pipeline.order import RANK, in_order
from pipeline.runner import Processor, ReplayStore
from pipeline.step import Decider
from report.bands import AdmittedStates, DeviceStateChange
from supervisor import rules
from topics.envelope import Out
from topics.gate import Admitted
from topics.records import ExperiencePlan
from topics.registry import load_registry

_TIE_ORDER = RANK
_OBSERVATIONS_TIE = _TIE_ORDER["observations"]
#: how often (records) the dedup memory forgets keys older than the window
SWEEP_EVERY = 4096


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
            if n % SWEEP_EVERY == 0:
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
def fewer_collections() -> Iterator[None]:
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


def decider_for(
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


def all_divergences(
    recorded: RecordedDecisions,
    recorded_decider: RecordedDecider | None,
    produced: Iterable[dict[str, Any]],
) -> Iterator[dict[str, Any]]:
    """Every divergence of a replay (none unless recorded decisions were reused), by device."""
    if recorded_decider is None:
        return iter(())
    return recorded.divergences(produced)


def input_rows(records: Iterable[InputRecord]) -> list[Row]:
    """Input records (decisions aside) as rows, in the order of §2 rule 11."""
    ours = (r for r in records if r.suffix in _TIE_ORDER)
    return [
        (t, _TIE_ORDER[r.suffix], r.partition, r.offset, seq, r.suffix, r.topic, r.key, r.value, True, r.ts)
        for seq, (t, r) in enumerate(in_order(ours))
    ]
