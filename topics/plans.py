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


#: Adaptive air care's preconditions (docs/SCENARIOS.md HG-13): the air is poor and the battery's work
#: budget is not low.
AIR_CARE_PRECONDITIONS: dict[str, Any] = {
    "all": [
        {"path": "air_quality.grade", "op": "in", "value": ["bad", "very_bad"]},
        {"path": "battery.estimated_work_budget", "op": "not_equals", "value": "low"},
    ]
}


def air_care_plan(
    device_id: str,
    *,
    experience_id: str | None = None,
    workflow_id: str | None = None,
    area: str = "2",
    area_name: str | None = None,
    created_at_ms: int = 1785400000000,
    on_unknown: str | None = None,
) -> dict[str, Any]:
    """Adaptive air care (HG-13..HG-16): move to ``area``, clean its air, return to the station;
    gated on :data:`AIR_CARE_PRECONDITIONS` (``on_unknown``: what an unknown state does)."""
    plan: dict[str, Any] = {
        "contract_version": "a2a-experience-policy-v1",
        "experience_id": experience_id or f"exp_air_{device_id}_{created_at_ms}",
        "device_id": device_id,
        "workflow_id": workflow_id or f"wf_air_{device_id}_{created_at_ms}",
        "goal_id": "adaptive_air_care",
        "goal_summary": "Clean the air of the living room when it is poor, then return to the station.",
        "created_at_ms": created_at_ms,
        "areas": [area],
        "area_names": {area: area_name or DEFAULT_AREA_NAMES.get(area, "거실")},
        "steps": [
            {"step_id": "move_living", "capability": "movement", "operation": "move_to_room",
             "args": {"area_id": area}},
            {"step_id": "clean_living", "capability": "air_cleaning", "operation": "start_room_cleaning",
             "args": {"area_id": area}, "depends_on": ["move_living"]},
            {"step_id": "return_home", "capability": "movement", "operation": "return_to_station",
             "args": {}, "depends_on": ["clean_living"]},
        ],
        "success_conditions": ["device_physically_docked"],
        "constraints": ["device_policy_is_authoritative", "user_cancel_always_wins"],
        "allowed_action_contracts": [
            "movement.move_to_room", "air_cleaning.start_room_cleaning", "air_cleaning.stop",
            "movement.return_to_station", "voice_content.speak",
        ],
        "observation_policy": {"subscriptions": []},
        "decision_budget": {"max_decisions": 3},
        "intervention_budget": {"local_retry": 1, "cloud_replan": 1, "user_question": 1},
        "preconditions": AIR_CARE_PRECONDITIONS,
    }  # fmt: skip
    if on_unknown is not None:
        plan["on_unknown"] = on_unknown
    return plan
