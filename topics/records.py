"""The record types of docs/CONTRACTS.md (§3–§10): the entry point that gathers the Pydantic v2
models, their scalar types and value sets, and lists every record type in ``RECORD_TYPES``.

Input records (plans, observations, task events, device context) reject unknown fields
(``extra="forbid"``) and use strict scalar types: a number in a string, a float where an integer
belongs, or ``true`` where a number belongs is a schema error, never silently coerced. Output
records (decisions, dispatch, timeline, dead letters) serialise to the exact JSON shapes of the
contract with ``model_dump(mode="json")`` (or :meth:`to_json_dict`), and to bytes with the fast
:meth:`to_json_bytes`.

The models are pure data: registry checks (is this a known contract, is this fact allowed, is
this capability exposed to a planner) live in :mod:`topics.gate`.

Where each part lives: :mod:`topics.record_scalars` (IDs, limits, constrained scalars),
:mod:`topics.record_enums` (``Literal`` types and their value tuples), :mod:`topics.record_base`
(``InputRecord``, ``OutputRecord``), :mod:`topics.input_records` (§3, §4, §5, §9, with the device
context v2 snapshot shape) and :mod:`topics.output_records` (§6, §7, §8, §10).
"""

from __future__ import annotations

from pydantic import BaseModel

from topics.input_records import (
    Correlation,
    DecisionBudget,
    DeviceContext,
    DomainEnvelope,
    Evidence,
    ExperiencePlan,
    Freshness,
    InterventionBudget,
    Observation,
    ObservationPolicy,
    PlanStep,
    Provenance,
    Subscription,
    TaskEvent,
)
from topics.output_records import Budget, DeadLetter, Decision, Dispatch, DispatchRequest, TimelineEntry
from topics.record_base import InputRecord, OutputRecord
from topics.record_enums import (
    BACKENDS,
    DEADLETTER_REASONS,
    DECISION_MODES,
    DECISIONS,
    DISPATCH_KINDS,
    DOMAINS,
    DROP_REASONS,
    END_STATUSES,
    EVIDENCE_KINDS,
    FORBIDDEN_KEYS,
    FRESHNESS_STATES,
    ON_UNKNOWN,
    PHYSICAL_SIGNALS,
    PLAN_CONTRACT_VERSION,
    PRIVACY_CLASSES,
    STAGES,
    SUCCESS_CONDITIONS,
    TASK_STATUSES,
    TASK_STATUSES_WITH_REASON,
    Backend,
    DeadLetterReason,
    DecisionKind,
    DecisionMode,
    DispatchKind,
    DomainName,
    DropReason,
    EndStatus,
    EvidenceKind,
    OnUnknown,
    PhysicalSignal,
    Stage,
    SuccessCondition,
    TaskStatus,
)
from topics.record_enums import FreshnessState as FreshnessState
from topics.record_enums import PlannerExposure as PlannerExposure
from topics.record_enums import Sensitivity as Sensitivity
from topics.record_scalars import (
    ID_PATTERN,
    MAX_FACT_STR_LEN,
    MAX_RATIONALE_LEN,
    MAX_RECORD_BYTES,
    FactValue,
    Id,
)
from topics.record_scalars import NonNegInt as NonNegInt
from topics.record_scalars import ShortText as ShortText
from topics.record_scalars import TimeMs as TimeMs

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
