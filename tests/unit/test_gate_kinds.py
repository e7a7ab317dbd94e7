"""The gate on the other record kinds: task events and device context (§2 rule 6), and plans (§3, §11)."""

# ruff: noqa: F811  (pytest fixtures imported from tests.unit.gate_fixtures are test arguments)

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest

from tests.unit.gate_fixtures import (
    admit,
    gate,  # noqa: F401  (the fixture)
    rejected,
)
from tests.unit.seed_records import ENVELOPE, SEED_PLAN, SEED_TASK_EVENT
from topics.gate import Admitted, Gate, Rejected
from topics.records import DeviceContext, ExperiencePlan, TaskEvent

# --------------------------------------------------------------------------------------------
# Task events and device context (§2 rule 6)
# --------------------------------------------------------------------------------------------


def test_task_event_admitted_and_rejected(gate: Gate) -> None:
    result = admit(gate, orjson.dumps(SEED_TASK_EVENT), "task-events")
    assert isinstance(result, Admitted) and result.record == TaskEvent.model_validate(SEED_TASK_EVENT)
    leaky = {
        **SEED_TASK_EVENT,
        "evidence": {"kind": "physical", "signal": "movement.arrived", "Message": "hi"},
    }
    rej = rejected(admit(gate, orjson.dumps(leaky), "task-events"), "privacy_violation")
    assert rej.dead_letter.offending_paths == ("evidence.Message",) and rej.dead_letter.payload is None
    rej = rejected(admit(gate, orjson.dumps({**SEED_TASK_EVENT, "status": "exploded"}), "task-events"),
                   "schema_invalid")  # fmt: skip
    assert rej.dead_letter.offending_paths == ("status",) and rej.dead_letter.payload is not None
    assert rej.event_id == "te_0001"
    rejected(admit(gate, orjson.dumps(SEED_TASK_EVENT), "task-events", key=b"airbot-9"), "key_mismatch")


def test_device_context(gate: Gate) -> None:
    snapshot: dict[str, Any] = {
        "device_id": "airbot-0001",
        "observed_at_ms": 1785326399990,
        "domains": {"movement": ENVELOPE},
    }
    result = admit(gate, orjson.dumps(snapshot), "device-context")
    assert isinstance(result, Admitted) and result.record == DeviceContext.model_validate(snapshot)
    leaky = copy.deepcopy(snapshot)
    leaky["domains"]["vision"] = {**ENVELOPE, "data": {"last": {"raw_frame": "AAAA"}}}
    rej = rejected(admit(gate, orjson.dumps(leaky), "device-context"), "privacy_violation")
    assert rej.dead_letter.offending_paths == ("domains.vision.data.last.raw_frame",)
    rejected(admit(gate, orjson.dumps(snapshot), "device-context", key=b"x"), "key_mismatch")


# --------------------------------------------------------------------------------------------
# Plans (§3, §11)
# --------------------------------------------------------------------------------------------


def plan(**changes: Any) -> dict[str, Any]:
    data = copy.deepcopy(SEED_PLAN)
    data.update(changes)
    return data


def test_seed_plan_is_admitted(gate: Gate) -> None:
    result = admit(gate, orjson.dumps(SEED_PLAN), "plans")
    assert isinstance(result, Admitted)
    assert result.record == ExperiencePlan.model_validate(SEED_PLAN)


def _plan_invalid(gate: Gate, data: dict[str, Any]) -> Rejected:
    raw = orjson.dumps(data)
    rej = rejected(admit(gate, raw, "plans"), "plan_invalid")
    assert rej.dead_letter.payload == raw.decode()
    assert rej.event_id == "exp_guardian_001"
    return rej


def test_plan_with_live_view_is_rejected(gate: Gate) -> None:
    data = plan()
    data["steps"].append({"step_id": "watch", "capability": "live_view", "operation": "start", "args": {}})
    rej = _plan_invalid(gate, data)
    assert "steps.5.capability" in rej.dead_letter.offending_paths
    assert "NO_GO" in rej.dead_letter.detail
    rej = _plan_invalid(gate, plan(allowed_action_contracts=["live_view.start"]))
    assert rej.dead_letter.offending_paths == ("allowed_action_contracts.0",)


def test_plan_missing_required_args(gate: Gate) -> None:
    data = plan()
    data["steps"][1]["args"] = {}
    rej = _plan_invalid(gate, data)
    assert rej.dead_letter.offending_paths == ("steps.1.args.area_ids",)


def test_plan_holding_the_camera_twice(gate: Gate) -> None:
    data = plan()
    data["steps"].append(
        {"step_id": "vitals", "capability": "vital_sign_session", "operation": "start", "args": {}}
    )
    rej = _plan_invalid(gate, data)
    assert "resource_conflict" in rej.dead_letter.detail


@pytest.mark.parametrize(
    ("edit", "path"),
    [
        (lambda d: d["steps"][2].update(depends_on=["nowhere"]), "steps.2.depends_on.0"),
        (lambda d: d["steps"][3].update(step_id="patrol_areas"), "steps.3.step_id"),
        (lambda d: d["steps"][0].update(capability="teleport"), "steps.0.capability"),
        (lambda d: d["steps"][0].update(operation="dance"), "steps.0.operation"),
        (lambda d: d["steps"][1]["args"].update(area_ids=["9"]), "steps.1.args.area_ids"),
        (lambda d: d.update(allowed_action_contracts=["movement.fly"]), "allowed_action_contracts.0"),
        (
            lambda d: d["observation_policy"]["subscriptions"][0].update(contract_id="security.teleported"),
            "observation_policy.subscriptions.0.contract_id",
        ),
        (lambda d: d["steps"][0].update(depends_on=["return_home"]), "steps"),
    ],
)
def test_plan_invalid_cases(gate: Gate, edit: Any, path: str) -> None:
    data = plan()
    edit(data)
    rej = _plan_invalid(gate, data)
    assert path in rej.dead_letter.offending_paths


def test_plan_schema_and_key(gate: Gate) -> None:
    raw = orjson.dumps(plan(contract_version="v0"))
    rej = rejected(admit(gate, raw, "plans"), "schema_invalid")
    assert rej.dead_letter.offending_paths == ("contract_version",)
    rejected(admit(gate, orjson.dumps(SEED_PLAN), "plans", key=b"airbot-0002"), "key_mismatch")
    leaky = plan()
    leaky["steps"][0]["args"] = {"prompt": "say something"}
    rej = rejected(admit(gate, orjson.dumps(leaky), "plans"), "privacy_violation")
    assert rej.dead_letter.offending_paths == ("steps.0.args.prompt",) and rej.dead_letter.payload is None
