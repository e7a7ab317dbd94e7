"""Pydantic v2 models of every record of docs/CONTRACTS.md (§3–§10).

Input records (plans, observations, task events, device context) reject unknown fields
(``extra="forbid"``) and use strict scalar types: a number in a string, a float where an integer
belongs, or ``true`` where a number belongs is a schema error, never silently coerced. Output
records (decisions, dispatch, timeline, dead letters) serialise to the exact JSON shapes of the
contract with ``model_dump(mode="json")`` (or :meth:`to_json_dict`), and to bytes with the fast
:meth:`to_json_bytes`.

The models are pure data: registry checks (is this a known contract, is this fact allowed, is
this capability exposed to a planner) live in :mod:`topics.gate`.

Device context v2 snapshot (§9 fixes only the per-domain envelope; the snapshot is ours)::

    {"device_id": "airbot-0001",            # = the record key
     "observed_at_ms": 1785326399950,       # when the device took the snapshot
     "event_id": "ctx_0001",                # optional, for tracing and dead letters
     "domains": {"movement": {<envelope>}, "battery": {<envelope>}, ...}}

A snapshot may carry any subset of the twelve domains; a domain that is absent is a *missing*
value (not ``available: false`` and not stale).
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal, Self, get_args

import orjson
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    SerializerFunctionWrapHandler,
    StringConstraints,
    model_serializer,
    model_validator,
)

# --------------------------------------------------------------------------------------------
# Scalars
# --------------------------------------------------------------------------------------------

#: The ID alphabet of the contract (1–128 characters of ``[A-Za-z0-9_.:-]``). Use ``fullmatch``
#: (Python's ``$`` also matches before a trailing newline).
ID_PATTERN = r"^[A-Za-z0-9_.:-]{1,128}$"

#: Longest string fact (§4.2).
MAX_FACT_STR_LEN = 64
#: Longest decision rationale (§6).
MAX_RATIONALE_LEN = 200
#: Largest input record in bytes, and the cut of a dead letter's payload copy (§2, §10).
MAX_RECORD_BYTES = 16 * 1024

Id = Annotated[str, StringConstraints(strict=True, pattern=ID_PATTERN)]
NonNegInt = Annotated[int, Field(strict=True, ge=0)]
TimeMs = Annotated[int, Field(strict=True, ge=0)]
ShortText = Annotated[str, StringConstraints(strict=True, min_length=1, max_length=256)]
FactValue = (
    Annotated[bool, Field(strict=True)]
    | Annotated[int, Field(strict=True)]
    | Annotated[str, StringConstraints(strict=True, max_length=MAX_FACT_STR_LEN)]
)

# --------------------------------------------------------------------------------------------
# Enums (Literal types, and the same values as tuples)
# --------------------------------------------------------------------------------------------

PrivacyClass = Literal["semantic_only"]
DecisionMode = Literal["supervisor", "telemetry"]
SuccessCondition = Literal[
    "admitted_area_patrol_completed",
    "meaningful_security_events_handled",
    "security_session_stopped",
    "device_physically_docked",
]
TaskStatus = Literal[
    "accepted",
    "started",
    "progress",
    "paused",
    "resumed",
    "completed",
    "failed",
    "cancelled",
    "blocked",
    "aborted",
]
EvidenceKind = Literal["physical", "command_ack"]
PhysicalSignal = Literal[
    "security.started",
    "security.paused",
    "security.resumed",
    "security.stopped",
    "movement.arrived",
    "movement.station_charging",
    "security.area_patrolled",
]
DecisionKind = Literal["continue", "ask_user", "replan", "abort", "return_to_station", "complete"]
Backend = Literal["rules", "gemini", "fallback"]
DispatchKind = Literal["device_task_requests", "device_workflow_requests"]
Stage = Literal["goal", "observe", "drop", "decide", "act", "evidence", "end"]
DropReason = Literal[
    "duplicate",
    "stale",
    "clock_skew",
    "debounced",
    "uncorrelated",
    "not_subscribed",
    "budget_exhausted",
    "winding_down",
    "out_of_order",
    "sequence_jump",
    "stale_etag",
    "plan_rejected",
    "condition_not_met",
]
EndStatus = Literal["completed", "aborted", "returned", "superseded", "failed", "blocked"]
DeadLetterReason = Literal[
    "not_json",
    "schema_invalid",
    "too_large",
    "key_invalid",
    "key_mismatch",
    "privacy_violation",
    "fact_invalid",
    "unknown_contract",
    "cross_device",
    "plan_invalid",
    "clock_skew",
    "output_invalid",
    "experience_rate",
]
DomainName = Literal[
    "movement",
    "map",
    "battery",
    "air_quality",
    "vision",
    "security",
    "streaming",
    "voice_llm",
    "network",
    "schedule",
    "vital_sign",
    "resource",
]
FreshnessState = Literal["fresh", "stale", "unknown"]
PlannerExposure = Literal["summary", "internal", "none"]
Sensitivity = Literal["normal", "sensitive"]
OnUnknown = Literal["refresh", "ask_user", "block"]

PRIVACY_CLASSES: tuple[str, ...] = get_args(PrivacyClass)
DECISION_MODES: tuple[str, ...] = get_args(DecisionMode)
SUCCESS_CONDITIONS: tuple[str, ...] = get_args(SuccessCondition)
TASK_STATUSES: tuple[str, ...] = get_args(TaskStatus)
#: Task statuses that must carry a ``reason_code`` (§5).
TASK_STATUSES_WITH_REASON: tuple[str, ...] = ("failed", "blocked", "aborted")
EVIDENCE_KINDS: tuple[str, ...] = get_args(EvidenceKind)
PHYSICAL_SIGNALS: tuple[str, ...] = get_args(PhysicalSignal)
DECISIONS: tuple[str, ...] = get_args(DecisionKind)
BACKENDS: tuple[str, ...] = get_args(Backend)
DISPATCH_KINDS: tuple[str, ...] = get_args(DispatchKind)
STAGES: tuple[str, ...] = get_args(Stage)
DROP_REASONS: tuple[str, ...] = get_args(DropReason)
END_STATUSES: tuple[str, ...] = get_args(EndStatus)
DEADLETTER_REASONS: tuple[str, ...] = get_args(DeadLetterReason)
DOMAINS: tuple[str, ...] = get_args(DomainName)
FRESHNESS_STATES: tuple[str, ...] = get_args(FreshnessState)
ON_UNKNOWN: tuple[str, ...] = get_args(OnUnknown)
#: Forbidden keys anywhere in a record, compared lower-cased (§4.2).
FORBIDDEN_KEYS: frozenset[str] = frozenset(
    {
        "bbox",
        "frame",
        "raw_frame",
        "image",
        "face",
        "face_image",
        "embedding",
        "similarity",
        "pin",
        "credential",
        "password",
        "token",
        "signed_url",
        "url",
        "name",
        "member_id",
        "rssi",
        "message",
        "text",
        "prompt",
        "response",
        "stt_text",
        "tts_text",
    }
)

PLAN_CONTRACT_VERSION = "a2a-experience-policy-v1"


# --------------------------------------------------------------------------------------------
# Base classes
# --------------------------------------------------------------------------------------------


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    #: the contract's optional fields that the JSON leaves out when they are None
    omit_if_none: ClassVar[tuple[str, ...]] = ()

    @model_serializer(mode="wrap")
    def _omit_none(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        for name in self.omit_if_none:
            if data.get(name) is None:
                data.pop(name, None)
        return data

    def to_json_dict(self) -> dict[str, Any]:
        """The record as the JSON object of the contract."""
        return self.model_dump(mode="json")

    def to_json_bytes(self) -> bytes:
        """The record as compact UTF-8 JSON bytes (orjson), ready for Kafka."""
        return orjson.dumps(self.model_dump(mode="json"))


class InputRecord(_Record):
    """A record read from Kafka: unknown fields are rejected."""


class OutputRecord(_Record):
    """A record the pipeline writes."""


# --------------------------------------------------------------------------------------------
# §3 Experience plan
# --------------------------------------------------------------------------------------------


class _Step(_Record):
    """A capability operation of a plan step or of a dispatch request (§3, §7)."""

    step_id: Id
    capability: Id
    operation: Id
    args: dict[str, JsonValue] = Field(default_factory=dict)
    depends_on: tuple[Id, ...] | None = None

    omit_if_none = ("depends_on",)


class PlanStep(_Step, InputRecord):
    """One step of a plan; ``depends_on`` is left out of the JSON when None."""


class Subscription(InputRecord):
    contract_id: Id
    decision_mode: DecisionMode
    step_ids: tuple[Id, ...] = ()


class ObservationPolicy(InputRecord):
    subscriptions: tuple[Subscription, ...] = ()


class DecisionBudget(InputRecord):
    max_decisions: NonNegInt


class InterventionBudget(InputRecord):
    local_retry: NonNegInt
    cloud_replan: NonNegInt
    user_question: NonNegInt


class ExperiencePlan(InputRecord):
    """§3. Every field of the contract's example is required except ``area_names``."""

    contract_version: Literal["a2a-experience-policy-v1"]
    experience_id: Id
    device_id: Id
    workflow_id: Id
    goal_id: Id
    goal_summary: Annotated[str, StringConstraints(strict=True, max_length=500)]
    created_at_ms: TimeMs
    areas: tuple[Id, ...]
    area_names: dict[Id, Annotated[str, StringConstraints(strict=True, max_length=64)]] | None = None
    steps: Annotated[tuple[PlanStep, ...], Field(min_length=1)]
    success_conditions: tuple[SuccessCondition, ...]
    constraints: tuple[Id, ...]
    allowed_action_contracts: tuple[Id, ...]
    observation_policy: ObservationPolicy
    decision_budget: DecisionBudget
    intervention_budget: InterventionBudget
    #: a condition over device context (§9.2), checked by the gate; gates the start (§9.4)
    preconditions: dict[str, JsonValue] | None = None
    on_unknown: OnUnknown | None = None

    omit_if_none = ("area_names", "preconditions", "on_unknown")


# --------------------------------------------------------------------------------------------
# §4 Semantic observation
# --------------------------------------------------------------------------------------------


class Correlation(InputRecord):
    """The three fields are present together or not at all (the object itself is optional)."""

    experience_id: Id
    workflow_id: Id
    step_id: Id


class Observation(InputRecord):
    """§4. ``ttl_ms``, ``confidence`` and ``correlation`` may be absent or null."""

    event_id: Id
    device_id: Id
    type: Id
    source: ShortText
    observed_at_ms: TimeMs
    freshness_ms: NonNegInt
    ttl_ms: NonNegInt | None = None
    confidence: Annotated[float, Field(strict=True, ge=0.0, le=1.0)] | None = None
    privacy_class: PrivacyClass
    requires_cloud_decision: Annotated[bool, Field(strict=True)] = False
    correlation: Correlation | None = None
    facts: dict[str, FactValue]

    omit_if_none = ("ttl_ms", "confidence", "correlation")


# --------------------------------------------------------------------------------------------
# §5 Task event
# --------------------------------------------------------------------------------------------


class Evidence(InputRecord):
    """``physical`` evidence names a signal; ``security.area_patrolled`` also names the area."""

    kind: EvidenceKind
    signal: Id | None = None
    area_id: Id | None = None

    @model_validator(mode="after")
    def _check(self) -> Self:
        if self.kind == "physical" and self.signal is None:
            raise ValueError("physical evidence needs a signal")
        if self.signal == "security.area_patrolled" and self.area_id is None:
            raise ValueError("security.area_patrolled evidence needs an area_id")
        return self

    omit_if_none = ("signal", "area_id")


class TaskEvent(InputRecord):
    """§5. ``experience_id``, ``workflow_id``, ``step_id``, ``dispatch_id``, ``reason_code`` and
    ``evidence`` may be null or absent; ``failed``/``blocked``/``aborted`` need a reason_code."""

    event_id: Id
    device_id: Id
    sequence: NonNegInt
    occurred_at_ms: TimeMs
    task_id: Id
    experience_id: Id | None = None
    workflow_id: Id | None = None
    step_id: Id | None = None
    dispatch_id: Id | None = None
    capability: Id
    operation: Id
    status: TaskStatus
    reason_code: Id | None = None
    evidence: Evidence | None = None

    @model_validator(mode="after")
    def _check(self) -> Self:
        if self.status in TASK_STATUSES_WITH_REASON and self.reason_code is None:
            raise ValueError(f"a {self.status} task event needs a reason_code")
        return self


# --------------------------------------------------------------------------------------------
# §9 Device context v2
# --------------------------------------------------------------------------------------------


class Freshness(InputRecord):
    observed_at_ms: TimeMs | None = None
    received_at_ms: TimeMs | None = None
    age_ms: NonNegInt | None = None
    ttl_ms: NonNegInt | None = None
    state: FreshnessState


class Provenance(InputRecord):
    source_component: ShortText | None = None
    source_symbol: ShortText | None = None
    source_event: ShortText | None = None
    source_kind: ShortText | None = None
    sequence: NonNegInt | None = None


class DomainEnvelope(InputRecord):
    """The one envelope of every device-context domain (§9)."""

    available: Annotated[bool, Field(strict=True)]
    freshness: Freshness
    provenance: Provenance | None = None
    planner_exposure: PlannerExposure
    sensitivity: Sensitivity
    data: dict[str, JsonValue] = Field(default_factory=dict)


class DeviceContext(InputRecord):
    """Device context v2 snapshot, keyed by ``device_id`` (see the module docstring); its
    domains' ``data`` keys are checked against ``topics.context`` by the gate."""

    contract_version: Literal["device_context.v2"] | None = None
    device_id: Id
    observed_at_ms: TimeMs
    event_id: Id | None = None
    domains: dict[DomainName, DomainEnvelope]


# --------------------------------------------------------------------------------------------
# §6 Decision
# --------------------------------------------------------------------------------------------


class Budget(OutputRecord):
    """``budget_after`` of a decision: decisions taken, and the interventions left."""

    decisions: NonNegInt
    local_retry: NonNegInt
    cloud_replan: NonNegInt
    user_question: NonNegInt


class Decision(OutputRecord):
    decision_id: Id
    device_id: Id
    experience_id: Id
    workflow_id: Id
    trigger_event_id: Id
    decision: DecisionKind
    reason_code: Id
    rationale: Annotated[str, StringConstraints(strict=True, max_length=MAX_RATIONALE_LEN)]
    backend: Backend
    state_etag: Id
    decided_at_ms: TimeMs
    budget_after: Budget


# --------------------------------------------------------------------------------------------
# §7 Dispatch
# --------------------------------------------------------------------------------------------


class DispatchRequest(_Step, OutputRecord):
    """One request; ``depends_on`` is left out of the JSON when None."""


class Dispatch(OutputRecord):
    """§7. A local action has ``decision_id`` None (null in JSON)."""

    dispatch_id: Id
    decision_id: Id | None
    trigger_event_id: Id
    device_id: Id
    experience_id: Id
    workflow_id: Id
    created_at_ms: TimeMs
    kind: DispatchKind
    requests: Annotated[tuple[DispatchRequest, ...], Field(min_length=1)]
    tts: Annotated[str, StringConstraints(strict=True, max_length=1000)] | None = None


# --------------------------------------------------------------------------------------------
# §8 Timeline
# --------------------------------------------------------------------------------------------


class TimelineEntry(OutputRecord):
    """§8. ``drop_reason`` is always in the JSON (null unless stage ``drop``); ``status`` only on
    stage ``end``. ``experience_id`` is null for a drop of a device with no experience."""

    device_id: Id
    experience_id: Id | None
    seq: NonNegInt
    at_ms: TimeMs
    stage: Stage
    ref_id: Id
    summary: Annotated[str, StringConstraints(strict=True, max_length=500)]
    drop_reason: DropReason | None = None
    status: EndStatus | None = None

    @model_validator(mode="after")
    def _check(self) -> Self:
        if (self.stage == "drop") != (self.drop_reason is not None):
            raise ValueError("drop_reason is set exactly when stage is 'drop'")
        if (self.stage == "end") != (self.status is not None):
            raise ValueError("status is set exactly when stage is 'end'")
        return self

    omit_if_none = ("status",)


# --------------------------------------------------------------------------------------------
# §10 Dead letter
# --------------------------------------------------------------------------------------------


class DeadLetter(OutputRecord):
    """§10. ``payload`` is None for not_json, too_large, privacy_violation and fact_invalid."""

    reason_code: DeadLetterReason
    source_topic: str
    partition: Annotated[int, Field(strict=True)]
    offset: Annotated[int, Field(strict=True)]
    key: str | None
    event_id: Id | None
    detail: Annotated[str, StringConstraints(strict=True, max_length=500)]
    offending_paths: tuple[str, ...] = ()
    payload_sha256: Annotated[str, StringConstraints(strict=True, pattern=r"^[0-9a-f]{64}$")]
    payload_size: NonNegInt
    payload: str | None
    received_at_ms: Annotated[int, Field(strict=True)]


#: Every record type, by the name used for its JSON Schema file.
RECORD_TYPES: tuple[type[BaseModel], ...] = (
    ExperiencePlan,
    Observation,
    TaskEvent,
    DeviceContext,
    Decision,
    Dispatch,
    TimelineEntry,
    DeadLetter,
)

__all__ = [
    "BACKENDS",
    "DEADLETTER_REASONS",
    "DECISIONS",
    "DECISION_MODES",
    "DISPATCH_KINDS",
    "DOMAINS",
    "DROP_REASONS",
    "END_STATUSES",
    "EVIDENCE_KINDS",
    "FORBIDDEN_KEYS",
    "FRESHNESS_STATES",
    "ID_PATTERN",
    "MAX_FACT_STR_LEN",
    "MAX_RATIONALE_LEN",
    "MAX_RECORD_BYTES",
    "ON_UNKNOWN",
    "PHYSICAL_SIGNALS",
    "PLAN_CONTRACT_VERSION",
    "PRIVACY_CLASSES",
    "RECORD_TYPES",
    "STAGES",
    "SUCCESS_CONDITIONS",
    "TASK_STATUSES",
    "TASK_STATUSES_WITH_REASON",
    "Backend",
    "Budget",
    "Correlation",
    "DeadLetter",
    "DeadLetterReason",
    "Decision",
    "DecisionBudget",
    "DecisionKind",
    "DecisionMode",
    "DeviceContext",
    "Dispatch",
    "DispatchKind",
    "DispatchRequest",
    "DomainEnvelope",
    "DomainName",
    "DropReason",
    "EndStatus",
    "Evidence",
    "EvidenceKind",
    "ExperiencePlan",
    "FactValue",
    "Freshness",
    "Id",
    "InputRecord",
    "InterventionBudget",
    "Observation",
    "ObservationPolicy",
    "OnUnknown",
    "OutputRecord",
    "PhysicalSignal",
    "PlanStep",
    "Provenance",
    "Stage",
    "Subscription",
    "SuccessCondition",
    "TaskEvent",
    "TaskStatus",
    "TimelineEntry",
]
