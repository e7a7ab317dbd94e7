"""docs/SCENARIOS.md HG-01..HG-09, HG-11, HG-12 through ``guardian replay``'s logic (no broker)."""

from __future__ import annotations

import dataclasses
from typing import Any

import orjson
import pytest

from config.settings import Settings
from guardian.replay import ReplayResult, replay_records
from tests.scenario_scripts import CANARY, build, hg12
from tests.streams import Script
from topics.records import DeadLetter, Decision, Dispatch, TimelineEntry

SETTINGS = Settings.from_env({})


def run(scenario: str) -> ReplayResult:
    return replay_records(build(scenario).records, settings=SETTINGS)


def only_status(result: ReplayResult) -> str:
    statuses = list(result.summary["experiences"].values())
    assert len(statuses) == 1, result.summary["experiences"]
    return str(statuses[0])


def stages(result: ReplayResult) -> list[str]:
    return [e["stage"] for e in result.outs["timeline"]]


def decisions(result: ReplayResult) -> list[str]:
    return [d["decision"] for d in result.outs["decisions"]]


def requests(dispatch: dict[str, Any]) -> list[str]:
    return [f"{r['capability']}.{r['operation']}" for r in dispatch["requests"]]


def drops(result: ReplayResult, reason: str) -> list[dict[str, Any]]:
    return [e for e in result.outs["timeline"] if e["drop_reason"] == reason]


@pytest.mark.parametrize("scenario", ["HG-01", "HG-02", "HG-03", "HG-04", "HG-05", "HG-07", "HG-08", "HG-11"])
def test_every_output_matches_the_wire_contract(scenario: str) -> None:
    result = run(scenario)
    # the core builds its outputs as dicts: each is exactly its model's JSON form (no field missing,
    # extra, defaulted or differently typed)
    for kind, model in (
        ("decisions", Decision),
        ("dispatch", Dispatch),
        ("timeline", TimelineEntry),
        ("deadletter", DeadLetter),
    ):
        for d in result.outs[kind]:
            assert model.model_validate(d).model_dump(mode="json") == d, (kind, d)
    seqs = [e["seq"] for e in result.outs["timeline"]]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)


def test_hg01_quiet_patrol_completes_on_physical_evidence_without_decisions() -> None:
    result = run("HG-01")
    assert result.outs["decisions"] == []
    assert only_status(result) == "completed"
    st = stages(result)
    assert st[0] == "goal" and st[-1] == "end"
    assert "evidence" in st
    evidence = [e["summary"] for e in result.outs["timeline"] if e["stage"] == "evidence"]
    # the end comes only after both security.stopped and movement.station_charging
    assert evidence[-2:] == ["evidence: security.stopped", "evidence: movement.station_charging"]


def test_hg01_does_not_complete_before_docking() -> None:
    script = build("HG-01")
    without_dock = script.records[:-1]
    result = replay_records(without_dock, settings=SETTINGS)
    assert only_status(result) == "active"


def test_hg02_two_continue_decisions_no_dispatch_budget_down_by_two() -> None:
    result = run("HG-02")
    assert decisions(result) == ["continue", "continue"]
    assert result.outs["dispatch"] == []
    assert result.outs["decisions"][-1]["budget_after"]["decisions"] == 2
    assert only_status(result) == "completed"


def test_hg03_ask_user_in_words_then_return_to_station() -> None:
    result = run("HG-03")
    assert decisions(result) == ["continue", "ask_user", "return_to_station"]
    ask, ret = result.outs["dispatch"]
    assert requests(ask) == ["voice_content.speak"]
    text = ask["requests"][0]["args"]["text"]
    assert "거실" in text and "2" not in text and "area" not in text and "_" not in text
    assert requests(ret) == ["security_patrol.stop", "movement.return_to_station"]
    assert ret["requests"][1]["depends_on"] == ["sup_stop_security"]
    assert result.outs["decisions"][2]["reason_code"] == "user_question_budget_spent"
    assert only_status(result) == "returned"


def test_hg03_question_in_english_when_configured() -> None:
    result = replay_records(build("HG-03").records, settings=Settings.from_env({"GUARDIAN_LANGUAGE": "en"}))
    text = result.outs["dispatch"][0]["requests"][0]["args"]["text"]
    assert text.startswith("Someone we could not verify was detected in 거실")


def test_hg04_flicker_debounced_then_one_replan_for_remaining_areas() -> None:
    result = run("HG-04")
    assert len(drops(result, "debounced")) == 1
    observed = [e for e in result.outs["timeline"] if e["stage"] == "observe"]
    assert len(observed) == 1 and "low_light=true" in observed[0]["summary"]
    assert decisions(result) == ["replan"]
    (dispatch,) = result.outs["dispatch"]
    assert [r["args"]["area_id"] for r in dispatch["requests"]] == ["3", "6"]  # area 2 was patrolled
    plan_allowed = set(build("HG-04").plan["allowed_action_contracts"])
    assert set(requests(dispatch)) <= plan_allowed
    assert result.outs["decisions"][0]["budget_after"]["cloud_replan"] == 1


def test_hg05_battery_low_returns_only_after_physical_evidence() -> None:
    script = build("HG-05")
    result = replay_records(script.records, settings=SETTINGS)
    assert decisions(result) == ["return_to_station"]
    assert requests(result.outs["dispatch"][0]) == ["security_patrol.stop", "movement.return_to_station"]
    assert only_status(result) == "returned"
    # command_acks alone (the two records after the decision) change nothing
    acks_only = replay_records(script.records[:-2], settings=SETTINGS)
    assert only_status(acks_only) == "active"
    stopped_only = replay_records(script.records[:-1], settings=SETTINGS)
    assert only_status(stopped_only) == "active"


def test_hg06_network_events_never_decide_and_relayed_records_are_stale() -> None:
    result = run("HG-06")
    assert result.outs["decisions"] == []
    stale = drops(result, "stale")
    assert len(stale) == 7
    assert not [e for e in result.outs["timeline"] if e["stage"] == "observe"]
    assert only_status(result) == "completed"


def test_hg07_voice_session_pauses_then_resumes_locally_once() -> None:
    result = run("HG-07")
    assert result.outs["decisions"] == []
    pause, resume = result.outs["dispatch"]
    assert requests(pause) == ["security_patrol.pause"] and pause["decision_id"] is None
    assert requests(resume) == ["security_patrol.resume"] and resume["decision_id"] is None
    assert pause["dispatch_id"] != resume["dispatch_id"]
    assert only_status(result) == "completed"


def test_hg07_no_second_resume_without_local_retry() -> None:
    s = Script()
    s.start().wait(500).security_started().wait(800).patrol("2")
    for _ in range(2):
        s.wait(500).obs("voice_llm.pipeline_state_changed", {"voice_session_active": True}, scoped=False)
        s.wait(300).task("security_patrol", "pause", "completed", signal="security.paused")
        s.wait(5000).obs("voice_llm.pipeline_state_changed", {"voice_session_active": False}, scoped=False)
        s.wait(300).task("security_patrol", "resume", "completed", signal="security.resumed")
    result = replay_records(s.records, settings=SETTINGS)
    assert [requests(d) for d in result.outs["dispatch"]] == [
        ["security_patrol.pause"],
        ["security_patrol.resume"],
        ["security_patrol.pause"],
    ]
    (exhausted,) = drops(result, "budget_exhausted")
    assert "stays paused" in exhausted["summary"]


def test_hg08_user_cancel_bypasses_the_spent_budget_and_aborts() -> None:
    result = run("HG-08")
    assert decisions(result) == ["continue", "continue", "continue", "abort"]
    assert len(drops(result, "budget_exhausted")) == 1
    abort = result.outs["decisions"][-1]
    assert abort["reason_code"] == "user_cancel" and abort["backend"] == "rules"
    assert requests(result.outs["dispatch"][-1]) == ["security_patrol.stop", "movement.return_to_station"]
    assert only_status(result) == "aborted"


def test_hg09_outbox_relay_changes_nothing_twice() -> None:
    result = run("HG-09")
    assert len(drops(result, "duplicate")) == 6
    assert len(drops(result, "out_of_order")) == 1
    ids = [d["decision_id"] for d in result.outs["decisions"]]
    assert len(ids) == len(set(ids)) == 2
    assert only_status(result) == "completed"


def test_hg11_bad_records_get_dead_letters_and_nothing_leaks() -> None:
    result = run("HG-11")
    reasons = sorted(d["reason_code"] for d in result.outs["deadletter"])
    assert reasons == ["not_json", "privacy_violation", "privacy_violation", "too_large", "unknown_contract"]
    for letter in result.outs["deadletter"]:
        if letter["reason_code"] in ("privacy_violation", "not_json", "too_large"):
            assert letter["payload"] is None
            assert len(letter["payload_sha256"]) == 64
    paths = sorted(p for d in result.outs["deadletter"] for p in d["offending_paths"])
    assert "facts.bbox" in paths
    assert any(p.lower().endswith(".pin") for p in paths)
    visible = orjson.dumps([result.outs["decisions"], result.outs["dispatch"], result.outs["timeline"]])
    assert CANARY.encode() not in visible
    assert b"bbox" not in visible
    assert only_status(result) == "completed"


def test_hg12_cross_device_correlation_is_dead_lettered_and_a_is_unaffected() -> None:
    a, b = hg12()
    result = replay_records(a.records + b.records, settings=SETTINGS)
    letters = result.outs["deadletter"]
    assert [d["reason_code"] for d in letters] == ["cross_device", "cross_device"]
    assert all(d["key"] == "airbot-000B" and d["payload"] is not None for d in letters)
    assert result.outs["decisions"] == []
    assert result.summary["experiences"][a.experience_id] == "completed"


def test_replay_is_deterministic_and_order_independent_of_file_order() -> None:
    a, b = hg12()
    one = replay_records(a.records + b.records, settings=SETTINGS)
    two = replay_records(list(reversed(b.records + a.records)), settings=SETTINGS)
    assert one.outs == two.outs


def test_recorded_mode_reuses_decisions_and_reports_divergence() -> None:
    script = build("HG-03")
    live = replay_records(script.records, settings=SETTINGS)
    from guardian.replay import InputRecord

    recorded = [
        InputRecord(
            "decisions", "guardian.decisions", 0, i, d["decided_at_ms"], b"airbot-0001", orjson.dumps(d)
        )
        for i, d in enumerate(live.outs["decisions"])
    ]
    again = replay_records(script.records + recorded, settings=SETTINGS)
    assert again.summary["decisions_mode"] == "recorded"
    assert again.divergences == []
    assert again.outs["decisions"] == live.outs["decisions"]
    # tamper with one recorded decision: replay follows the record and reports the divergence
    tampered_value = dict(live.outs["decisions"][1], decision="continue", reason_code="tampered")
    tampered = [
        recorded[0],
        dataclasses.replace(recorded[1], value=orjson.dumps(tampered_value)),
        *recorded[2:],
    ]
    diverged = replay_records(script.records + tampered, settings=SETTINGS)
    assert diverged.outs["decisions"][1]["decision"] == "continue"
    assert {"field": "budget_after"}.items() <= diverged.divergences[0].items()
    assert diverged.summary["divergences"] == len(diverged.divergences) >= 1
    rules = replay_records(script.records + recorded, settings=SETTINGS, mode="rules")
    assert rules.summary["decisions_mode"] == "rules"
