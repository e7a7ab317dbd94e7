"""The state the pipeline keeps, as plain data with a stable JSON form.

Two values per device, both keyed by ``device_id`` so that they live in the partition of the
device's records (no repartition):

- :class:`DeviceState`: the device snapshot (latest observation per contract, only ever moving
  forward in ``observed_at_ms``), the debounce states, the last applied task sequence, the active
  experience and the timeline sequence counter.
- :class:`ExperienceState`: ``experience.state.v1``, the device's current (or last) experience:
  plan, phase, areas, evidence, budgets, the ``state_etag`` and the triggers awaiting a decision.

Deduplication memory is not in here: it is one small key per seen event (the ``seen`` table of
``tables.store.guardian_tables``). The plan parts shared between experiences are
``tables.plan_parts`` (:class:`PlanParts`, re-exported here).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

from tables.plan_parts import PlanParts as PlanParts
from tables.plan_parts import compact as compact
from topics.context import KeptEnvelope

FactValue = str | bool | int
#: ``pending``: admitted, waiting for its preconditions (a device-context refresh, §9.4)
Phase = Literal["pending", "active", "winding_down", "ended"]
WindDown = Literal["return_to_station", "abort"]

#: How many ended experience IDs a device remembers (a re-delivered old plan is then a duplicate).
ENDED_MEMORY = 32
#: How many recent promoted observations an experience keeps for the supervisor's context
#: (docs/CONTRACTS.md §6.1).
RECENT_PROMOTED = 6
#: How many decided trigger IDs an experience remembers (a decision arriving again is ignored;
#: the dedup memory already stops a trigger from being promoted twice).
DECIDED_MEMORY = 64
#: How many promoted triggers may wait for an asynchronous decision at once (more: budget_exhausted).
MAX_PENDING = 32


@dataclass(slots=True)
class Trigger:
    """A scoped observation on its way to (or waiting for) a decision: only allowlisted facts."""

    event_id: str
    type: str
    observed_at_ms: int
    received_at_ms: int
    facts: dict[str, FactValue]
    correlation: tuple[str, str, str] | None = None
    requires_cloud_decision: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "event_id": self.event_id,
            "type": self.type,
            "observed_at_ms": self.observed_at_ms,
            "received_at_ms": self.received_at_ms,
            "facts": self.facts,
            "correlation": list(self.correlation) if self.correlation else None,
            "requires_cloud_decision": self.requires_cloud_decision,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Trigger:
        corr = d.get("correlation")
        return cls(
            event_id=d["event_id"],
            type=d["type"],
            observed_at_ms=d["observed_at_ms"],
            received_at_ms=d["received_at_ms"],
            facts=dict(d["facts"]),
            correlation=(corr[0], corr[1], corr[2]) if corr else None,
            requires_cloud_decision=bool(d.get("requires_cloud_decision", False)),
        )


@dataclass(slots=True)
class SnapshotEntry:
    """The latest observation of one contract on one device."""

    event_id: str
    observed_at_ms: int
    received_at_ms: int
    facts: dict[str, FactValue]
    stale: bool = False


@dataclass(slots=True)
class DebounceState:
    """One debounced signal (§4.3 step 7): its stable value and an optional pending change."""

    stable: FactValue | None
    pending: Trigger | None = None
    #: the value the pending change moves to
    pending_value: FactValue | None = None
    #: the debounce window of the contract, kept with the pending change
    window_ms: int = 0


@dataclass(slots=True)
class DeviceState:
    device_id: str
    active_experience_id: str | None = None
    ended_experiences: list[tuple[str, str]] = field(default_factory=list)
    last_task_sequence: int | None = None
    #: the sequence of the last task event refused as a jump (§5), which the next may confirm
    sequence_jump: int | None = None
    snapshot: dict[str, SnapshotEntry] = field(default_factory=dict)
    debounce: dict[str, DebounceState] = field(default_factory=dict)
    voice_session_active: bool = False
    timeline_seq: int = 0
    last_received_ms: int = 0
    #: device context v2 (§9.1): domain -> its newest envelope (a fixed set of domains)
    context: dict[str, KeptEnvelope] = field(default_factory=dict)
    #: receive-time ms by which the pending experience's preconditions must pass (§9.4)
    precondition_due_ms: int | None = None
    #: how many of ``debounce`` hold a pending change: counted at construction, then kept by
    #: :mod:`pipeline.debounce` (the only writer of a pending change) so that the two questions
    #: asked once per observation (anything pending? when due?) need no loop when none is;
    #: derived, never serialised
    pending_changes: int = field(default=0, compare=False, repr=False)

    def __post_init__(self) -> None:
        self.pending_changes = sum(1 for d in self.debounce.values() if d.pending is not None)

    # -- serialisation -------------------------------------------------------------------------
    def to_json(self) -> bytes:
        return orjson.dumps(self.to_obj())

    @classmethod
    def from_json(cls, raw: bytes) -> DeviceState:
        return cls.from_obj(orjson.loads(raw))

    def to_obj(self) -> dict[str, Any]:
        obj: dict[str, Any] = {
            "v": 1,
            "device_id": self.device_id,
            "active_experience_id": self.active_experience_id,
            "ended_experiences": self.ended_experiences,
            "last_task_sequence": self.last_task_sequence,
            "snapshot": {
                k: [e.event_id, e.observed_at_ms, e.received_at_ms, e.facts, e.stale]
                for k, e in self.snapshot.items()
            },
            "debounce": {
                k: [
                    d.stable,
                    d.pending.to_dict() if d.pending else None,
                    d.pending_value,
                    d.window_ms,
                ]
                for k, d in self.debounce.items()
            },
            "voice_session_active": self.voice_session_active,
            "timeline_seq": self.timeline_seq,
            "last_received_ms": self.last_received_ms,
        }
        # device context v2 (left out while empty: most devices' state stays as small as before)
        if self.context:
            obj["context"] = {k: e.to_list() for k, e in self.context.items()}
        if self.precondition_due_ms is not None:
            obj["precondition_due_ms"] = self.precondition_due_ms
        if self.sequence_jump is not None:
            obj["sequence_jump"] = self.sequence_jump
        return obj

    @classmethod
    def from_obj(cls, d: dict[str, Any]) -> DeviceState:
        return cls(
            device_id=d["device_id"],
            active_experience_id=d["active_experience_id"],
            ended_experiences=[(a, b) for a, b in d["ended_experiences"]],
            last_task_sequence=d["last_task_sequence"],
            snapshot={k: SnapshotEntry(v[0], v[1], v[2], v[3], v[4]) for k, v in d["snapshot"].items()},
            debounce={
                k: DebounceState(
                    stable=v[0],
                    pending=Trigger.from_dict(v[1]) if v[1] else None,
                    pending_value=v[2],
                    window_ms=v[3],
                )
                for k, v in d["debounce"].items()
            },
            voice_session_active=d["voice_session_active"],
            timeline_seq=d["timeline_seq"],
            last_received_ms=d["last_received_ms"],
            context={k: KeptEnvelope.from_list(v) for k, v in (d.get("context") or {}).items()},
            precondition_due_ms=d.get("precondition_due_ms"),
            sequence_jump=d.get("sequence_jump"),
        )

    def has_pending(self) -> bool:
        return self.pending_changes > 0

    def next_due_ms(self) -> int | None:
        """The receive-time ms when something of this quiet device falls due (the earliest
        pending debounce change, or the precondition deadline), or None."""
        due = self.precondition_due_ms
        if not self.pending_changes:
            return due
        for st in self.debounce.values():
            if st.pending is not None:
                at = st.pending.received_at_ms + st.window_ms
                due = at if due is None else min(due, at)
        return due

    def remember_ended(self, experience_id: str, status: str) -> None:
        self.ended_experiences.append((experience_id, status))
        if len(self.ended_experiences) > ENDED_MEMORY:
            del self.ended_experiences[: len(self.ended_experiences) - ENDED_MEMORY]

    def ended_status(self, experience_id: str) -> str | None:
        for exp_id, status in reversed(self.ended_experiences):
            if exp_id == experience_id:
                return status
        return None


@dataclass(slots=True)
class Budgets:
    decisions: int = 0
    max_decisions: int = 3
    local_retry: int = 1
    cloud_replan: int = 2
    user_question: int = 1

    def after(self) -> dict[str, int]:
        """The ``budget_after`` of a decision (§6)."""
        return {
            "decisions": self.decisions,
            "local_retry": self.local_retry,
            "cloud_replan": self.cloud_replan,
            "user_question": self.user_question,
        }


@dataclass(slots=True)
class ExperienceState:
    """``experience.state.v1``: one experience of one device."""

    experience_id: str
    device_id: str
    workflow_id: str
    plan: dict[str, Any]
    phase: Phase = "active"
    status: str = "active"
    wind_down: WindDown | None = None
    areas: list[str] = field(default_factory=list)
    patrolled: list[str] = field(default_factory=list)
    current_area: str | None = None
    security: str = "idle"
    security_started: bool = False
    docked: bool = False
    evidence: list[str] = field(default_factory=list)
    started_steps: list[tuple[str, str]] = field(default_factory=list)
    budgets: Budgets = field(default_factory=Budgets)
    etag: int = 1
    decided: list[str] = field(default_factory=list)
    pending: list[Trigger] = field(default_factory=list)
    recent: list[Trigger] = field(default_factory=list)
    voice_paused: bool = False

    @property
    def state_etag(self) -> str:
        return f"e{self.etag}"

    @property
    def winding_down(self) -> bool:
        return self.phase == "winding_down"

    @property
    def plan_areas(self) -> list[str]:
        """The areas of the plan (a replan may drop some from ``areas``, never add one)."""
        areas: list[str] = self.plan.get("areas") or []
        return areas

    def awaits_decision(self, trigger: Trigger) -> bool:
        """Whether ``trigger`` of this experience is queued for an asynchronous decision and not
        decided yet (what a model lane, live or in replay, checks before deciding it)."""
        if trigger.correlation is None or self.experience_id != trigger.correlation[0]:
            return False
        if trigger.event_id in self.decided:
            return False
        return any(t.event_id == trigger.event_id for t in self.pending)

    def remaining_areas(self) -> list[str]:
        done = set(self.patrolled)
        return [a for a in self.areas if a not in done]

    def success_met(self, *, deciding: str | None = None) -> bool:
        """Every success condition of the plan (§3) has physical evidence; ``deciding`` names a
        trigger being decided right now, which counts as handled."""
        for cond in self.plan.get("success_conditions") or ():
            if cond == "admitted_area_patrol_completed":
                if self.remaining_areas():
                    return False
            elif cond == "meaningful_security_events_handled":
                if any(t.event_id != deciding for t in self.pending):
                    return False
            elif cond == "security_session_stopped":
                if self.security != "stopped":
                    return False
            elif cond == "device_physically_docked" and not self.docked:
                return False
        return True

    def area_name(self, area_id: str | None) -> str | None:
        if area_id is None:
            return None
        names = self.plan.get("area_names") or {}
        name = names.get(area_id)
        return str(name) if name else None

    def to_json(self) -> bytes:
        return orjson.dumps(self.to_obj())

    @classmethod
    def from_json(cls, raw: bytes) -> ExperienceState:
        return cls.from_obj(orjson.loads(raw))

    def to_obj(self) -> dict[str, Any]:
        b = self.budgets
        return {
            "v": "experience.state.v1",
            "experience_id": self.experience_id,
            "device_id": self.device_id,
            "workflow_id": self.workflow_id,
            "plan": self.plan,
            "phase": self.phase,
            "status": self.status,
            "wind_down": self.wind_down,
            "areas": self.areas,
            "patrolled": self.patrolled,
            "current_area": self.current_area,
            "security": self.security,
            "security_started": self.security_started,
            "docked": self.docked,
            "evidence": self.evidence,
            "started_steps": self.started_steps,
            "budgets": [b.decisions, b.max_decisions, b.local_retry, b.cloud_replan, b.user_question],
            "etag": self.etag,
            "decided": self.decided,
            "pending": [t.to_dict() for t in self.pending],
            "recent": [t.to_dict() for t in self.recent],
            "voice_paused": self.voice_paused,
        }

    @classmethod
    def from_obj(cls, d: dict[str, Any]) -> ExperienceState:
        b = d["budgets"]
        return cls(
            experience_id=d["experience_id"],
            device_id=d["device_id"],
            workflow_id=d["workflow_id"],
            plan=d["plan"],
            phase=d["phase"],
            status=d["status"],
            wind_down=d["wind_down"],
            areas=list(d["areas"]),
            patrolled=list(d["patrolled"]),
            current_area=d["current_area"],
            security=d["security"],
            security_started=d["security_started"],
            docked=d["docked"],
            evidence=list(d["evidence"]),
            started_steps=[(a, o) for a, o in d["started_steps"]],
            budgets=Budgets(b[0], b[1], b[2], b[3], b[4]),
            etag=d["etag"],
            decided=list(d["decided"]),
            pending=[Trigger.from_dict(t) for t in d["pending"]],
            recent=[Trigger.from_dict(t) for t in d["recent"]],
            voice_paused=d["voice_paused"],
        )
