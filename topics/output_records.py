"""The output record models the pipeline writes: the decision (§6), the dispatch (§7), the
timeline entry (§8) and the dead letter (§10) of docs/CONTRACTS.md."""

from __future__ import annotations

from typing import Annotated, Self

from pydantic import Field, StringConstraints, model_validator

from topics.record_base import CapabilityStep, OutputRecord
from topics.record_enums import (
    Backend,
    DeadLetterReason,
    DecisionKind,
    DispatchKind,
    DropReason,
    EndStatus,
    Stage,
)
from topics.record_scalars import MAX_RATIONALE_LEN, Id, NonNegInt, TimeMs

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


class DispatchRequest(CapabilityStep, OutputRecord):
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
