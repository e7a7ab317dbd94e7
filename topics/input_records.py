"""The input record models, read from Kafka: the experience plan (§3), the semantic observation
(§4), the task event (§5) and the device context v2 snapshot (§9) of docs/CONTRACTS.md.

Device context v2 snapshot (§9 fixes only the per-domain envelope; the snapshot is ours)::

    {"device_id": "airbot-0001",            # = the record key
     "observed_at_ms": 1785326399950,       # when the device took the snapshot
     "event_id": "ctx_0001",                # optional, for tracing and dead letters
     "domains": {"movement": {<envelope>}, "battery": {<envelope>}, ...}}

A snapshot may carry any subset of the twelve domains; a domain that is absent is a *missing*
value (not ``available: false`` and not stale).
"""

from __future__ import annotations

from typing import Annotated, Literal, Self

from pydantic import Field, JsonValue, StringConstraints, model_validator

from topics.record_base import CapabilityStep, InputRecord
from topics.record_enums import (
    TASK_STATUSES_WITH_REASON,
    DecisionMode,
    DomainName,
    EvidenceKind,
    FreshnessState,
    OnUnknown,
    PlannerExposure,
    PrivacyClass,
    Sensitivity,
    SuccessCondition,
    TaskStatus,
)
from topics.record_scalars import FactValue, Id, NonNegInt, ShortText, TimeMs

# --------------------------------------------------------------------------------------------
# §3 Experience plan
# --------------------------------------------------------------------------------------------


class PlanStep(CapabilityStep, InputRecord):
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
