"""One input record through the gate and the core, against a state store.

The live worker (``streams``) and ``guardian replay`` both drive :class:`Processor`; only the store
differs (faust RocksDB tables, or dicts). The store is the seam: it is the only thing the processor
touches besides its arguments, and it does no I/O of its own in replay.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Protocol

from pipeline.core import Pipeline
from pipeline.step import Decider, RawRef, Result
from supervisor.verdict import Verdict
from tables.claims import ClaimRate
from tables.state import DeviceState, ExperienceState, PlanParts, Trigger
from topics.envelope import Coords, Out
from topics.gate import Admitted, Gate, Rejected
from topics.records import DeviceContext, ExperiencePlan, Observation, TaskEvent
from topics.registry import Registry

InputKind = str  # "plans" | "observations" | "task-events" | "device-context"

# a Coords' slots, for the once-per-record path of Processor.process
_new = object.__new__
_set_suffix = Coords.__dict__["suffix"].__set__
_set_partition = Coords.__dict__["partition"].__set__
_set_offset = Coords.__dict__["offset"].__set__


class StateStore(Protocol):
    """Per-device state, dedup memory and the experience→device index.

    ``applied_outputs`` and ``commit`` make reprocessing after a crash exact: a store that keeps
    the device's state, the offsets it has applied and the outputs of its last records in one
    value (written at once) can tell a record it has already applied, and hand back the very
    outputs it made then, instead of treating the record as new or as a device's duplicate.
    """

    def applied_outputs(self, device_id: str, coords: Coords) -> list[Out] | None: ...

    def commit(self, device_id: str, coords: Coords, outs: list[Out]) -> None: ...

    def get_device(self, device_id: str) -> DeviceState | None: ...

    def put_device(self, state: DeviceState) -> None: ...

    def get_experience(self, device_id: str) -> ExperienceState | None: ...

    def put_experience(self, state: ExperienceState) -> None: ...

    def get_seen(self, device_id: str, event_id: str) -> tuple[int, str] | None: ...

    def put_seen(self, device_id: str, event_id: str, received_at_ms: int, coords: Coords) -> None: ...

    def owner_of(self, experience_id: str) -> str | None: ...

    def put_owner(self, experience_id: str, device_id: str) -> None: ...

    def claim(self, experience_id: str, device_id: str, received_at_ms: int) -> bool:
        """May ``device_id``'s plan received at ``received_at_ms`` take ``experience_id``, which
        has no owner (§2 rule 12)? False: beyond the device's claim rate, its plan is refused."""
        ...


@dataclass
class MemoryStore:
    """A store in dicts: replay, tests and benchmarks of the core."""

    devices: dict[str, DeviceState] = field(default_factory=dict)
    experiences: dict[str, ExperienceState] = field(default_factory=dict)
    seen: dict[tuple[str, str], tuple[int, str]] = field(default_factory=dict)
    owners: dict[str, str] = field(default_factory=dict)
    #: each device's claim rate (§2 rule 12), claimed in processing order
    rates: ClaimRate = field(default_factory=ClaimRate)

    def applied_outputs(self, device_id: str, coords: Coords) -> list[Out] | None:
        return None

    def commit(self, device_id: str, coords: Coords, outs: list[Out]) -> None:
        return None

    def get_device(self, device_id: str) -> DeviceState | None:
        return self.devices.get(device_id)

    def put_device(self, state: DeviceState) -> None:
        self.devices[state.device_id] = state

    def get_experience(self, device_id: str) -> ExperienceState | None:
        return self.experiences.get(device_id)

    def put_experience(self, state: ExperienceState) -> None:
        self.experiences[state.device_id] = state

    def get_seen(self, device_id: str, event_id: str) -> tuple[int, str] | None:
        return self.seen.get((device_id, event_id))

    def put_seen(self, device_id: str, event_id: str, received_at_ms: int, coords: Coords) -> None:
        self.seen[(device_id, event_id)] = (received_at_ms, str(coords))

    def owner_of(self, experience_id: str) -> str | None:
        return self.owners.get(experience_id)

    def put_owner(self, experience_id: str, device_id: str) -> None:
        self.owners[experience_id] = device_id

    def claim(self, experience_id: str, device_id: str, received_at_ms: int) -> bool:
        return self.rates.allow(device_id, received_at_ms)


class ReplayStore(MemoryStore):
    """The store of ``guardian replay``: a :class:`MemoryStore` whose dedup memory is compact (one
    string key and the first sighting's time per event) and forgets keys past the dedup window.

    Replay reads every record once, so a sighting is never "this very record": ``get_seen`` hands
    back no coordinates. Sightings must be put in time order (replay processes in Kafka timestamp
    order), so the oldest are at the front of ``_order``.

    A fleet's plans mostly differ only in their IDs: an experience's plan is kept with the parts
    equal to another plan's shared (as the live store's cache does), so the per-device state a
    replay holds is smaller (equal in content and in key order: outputs are unchanged)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen_at: dict[str, int] = {}
        self._order: deque[str] = deque()
        self.plan_parts = PlanParts()

    def put_experience(self, state: ExperienceState) -> None:
        prior = self.experiences.get(state.device_id)
        if prior is None or prior.plan is not state.plan:  # a plan not kept here yet
            state.plan = self.plan_parts.share(state.plan)
        self.experiences[state.device_id] = state

    def get_seen(self, device_id: str, event_id: str) -> tuple[int, str] | None:
        at = self.seen_at.get(f"{device_id}\x1f{event_id}")
        return None if at is None else (at, "")

    def put_seen(self, device_id: str, event_id: str, received_at_ms: int, coords: Coords) -> None:
        key = f"{device_id}\x1f{event_id}"
        self.seen_at[key] = received_at_ms
        self._order.append(key)

    def forget_seen_before(self, cutoff_ms: int) -> int:
        """Forget the keys first seen before ``cutoff_ms`` (now minus the dedup window: they can no
        longer make a record a duplicate, §4.3 step 5); how many."""
        order, seen = self._order, self.seen_at
        n = 0
        while order:
            key = order[0]
            at = seen.get(key)
            if at is not None and at >= cutoff_ms:
                break  # (a key put again later waits here for its newer sighting: a short lag)
            order.popleft()
            if at is not None:
                del seen[key]
                n += 1
        return n


@dataclass(slots=True)
class Processed:
    """What one record produced: outputs, triggers waiting for an asynchronous decision (to decide
    on the experience's ``etag``), and when the device next falls due (``next_due_ms``, for the
    quiet-device timer)."""

    outs: list[Out]
    queued: list[Trigger]
    device_id: str | None
    next_due_ms: int | None = None
    etag: int = 0


class Processor:
    """Gate + core over a store. ``decide`` is the inline decider (rules), or None for async."""

    def __init__(self, registry: Registry, pipeline: Pipeline, decide: Decider | None) -> None:
        self.gate = Gate(registry)
        self.pipeline = pipeline
        self.decide = decide

    def process(
        self,
        store: StateStore,
        kind: InputKind,
        key: bytes | None,
        value: bytes | None,
        source_topic: str,
        partition: int,
        offset: int,
        received_at_ms: int,
        admitted: Admitted | Rejected | None = None,
    ) -> Processed:
        """One input record through the gate and the core. ``admitted``: the gate's verdict on this
        very record, when the caller has it already (the live shell judges a plan on its way into
        the merge)."""
        verdict = (
            admitted
            if admitted is not None
            else self.gate.admit(
                kind,  # type: ignore[arg-type]
                key,
                value,
                source_topic=source_topic,
                partition=partition,
                offset=offset,
                received_at_ms=received_at_ms,
            )
        )
        if not isinstance(verdict, Admitted):
            # published under the key the dead letter shows: bounded (§10), never the raw key
            return Processed([Out("deadletter", verdict.value["key"], verdict.value)], [], None)
        record = verdict.record
        device_id = record.device_id
        # Coords(kind, partition, offset), without the frozen dataclass's checked attribute writes
        coords = _new(Coords)
        _set_suffix(coords, kind)
        _set_partition(coords, partition)
        _set_offset(coords, offset)
        prior = store.applied_outputs(device_id, coords)
        if prior is not None:
            if isinstance(record, (Observation, TaskEvent)):
                seen = store.get_seen(device_id, record.event_id)
                if seen is not None and seen[1] == str(coords):
                    # its dedup key, written by this very record: write it again like the state
                    store.put_seen(device_id, record.event_id, seen[0], coords)
                elif seen is None and _marked_seen(prior, record.event_id):
                    # the state reflects the record but its dedup key is gone: the key's changelog
                    # batch never landed while the state's did (a worker that stopped between
                    # them). Written again, or the record's duplicates would pass as new
                    store.put_seen(device_id, record.event_id, received_at_ms, coords)
            if isinstance(record, ExperiencePlan) and any(
                o.kind == "timeline" and o.value.get("stage") == "goal" for o in prior
            ):
                # the owner index is a table of its own: write it again, it may not have landed
                store.put_owner(record.experience_id, device_id)
            return _again(store, device_id, prior)
        dev = store.get_device(device_id) or DeviceState(device_id=device_id)
        exp = store.get_experience(device_id)
        res: Result
        if isinstance(record, Observation):
            res = self.pipeline.on_observation(  # (positional: most records are observations)
                dev,
                exp,
                record,
                received_at_ms,
                _seen_at(store, device_id, record.event_id, coords),
                store.owner_of,
                self.decide,
                RawRef(source_topic, partition, offset, value or b""),
            )
        elif isinstance(record, TaskEvent):
            res = self.pipeline.on_task_event(
                dev,
                exp,
                record,
                received_at_ms,
                seen_at=_seen_at(store, device_id, record.event_id, coords),
                owner_of=store.owner_of,
                decide=self.decide,
            )
        elif isinstance(record, ExperiencePlan):
            res = self.pipeline.on_plan(
                dev,
                exp,
                record,
                received_at_ms,
                owner_of=store.owner_of,
                raw=RawRef(source_topic, partition, offset, value or b""),
                plan_json=verdict.json,
                claim_of=store.claim,
            )
            if res.owner is not None:
                store.put_owner(*res.owner)
        else:
            assert isinstance(record, DeviceContext)
            res = self.pipeline.on_device_context(dev, exp, record, received_at_ms)
        if res.mark_seen and isinstance(record, (Observation, TaskEvent)):
            store.put_seen(device_id, record.event_id, received_at_ms, coords)
        return _store(store, dev, res, coords)

    def apply(
        self,
        store: StateStore,
        device_id: str,
        trigger: Trigger,
        verdict: Verdict,
        decided_on_etag: int,
        at_ms: int,
        coords: Coords | None = None,
    ) -> Processed:
        """Apply a verdict reached asynchronously (etag, dedup and budget are checked by the core)."""
        prior = store.applied_outputs(device_id, coords) if coords is not None else None
        if prior is not None:
            return _again(store, device_id, prior)
        dev = store.get_device(device_id)
        if dev is None:
            return Processed([], [], device_id)
        res = self.pipeline.apply_verdict(
            dev,
            store.get_experience(device_id),
            trigger,
            verdict,
            decided_on_etag=decided_on_etag,
            at_ms=at_ms,
        )
        return _store(store, dev, res, coords)

    def confirm_quiet(
        self, store: StateStore, device_id: str, now_ms: int | None, coords: Coords | None = None
    ) -> Processed:
        """Confirm a quiet device's pending debounce changes and decide a due precondition deadline
        (timer live, end of input in replay)."""
        prior = store.applied_outputs(device_id, coords) if coords is not None else None
        if prior is not None:
            return _again(store, device_id, prior)
        dev = store.get_device(device_id)
        if dev is None or dev.next_due_ms() is None:
            return Processed([], [], device_id)
        res = self.pipeline.confirm_pending(
            dev, store.get_experience(device_id), now_ms, owner_of=store.owner_of, decide=self.decide
        )
        return _store(store, dev, res, coords)


def _store(store: StateStore, dev: DeviceState, res: Result, coords: Coords | None) -> Processed:
    """Write what one step changed: the device, its experience and (live) the applied offset with
    the step's outputs, in the store's one atomic value."""
    store.put_device(dev)
    if res.experience is not None:
        store.put_experience(res.experience)
    if coords is not None:
        store.commit(dev.device_id, coords, res.outs)
    return Processed(res.outs, res.queued, dev.device_id, res.next_due_ms, res.etag)


def _again(store: StateStore, device_id: str, prior: list[Out]) -> Processed:
    """A re-read record the store already reflects: its logged outputs, and the stored device's
    next due time (nothing is queued again: a waiting trigger is resubmitted on recovery)."""
    dev = store.get_device(device_id)
    return Processed(prior, [], device_id, dev.next_due_ms() if dev is not None else None)


def _marked_seen(prior: list[Out], event_id: str) -> bool:
    """Did the first processing of a record whose logged outputs are ``prior`` remember its event
    as seen? Every admitted observation and task event does, except a duplicate (its ``drop``
    entry) and a ``cross_device`` dead letter (it changes no state)."""
    for out in prior:
        if out.kind == "deadletter":
            return False
        value = out.value
        if (
            out.kind == "timeline"
            and value.get("drop_reason") == "duplicate"
            and value.get("ref_id") == event_id
        ):
            return False
    return True


def _seen_at(store: StateStore, device_id: str, event_id: str, coords: Coords) -> int | None:
    """When the event was first seen, unless the first sighting was this very record (a re-read of a
    record whose dedup key landed before a crash is not a device's duplicate)."""
    seen = store.get_seen(device_id, event_id)
    if seen is None or seen[1] == str(coords):
        return None
    return seen[0]
