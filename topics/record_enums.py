"""The closed value sets of docs/CONTRACTS.md: each enumerated field's ``Literal`` type and the
same values as a tuple, the forbidden keys (§4.2) and the plan contract version (§3)."""

from __future__ import annotations

from typing import Literal, get_args

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
