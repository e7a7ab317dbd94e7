"""The Adaptive Home Guardian plan (docs/CONTRACTS.md §3) for one device, as ``guardian start`` sends it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

#: Room names the household uses for the default areas (spoken and displayed text uses these).
DEFAULT_AREA_NAMES = {"2": "거실", "3": "안방", "6": "주방", "4": "작은방", "5": "서재", "7": "현관"}

SUBSCRIBED_CONTRACTS = (
    "security.person_detected",
    "security.verification_result",
    "security.verification_timed_out",
    "vision.low_light_changed",
    "security.condition_changed",
    "security.session_state_changed",
)


def guardian_plan(
    device_id: str,
    *,
    experience_id: str | None = None,
    workflow_id: str | None = None,
    areas: Sequence[str] = ("2", "3", "6"),
    area_names: dict[str, str] | None = None,
    created_at_ms: int = 1785400000000,
    max_decisions: int = 3,
    local_retry: int = 1,
    cloud_replan: int = 2,
    user_question: int = 1,
) -> dict[str, Any]:
    """The §3 example plan, for ``device_id`` and ``areas``."""
    names = area_names if area_names is not None else DEFAULT_AREA_NAMES
    exp_id = experience_id or f"exp_{device_id}_{created_at_ms}"
    wf_id = workflow_id or f"wf_{device_id}_{created_at_ms}"
    return {
        "contract_version": "a2a-experience-policy-v1",
        "experience_id": exp_id,
        "device_id": device_id,
        "workflow_id": wf_id,
        "goal_id": "adaptive_home_guardian",
        "goal_summary": "Check the home safely while the user is away, then return to the station.",
        "created_at_ms": created_at_ms,
        "areas": list(areas),
        "area_names": {a: names[a] for a in areas if a in names},
        "steps": [
            {
                "step_id": "check_availability",
                "capability": "security_patrol",
                "operation": "check",
                "args": {},
            },
            {
                "step_id": "start_security",
                "capability": "security_patrol",
                "operation": "start",
                "args": {"area_ids": list(areas)},
                "depends_on": ["check_availability"],
            },
            {
                "step_id": "patrol_areas",
                "capability": "security_patrol",
                "operation": "patrol",
                "args": {},
                "depends_on": ["start_security"],
            },
            {
                "step_id": "stop_security",
                "capability": "security_patrol",
                "operation": "stop",
                "args": {},
                "depends_on": ["patrol_areas"],
            },
            {
                "step_id": "return_home",
                "capability": "movement",
                "operation": "return_to_station",
                "args": {},
                "depends_on": ["stop_security"],
            },
        ],
        "success_conditions": [
            "admitted_area_patrol_completed",
            "meaningful_security_events_handled",
            "security_session_stopped",
            "device_physically_docked",
        ],
        "constraints": [
            "device_policy_is_authoritative",
            "raw_vision_frame_never_enters_general_llm_context",
            "user_cancel_always_wins",
            "bounded_replan_only",
        ],
        "allowed_action_contracts": [
            "security_patrol.pause",
            "security_patrol.resume",
            "security_patrol.stop",
            "movement.move_to_room",
            "movement.return_to_station",
            "voice_content.speak",
        ],
        "observation_policy": {
            "subscriptions": [
                {"contract_id": c, "decision_mode": "supervisor", "step_ids": ["patrol_areas"]}
                for c in SUBSCRIBED_CONTRACTS
            ]
        },
        "decision_budget": {"max_decisions": max_decisions},
        "intervention_budget": {
            "local_retry": local_retry,
            "cloud_replan": cloud_replan,
            "user_question": user_question,
        },
    }
