"""The record models against the examples of docs/CONTRACTS.md."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import orjson
import pytest
from pydantic import ValidationError

from tests.unit.seed_records import (
    ENVELOPE,
    SEED_DEAD_LETTER,
    SEED_DECISION,
    SEED_DISPATCH,
    SEED_OBSERVATION,
    SEED_PLAN,
    SEED_TASK_EVENT,
    SEED_TIMELINE,
)
from topics import records as r
from topics.schema import export_schemas


def test_seed_observation_validates_and_round_trips() -> None:
    obs = r.Observation.model_validate(SEED_OBSERVATION)
    assert obs.correlation is not None and obs.correlation.step_id == "patrol_areas"
    assert obs.facts["presence"] == "detected"
    assert obs.model_dump(mode="json") == SEED_OBSERVATION
    assert orjson.loads(obs.to_json_bytes()) == SEED_OBSERVATION


def test_optional_observation_fields_default_and_are_left_out() -> None:
    minimal = {k: v for k, v in SEED_OBSERVATION.items() if k not in ("ttl_ms", "confidence", "correlation")}
    minimal.pop("requires_cloud_decision")
    obs = r.Observation.model_validate(minimal)
    assert obs.ttl_ms is None and obs.confidence is None and obs.correlation is None
    assert obs.requires_cloud_decision is False
    dumped = obs.model_dump(mode="json")
    assert "ttl_ms" not in dumped and "correlation" not in dumped
    assert dumped["requires_cloud_decision"] is False


def test_seed_plan_validates_and_round_trips() -> None:
    plan = r.ExperiencePlan.model_validate(SEED_PLAN)
    assert [s.step_id for s in plan.steps][-1] == "return_home"
    assert plan.steps[1].args == {"area_ids": ["2", "3", "6"]}
    assert plan.decision_budget.max_decisions == 3
    assert plan.model_dump(mode="json") == SEED_PLAN


def test_task_event_and_device_context_validate() -> None:
    te = r.TaskEvent.model_validate(SEED_TASK_EVENT)
    assert te.evidence is not None and te.evidence.signal == "movement.station_charging"
    ctx = r.DeviceContext.model_validate(
        {"device_id": "airbot-0001", "observed_at_ms": 1785326399990, "domains": {"movement": ENVELOPE}}
    )
    assert ctx.domains["movement"].freshness.state == "fresh"
    with pytest.raises(ValidationError):
        r.DeviceContext.model_validate(
            {"device_id": "airbot-0001", "observed_at_ms": 1, "domains": {"teleport": ENVELOPE}}
        )


@pytest.mark.parametrize(
    ("status", "reason"),
    [("failed", None), ("blocked", None), ("aborted", None)],
)
def test_failing_task_statuses_need_a_reason_code(status: str, reason: str | None) -> None:
    with pytest.raises(ValidationError, match="reason_code"):
        r.TaskEvent.model_validate({**SEED_TASK_EVENT, "status": status, "reason_code": reason})
    ok = r.TaskEvent.model_validate({**SEED_TASK_EVENT, "status": status, "reason_code": "timeout"})
    assert ok.reason_code == "timeout"


def test_area_patrolled_evidence_needs_an_area() -> None:
    ev = {"kind": "physical", "signal": "security.area_patrolled"}
    with pytest.raises(ValidationError):
        r.TaskEvent.model_validate({**SEED_TASK_EVENT, "evidence": ev})
    te = r.TaskEvent.model_validate({**SEED_TASK_EVENT, "evidence": {**ev, "area_id": "2"}})
    assert te.evidence is not None and te.evidence.area_id == "2"


@pytest.mark.parametrize(
    ("model", "example"),
    [
        (r.Decision, SEED_DECISION),
        (r.Dispatch, SEED_DISPATCH),
        (r.TimelineEntry, SEED_TIMELINE),
        (r.DeadLetter, SEED_DEAD_LETTER),
    ],
)
def test_output_records_serialise_to_the_spec_shapes(
    model: type[r.OutputRecord], example: dict[str, Any]
) -> None:
    record = model.model_validate(example)
    assert record.model_dump(mode="json") == example
    assert list(record.model_dump(mode="json")) == list(example)
    assert orjson.loads(record.to_json_bytes()) == example
    assert record.to_json_dict() == example


def test_dispatch_request_depends_on_only_when_set() -> None:
    d = r.Dispatch.model_validate(SEED_DISPATCH)
    dumped = d.model_dump(mode="json")["requests"]
    assert "depends_on" not in dumped[0]
    assert dumped[1]["depends_on"] == ["sup_stop_security"]
    local = r.Dispatch.model_validate({**SEED_DISPATCH, "decision_id": None})
    assert local.model_dump(mode="json")["decision_id"] is None


def test_timeline_status_only_on_end_and_drop_reason_only_on_drop() -> None:
    base = {**SEED_TIMELINE, "ref_id": "exp_guardian_001"}
    end = r.TimelineEntry.model_validate({**base, "stage": "end", "status": "completed"})
    assert end.model_dump(mode="json")["status"] == "completed"
    act = r.TimelineEntry.model_validate(base)
    assert "status" not in act.model_dump(mode="json")
    assert act.model_dump(mode="json")["drop_reason"] is None
    drop = r.TimelineEntry.model_validate({**base, "stage": "drop", "drop_reason": "stale"})
    assert orjson.loads(drop.to_json_bytes())["drop_reason"] == "stale"
    with pytest.raises(ValidationError):
        r.TimelineEntry.model_validate({**base, "stage": "end"})
    with pytest.raises(ValidationError):
        r.TimelineEntry.model_validate({**base, "stage": "drop"})
    with pytest.raises(ValidationError):
        r.TimelineEntry.model_validate({**base, "status": "completed"})


@pytest.mark.parametrize(
    "change",
    [
        {"unexpected": 1},
        {"event_id": "has space"},
        {"event_id": "x" * 129},
        {"event_id": "abc\n"},
        {"event_id": ""},
        {"observed_at_ms": "1785400000000"},
        {"observed_at_ms": 1.5},
        {"freshness_ms": True},
        {"confidence": 1.01},
        {"confidence": -0.1},
        {"confidence": "0.5"},
        {"privacy_class": "raw"},
        {"correlation": {"experience_id": "exp_guardian_001", "workflow_id": "wf_guardian_001"}},
        {"correlation": {**SEED_OBSERVATION["correlation"], "extra": "x"}},
        {"facts": {"area_id": "x" * 65}},
        {"facts": {"area_id": 1.5}},
        {"requires_cloud_decision": 1},
    ],
)
def test_observation_rejects_bad_fields(change: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        r.Observation.model_validate({**SEED_OBSERVATION, **change})


def test_confidence_bounds_and_ids_at_the_limit_are_accepted() -> None:
    for conf in (0, 1, 0.0, 1.0):
        assert r.Observation.model_validate({**SEED_OBSERVATION, "confidence": conf}).confidence == conf
    long_id = "A-z_0.9:" * 16
    assert len(long_id) == 128
    assert r.Observation.model_validate({**SEED_OBSERVATION, "event_id": long_id}).event_id == long_id


def test_models_are_frozen() -> None:
    obs = r.Observation.model_validate(SEED_OBSERVATION)
    with pytest.raises(ValidationError):
        obs.event_id = "other"


def test_plan_rejects_unknown_fields_and_empty_steps() -> None:
    with pytest.raises(ValidationError):
        r.ExperiencePlan.model_validate({**SEED_PLAN, "extra": True})
    with pytest.raises(ValidationError):
        r.ExperiencePlan.model_validate({**SEED_PLAN, "steps": []})
    bad_step = copy.deepcopy(SEED_PLAN)
    bad_step["steps"][0]["extra"] = 1
    with pytest.raises(ValidationError):
        r.ExperiencePlan.model_validate(bad_step)


def test_enum_constants_match_the_contract() -> None:
    assert r.DECISIONS == ("continue", "ask_user", "replan", "abort", "return_to_station", "complete")
    assert set(r.DEADLETTER_REASONS) == {
        "not_json", "schema_invalid", "too_large", "key_invalid", "key_mismatch", "privacy_violation",
        "fact_invalid", "unknown_contract", "cross_device", "plan_invalid", "clock_skew", "output_invalid",
        "experience_rate",
    }  # fmt: skip
    assert len(r.DROP_REASONS) == 13
    assert {"plan_rejected", "condition_not_met", "sequence_jump"} <= set(r.DROP_REASONS)
    assert len(r.TASK_STATUSES) == 10 and "aborted" in r.TASK_STATUSES
    assert "security.area_patrolled" in r.PHYSICAL_SIGNALS and len(r.PHYSICAL_SIGNALS) == 7
    assert r.END_STATUSES == ("completed", "aborted", "returned", "superseded", "failed", "blocked")
    assert r.STAGES == ("goal", "observe", "drop", "decide", "act", "evidence", "end")
    assert len(r.FORBIDDEN_KEYS) == 23 and "signed_url" in r.FORBIDDEN_KEYS
    assert len(r.DOMAINS) == 12


def test_schema_export_writes_one_schema_per_record(tmp_path: Path) -> None:
    paths = export_schemas(tmp_path / "schemas")
    names = sorted(p.name for p in paths)
    assert len(names) == 8 and "observation.schema.json" in names and "dead-letter.schema.json" in names
    observation = orjson.loads((tmp_path / "schemas" / "observation.schema.json").read_bytes())
    assert observation["additionalProperties"] is False
    assert set(observation["required"]) == {
        "event_id", "device_id", "type", "source", "observed_at_ms", "freshness_ms", "privacy_class", "facts",
    }  # fmt: skip
