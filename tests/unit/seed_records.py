"""The examples of docs/CONTRACTS.md: the SEED_* input and output records and a context ENVELOPE."""

from __future__ import annotations

from typing import Any

from topics.plans import guardian_plan

SEED_OBSERVATION: dict[str, Any] = {
    "event_id": "obs_guardian_0007",
    "device_id": "airbot-0001",
    "type": "security.person_detected",
    "source": "DeviceAgent.WssVisionObserver",
    "observed_at_ms": 1785400000000,
    "freshness_ms": 320,
    "ttl_ms": 2000,
    "confidence": 0.93,
    "privacy_class": "semantic_only",
    "requires_cloud_decision": False,
    "correlation": {
        "experience_id": "exp_guardian_001",
        "workflow_id": "wf_guardian_001",
        "step_id": "patrol_areas",
    },
    "facts": {"area_id": "2", "presence": "detected", "verification_state": "pending"},
}

#: the §3 example (the template ``guardian start`` sends is that very plan)
SEED_PLAN: dict[str, Any] = guardian_plan(
    "airbot-0001", experience_id="exp_guardian_001", workflow_id="wf_guardian_001"
)

SEED_TASK_EVENT: dict[str, Any] = {
    "event_id": "te_0001",
    "device_id": "airbot-0001",
    "sequence": 41,
    "occurred_at_ms": 1785400001000,
    "task_id": "task_77",
    "experience_id": "exp_guardian_001",
    "workflow_id": "wf_guardian_001",
    "step_id": "return_home",
    "dispatch_id": "dsp_9f2c...",
    "capability": "movement",
    "operation": "return_to_station",
    "status": "completed",
    "reason_code": None,
    "evidence": {"kind": "physical", "signal": "movement.station_charging"},
}

SEED_DECISION: dict[str, Any] = {
    "decision_id": "dec_3b1f...",
    "device_id": "airbot-0001",
    "experience_id": "exp_guardian_001",
    "workflow_id": "wf_guardian_001",
    "trigger_event_id": "obs_guardian_0007",
    "decision": "ask_user",
    "reason_code": "verification_failed",
    "rationale": "Unverified person in area 2; one user question left.",
    "backend": "rules",
    "state_etag": "e17",
    "decided_at_ms": 1785400000420,
    "budget_after": {"decisions": 1, "local_retry": 1, "cloud_replan": 2, "user_question": 0},
}

SEED_DISPATCH: dict[str, Any] = {
    "dispatch_id": "dsp_9f2c...",
    "decision_id": "dec_3b1f...",
    "trigger_event_id": "obs_guardian_0007",
    "device_id": "airbot-0001",
    "experience_id": "exp_guardian_001",
    "workflow_id": "wf_guardian_001",
    "created_at_ms": 1785400000425,
    "kind": "device_task_requests",
    "requests": [
        {"step_id": "sup_stop_security", "capability": "security_patrol", "operation": "stop", "args": {}},
        {
            "step_id": "sup_return_home",
            "capability": "movement",
            "operation": "return_to_station",
            "args": {},
            "depends_on": ["sup_stop_security"],
        },
    ],
    "tts": None,
}

SEED_TIMELINE: dict[str, Any] = {
    "device_id": "airbot-0001",
    "experience_id": "exp_guardian_001",
    "seq": 12,
    "at_ms": 1785400000425,
    "stage": "act",
    "ref_id": "dsp_9f2c...",
    "summary": "dispatch: security_patrol.stop, movement.return_to_station",
    "drop_reason": None,
}

SEED_DEAD_LETTER: dict[str, Any] = {
    "reason_code": "privacy_violation",
    "source_topic": "guardian.observations",
    "partition": 3,
    "offset": 1200,
    "key": "airbot-0001",
    "event_id": "obs_x",
    "detail": "forbidden key at facts.bbox",
    "offending_paths": ["facts.bbox"],
    "payload_sha256": "ab" * 32,
    "payload_size": 812,
    "payload": None,
    "received_at_ms": 1785400000000,
}

ENVELOPE: dict[str, Any] = {
    "available": True,
    "freshness": {
        "observed_at_ms": 1785326399950,
        "received_at_ms": 1785326399980,
        "age_ms": 50,
        "ttl_ms": 2000,
        "state": "fresh",
    },
    "provenance": {
        "source_component": "DeviceAgent",
        "source_symbol": "MovingController.getCurrentPosition",
        "source_event": "movement_state_snapshot",
        "source_kind": "domain_state",
        "sequence": 41,
    },
    "planner_exposure": "summary",
    "sensitivity": "sensitive",
    "data": {},
}
