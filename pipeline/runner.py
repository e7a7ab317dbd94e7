"""One input record through the gate and the core, against a state store.

The live worker (``streams``) and ``guardian replay`` both drive :class:`Processor`; only the store
differs (faust RocksDB tables, or dicts). The store is the seam: it is the only thing the processor
touches besides its arguments, and it does no I/O of its own in replay.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from pipeline.core import Decider, Out, Pipeline, RawRef, Result
from supervisor.verdict import Verdict
from tables.state import DeviceState, ExperienceState, Trigger
from topics.gate import Admitted, Gate
from topics.records import DeviceContext, ExperiencePlan, Observation, TaskEvent
from topics.registry import Registry

InputKind = str  # "plans" | "observations" | "task-events" | "device-context"


class StateStore(Protocol):
    """Per-device state, dedup memory and the experience→device index."""

    def get_device(self, device_id: str) -> DeviceState | None: ...

    def put_device(self, state: DeviceState) -> None: ...

    def get_experience(self, device_id: str) -> ExperienceState | None: ...

    def put_experience(self, state: ExperienceState) -> None: ...

    def get_seen(self, device_id: str, event_id: str) -> int | None: ...

    def put_seen(self, device_id: str, event_id: str, received_at_ms: int) -> None: ...

    def owner_of(self, experience_id: str) -> str | None: ...

    def put_owner(self, experience_id: str, device_id: str) -> None: ...


@dataclass
class MemoryStore:
    """A store in dicts: replay, tests and benchmarks of the core."""

    devices: dict[str, DeviceState] = field(default_factory=dict)
    experiences: dict[str, ExperienceState] = field(default_factory=dict)
    seen: dict[tuple[str, str], int] = field(default_factory=dict)
    owners: dict[str, str] = field(default_factory=dict)

    def get_device(self, device_id: str) -> DeviceState | None:
        return self.devices.get(device_id)

    def put_device(self, state: DeviceState) -> None:
        self.devices[state.device_id] = state

    def get_experience(self, device_id: str) -> ExperienceState | None:
        return self.experiences.get(device_id)

    def put_experience(self, state: ExperienceState) -> None:
        self.experiences[state.device_id] = state

    def get_seen(self, device_id: str, event_id: str) -> int | None:
        return self.seen.get((device_id, event_id))

    def put_seen(self, device_id: str, event_id: str, received_at_ms: int) -> None:
        self.seen[(device_id, event_id)] = received_at_ms

    def owner_of(self, experience_id: str) -> str | None:
        return self.owners.get(experience_id)

    def put_owner(self, experience_id: str, device_id: str) -> None:
        self.owners[experience_id] = device_id


@dataclass(slots=True)
class Processed:
    """What one record produced: outputs, and triggers waiting for an asynchronous decision."""

    outs: list[Out]
    queued: list[Trigger]
    device_id: str | None


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
        *,
        source_topic: str,
        partition: int,
        offset: int,
        received_at_ms: int,
    ) -> Processed:
        verdict = self.gate.admit(
            kind,  # type: ignore[arg-type]
            key,
            value,
            source_topic=source_topic,
            partition=partition,
            offset=offset,
            received_at_ms=received_at_ms,
        )
        key_str = key.decode("utf-8", "replace") if key is not None else ""
        if not isinstance(verdict, Admitted):
            letter = verdict.dead_letter.model_dump(mode="json")
            return Processed([Out("deadletter", key_str, letter)], [], None)
        record = verdict.record
        device_id = record.device_id
        dev = store.get_device(device_id) or DeviceState(device_id=device_id)
        exp = store.get_experience(device_id)
        res: Result
        if isinstance(record, Observation):
            res = self.pipeline.on_observation(
                dev,
                exp,
                record,
                received_at_ms,
                seen_at=store.get_seen(device_id, record.event_id),
                owner_of=store.owner_of,
                decide=self.decide,
                raw=RawRef(source_topic, partition, offset, value or b""),
            )
            if res.mark_seen:
                store.put_seen(device_id, record.event_id, received_at_ms)
        elif isinstance(record, TaskEvent):
            res = self.pipeline.on_task_event(
                dev,
                exp,
                record,
                received_at_ms,
                seen_at=store.get_seen(device_id, record.event_id),
                owner_of=store.owner_of,
                decide=self.decide,
            )
            if res.mark_seen:
                store.put_seen(device_id, record.event_id, received_at_ms)
        elif isinstance(record, ExperiencePlan):
            res = self.pipeline.on_plan(dev, exp, record, received_at_ms)
            if res.owner is not None:
                store.put_owner(*res.owner)
        else:
            assert isinstance(record, DeviceContext)
            res = self.pipeline.on_device_context(dev, exp, record, received_at_ms)
        store.put_device(dev)
        if res.experience is not None:
            store.put_experience(res.experience)
        return Processed(res.outs, res.queued, device_id)

    def apply(
        self,
        store: StateStore,
        device_id: str,
        trigger: Trigger,
        verdict: Verdict,
        decided_on_etag: int,
        at_ms: int,
    ) -> Processed:
        """Apply a verdict reached asynchronously (etag, dedup and budget are checked by the core)."""
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
        store.put_device(dev)
        if res.experience is not None:
            store.put_experience(res.experience)
        return Processed(res.outs, res.queued, device_id)

    def confirm_quiet(self, store: StateStore, device_id: str, now_ms: int | None) -> Processed:
        """Confirm a quiet device's pending debounce changes (timer live, end of input in replay)."""
        dev = store.get_device(device_id)
        if dev is None or not dev.has_pending():
            return Processed([], [], device_id)
        res = self.pipeline.confirm_pending(
            dev, store.get_experience(device_id), now_ms, owner_of=store.owner_of, decide=self.decide
        )
        store.put_device(dev)
        if res.experience is not None:
            store.put_experience(res.experience)
        return Processed(res.outs, res.queued, device_id)


OwnerLookup = Callable[[str], str | None]
