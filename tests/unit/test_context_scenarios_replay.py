"""docs/SCENARIOS.md HG-04-B and HG-13..HG-16 (device context v2) through ``guardian replay``'s logic."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from config.settings import Settings
from guardian.replay import ReplayResult, replay_records
from pipeline import ids
from tests.scenario_scripts import CANARY, air_care_plan, build, hg04b
from tests.streams import Script
from topics.records import Dispatch, TimelineEntry

SETTINGS = Settings.from_env({})


def run(scenario: str, settings: Settings = SETTINGS) -> ReplayResult:
    return replay_records(build(scenario).records, settings=settings)


def status(result: ReplayResult) -> str:
    (only,) = result.summary["experiences"].values()
    return str(only)


def entries(result: ReplayResult, stage: str) -> list[dict[str, Any]]:
    return [e for e in result.outs["timeline"] if e["stage"] == stage]


def names(dispatch: dict[str, Any]) -> list[str]:
    return [f"{r['capability']}.{r['operation']}" for r in dispatch["requests"]]


def test_every_output_matches_the_wire_contract() -> None:
    for scenario in ("HG-04-B", "HG-13a", "HG-13b", "HG-14f", "HG-14g", "HG-15", "HG-16"):
        result = run(scenario)
        for d in result.outs["dispatch"]:
            Dispatch.model_validate(d)
        for e in result.outs["timeline"]:
            TimelineEntry.model_validate(e)


# -- HG-04 / HG-04-B: requires on a replan's moves ----------------------------------------------


def test_hg04_fresh_battery_and_map_let_the_replan_move() -> None:
    result = run("HG-04")
    (dispatch,) = result.outs["dispatch"]
    assert names(dispatch) == ["movement.move_to_room", "movement.move_to_room"]
    assert not [e for e in result.outs["timeline"] if e["drop_reason"] == "condition_not_met"]


@pytest.mark.parametrize(
    ("variant", "why"),
    [
        ("none", "condition UNKNOWN: battery (no envelope); map (no envelope)"),
        ("stale", "condition STALE: battery (age"),
        ("low", "condition KNOWN false: battery.estimated_work_budget is low"),
    ],
)
def test_hg04b_replan_moves_are_left_out_and_the_patrol_goes_on(variant: str, why: str) -> None:
    result = replay_records(hg04b(variant)(Script()).records, settings=SETTINGS)
    assert [d["decision"] for d in result.outs["decisions"]] == ["replan"]
    assert result.outs["dispatch"] == []  # no move dispatched
    left_out = [e for e in result.outs["timeline"] if e["drop_reason"] == "condition_not_met"]
    assert len(left_out) == 2  # the move to 3, and the move to 6 that depends on it
    assert "movement.move_to_room (sup_replan_move_3) left out" in left_out[0]["summary"]
    assert why in left_out[0]["summary"]
    assert "depends on sup_replan_move_3" in left_out[1]["summary"]
    assert status(result) == "completed"  # the patrol went on as planned


def test_safety_actions_go_without_any_device_context() -> None:
    s = Script()
    s.start().wait(500).security_started().wait(800).patrol("2")
    s.wait(500).obs("security.condition_changed", {"battery": "low"})
    result = replay_records(s.records, settings=SETTINGS)
    (dispatch,) = result.outs["dispatch"]
    assert names(dispatch) == ["security_patrol.stop", "movement.return_to_station"]


# -- HG-13: preconditions decide at the plan's receive time --------------------------------------


@pytest.mark.parametrize(
    ("device", "want", "why"),
    [
        ("a", "active", None),
        ("b", "blocked", "KNOWN false: battery.estimated_work_budget is low"),
        ("c", "blocked", "UNKNOWN: battery (no envelope)"),
        ("d", "blocked", "UNKNOWN: battery (unavailable)"),
        ("e", "blocked", "KNOWN false: air_quality.grade is good"),
    ],
)
def test_hg13_air_care_preconditions(device: str, want: str, why: str | None) -> None:
    result = run(f"HG-13{device}")
    assert status(result) == want
    if want == "active":
        (goal,) = entries(result, "goal")
        assert "condition KNOWN true" in goal["summary"]
        assert not entries(result, "end")
    else:
        assert not entries(result, "goal")
        (end,) = entries(result, "end")
        assert end["status"] == "blocked" and why in end["summary"]
    assert result.outs["dispatch"] == [] and result.outs["decisions"] == []


# -- HG-14: stale context, refresh, 10 s deadline ----------------------------------------------


def test_hg14_refresh_dispatch_is_a_pure_function_of_device_and_experience() -> None:
    for device in "fgh":
        script = build(f"HG-14{device}")
        result = replay_records(script.records, settings=SETTINGS)
        (refresh,) = result.outs["dispatch"]
        assert names(refresh) == ["device_context.refresh"] and refresh["decision_id"] is None
        assert refresh["dispatch_id"] == ids.context_refresh_dispatch_id(
            script.device_id, script.experience_id
        )
        other = build(f"HG-14{device}", device_id="airbot-0002")
        again = replay_records(other.records, settings=SETTINGS)
        assert again.outs["dispatch"][0]["dispatch_id"] != refresh["dispatch_id"]
        assert (
            "condition STALE: air_quality (age 360200 ms > ttl 300000 ms)"
            in entries(result, "act")[0]["summary"]
        )


def test_hg14f_starts_after_the_fresh_snapshot() -> None:
    script = build("HG-14f")
    result = replay_records(script.records, settings=SETTINGS)
    (goal,) = entries(result, "goal")
    plan_at = script.plan["created_at_ms"]
    assert goal["at_ms"] == plan_at + 2000
    assert status(result) == "active"


def test_hg14g_blocks_ten_seconds_after_the_plan() -> None:
    script = build("HG-14g")
    result = replay_records(script.records, settings=SETTINGS)
    (end,) = entries(result, "end")
    assert end["status"] == "blocked" and end["at_ms"] == script.plan["created_at_ms"] + 10_000
    assert "condition STALE: air_quality" in end["summary"]
    # a later record of the device decides the deadline the same way as the end of input
    script.wait(15_000).context({"vision": {"data": {"low_light": False}}})
    later = replay_records(script.records, settings=SETTINGS)
    assert later.outs == result.outs


def test_hg14g_summary_shows_active_while_waiting() -> None:
    from guardian.replay import OUT_KINDS, SummaryCounts

    script = build("HG-14g")
    result = replay_records(script.records, settings=SETTINGS)
    # the outputs up to the deadline: only the refresh dispatch's entry, and the plan waits
    waiting = [e for e in result.outs["timeline"] if e["stage"] != "end"]
    assert [e["stage"] for e in waiting] == ["act"]
    outs = {**result.outs, "timeline": waiting}
    counts = SummaryCounts()
    for kind in OUT_KINDS:
        for value in outs.get(kind, []):
            counts.add(kind, value)
    assert counts.summary("rules")["experiences"] == {script.experience_id: "active"}
    assert result.summary["experiences"] == {script.experience_id: "blocked"}


def test_envelope_fields_are_checked() -> None:
    s = Script()
    s.context({"battery": {"data": {"charging": True}, "planner_exposure": "everyone"}})
    s.context({"battery": {"data": {"charging": True}, "sensitivity": "secret"}})
    s.context({"weather": {"data": {"rain": True}}})
    result = replay_records(s.records, settings=SETTINGS)
    assert [d["reason_code"] for d in result.outs["deadletter"]] == ["schema_invalid"] * 3


def test_hg14h_fresh_snapshot_known_false_blocks_at_once() -> None:
    script = build("HG-14h")
    result = replay_records(script.records, settings=SETTINGS)
    (end,) = entries(result, "end")
    assert end["at_ms"] == script.plan["created_at_ms"] + 2000
    assert "KNOWN false: air_quality.grade is good" in end["summary"]


def test_a_cancel_while_waiting_aborts_with_nothing_to_compensate() -> None:
    s = build("HG-14g")
    s.wait(1000).obs("user.cancel_requested", {"channel": "app"}, scoped=False)
    result = replay_records(s.records, settings=SETTINGS)
    (end,) = entries(result, "end")
    assert end["status"] == "aborted"
    assert names(result.outs["dispatch"][-1]) == ["device_context.refresh"]  # no compensation
    assert result.outs["decisions"] == []


def test_a_new_plan_supersedes_a_waiting_one() -> None:
    s = build("HG-14g")
    s.wait(1000).start()
    result = replay_records(s.records, settings=SETTINGS)
    statuses = result.summary["experiences"]
    assert sorted(statuses.values()) == ["active", "superseded"]


def test_a_snapshot_never_promotes_or_decides() -> None:
    s = Script()
    s.start().wait(500).security_started()
    s.wait(300).context({"vision": {"data": {"person_present": True, "low_light": True}}})
    result = replay_records(s.records, settings=SETTINGS)
    assert result.outs["decisions"] == [] and not entries(result, "observe")


# -- HG-15: privacy of the context ------------------------------------------------------------


def test_hg15_forbidden_key_in_context_is_a_privacy_violation_and_changes_nothing() -> None:
    result = run("HG-15")
    (letter,) = result.outs["deadletter"]
    assert letter["reason_code"] == "privacy_violation" and letter["payload"] is None
    assert letter["offending_paths"] == ["domains.battery.data.face_image"]
    assert CANARY.encode() not in orjson.dumps(result.outs["timeline"] + result.outs["dispatch"])
    assert status(result) == "completed"


def test_unlisted_context_key_or_bad_value_is_fact_invalid() -> None:
    s = Script()
    s.context({"battery": {"data": {"estimated_work_budget": "plenty"}}})
    s.context({"air_quality": {"data": {"smell": "bad"}}})
    s.context({"map": {"data": {"areas": [{"area_id": "2", "area_name": "x\u202ey"}]}}})
    result = replay_records(s.records, settings=SETTINGS)
    assert [d["reason_code"] for d in result.outs["deadletter"]] == ["fact_invalid"] * 3
    assert result.outs["deadletter"][0]["offending_paths"] == ["domains.battery.data.estimated_work_budget"]
    assert result.outs["deadletter"][1]["offending_paths"] == ["domains.air_quality.data.smell"]


def test_older_envelope_changes_nothing() -> None:
    s = Script()
    s.context(
        {
            "battery": {"data": {"estimated_work_budget": "high"}, "sequence": 5},
            "air_quality": {"data": {"grade": "bad"}},
        }
    )
    # same observed_at and a lower sequence: older; then an older observed_at: older
    s.wait(10).context(
        {"battery": {"data": {"estimated_work_budget": "low"}, "sequence": 4}}, observed_at=s.t - 10
    )
    s.wait(10).context({"battery": {"data": {"estimated_work_budget": "low"}, "observed_at_ms": s.t - 5000}})
    s.wait(100).start_plan(air_care_plan(s))
    result = replay_records(s.records, settings=SETTINGS)
    assert status(result) == "active"  # the budget is still "high"
    # a newer one does change it
    s2 = Script()
    s2.records = list(s.records[:-1])
    s2.t, s2.offsets, s2.n_ctx = s.t, dict(s.offsets), s.n_ctx
    s2.context({"battery": {"data": {"estimated_work_budget": "low"}, "sequence": 4}})
    s2.wait(100).start_plan(air_care_plan(s2))
    assert status(replay_records(s2.records, settings=SETTINGS)) == "blocked"


# -- HG-16: spoken text ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("language", "sentence"),
    [("ko", "현재 상태를 다시 확인해야 합니다."), ("en", "I need to check the current state again.")],
)
def test_hg16_ask_user_on_unknown_preconditions(language: str, sentence: str) -> None:
    settings = Settings.from_env({"GUARDIAN_LANGUAGE": language})
    script = build("HG-16")
    result = replay_records(script.records, settings=settings)
    (speak,) = result.outs["dispatch"]
    assert names(speak) == ["voice_content.speak"] and speak["decision_id"] is None
    assert speak["dispatch_id"] == ids.precondition_question_dispatch_id(
        script.device_id, script.experience_id
    )
    text = speak["requests"][0]["args"]["text"]
    assert text.startswith(sentence) and speak["tts"] == text
    assert "_" not in text and not any(ch.isdigit() for ch in text)
    assert status(result) == "blocked"


@pytest.mark.parametrize("language", ["ko", "en"])
def test_hg16_person_question_names_the_room(language: str) -> None:
    result = run("HG-03", Settings.from_env({"GUARDIAN_LANGUAGE": language}))
    text = result.outs["dispatch"][0]["requests"][0]["args"]["text"]
    assert "거실" in text and "_" not in text and not any(ch.isdigit() for ch in text)


def test_the_report_shows_preconditions_blocked_and_condition_not_met() -> None:
    from report import render_report

    records = build("HG-13b").records + hg04b("low")(Script(device_id="airbot-0002")).records
    result = replay_records(records, settings=SETTINGS)
    page = render_report(
        decisions=result.outs["decisions"],
        dispatches=result.outs["dispatch"],
        timeline=result.outs["timeline"],
        dead_letters=result.outs["deadletter"],
        statuses=result.summary["experiences"],
    )
    assert 'class="badge st-blocked"' in page
    assert "condition_not_met" in page and "dr-condition_not_met" in page
    assert "condition KNOWN false: battery.estimated_work_budget is low" in page


def test_device_context_survives_the_state_store() -> None:
    from pipeline.core import Pipeline
    from pipeline.runner import MemoryStore, Processor
    from supervisor import rules
    from tables.state import DeviceState
    from topics.registry import load_registry

    registry = load_registry()
    processor = Processor(registry, Pipeline(registry), rules.decide)
    store = MemoryStore()
    for r in build("HG-14g").records:
        processor.process(
            store,
            r.suffix,
            r.key,
            r.value,
            source_topic=r.topic,
            partition=0,
            offset=r.offset,
            received_at_ms=r.ts,
        )
    dev = store.devices["airbot-0001"]
    assert dev.precondition_due_ms is not None and set(dev.context) == {"air_quality", "battery"}
    again = DeviceState.from_json(dev.to_json())
    assert again == dev
    assert b"context" not in DeviceState(device_id="x").to_json()  # nothing extra while empty
