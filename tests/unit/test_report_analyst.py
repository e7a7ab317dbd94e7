"""The HTML incident report, what an analyst looks for: dead letters, divergences, triggers, state bands."""

# ruff: noqa: F811  (pytest fixtures imported from tests.unit.report_fixtures are test arguments)

from __future__ import annotations

import json

from report import render_report
from report.bands import state_of
from report.html import (
    DeviceStateChange,
)
from tests.unit.report_fixtures import (
    DEV_A,
    DEV_B,
    EXP_ABORT,
    EXP_DONE,
    EXP_RET,
    T0,
    Node,
    dom,  # noqa: F401  (the fixture)
    lanes,
    page,  # noqa: F401  (the fixture)
    parse,
    sample_records,
)


def _lane(dom: Node, exp: str) -> Node:
    return next(n for n in lanes(dom) if n.attrs["data-experience"] == exp)


def test_dead_letters_are_listed_in_their_devices_lane_without_payload(dom: Node, page: str) -> None:
    lane = _lane(dom, EXP_ABORT)  # device B's experience was running when they arrived
    table = lane.find_all(lambda n: n.tag == "table" and "deadletters" in n.classes)
    assert len(table) == 1
    rows = [r for r in table[0].find_all(lambda n: n.tag == "tr") if "dlrow" in r.classes]
    assert [r.attrs["data-reason"] for r in rows] == ["privacy_violation", "privacy_violation", "not_json"]
    assert "guardian.observations [3] @1" in rows[0].text()
    assert "forbidden key at facts.bbox" in rows[0].text() and "facts.bbox" in rows[0].text()
    assert lane.attrs["data-dead"] == "not_json privacy_violation"
    assert "3 dead letters" in lane.text()
    assert _lane(dom, EXP_DONE).attrs["data-dead"] == ""


def test_a_dead_letter_outside_any_experience_goes_to_the_devices_unscoped_lane() -> None:
    rec = sample_records()
    late = {**rec["dead_letters"][2], "received_at_ms": T0 + 500_000, "key": "airbot-0009"}
    dom = parse(render_report(**{**rec, "dead_letters": [late]}))
    lane = next(n for n in lanes(dom) if n.attrs["data-device"] == "airbot-0009")
    assert lane.attrs["data-experience"] == "" and lane.attrs["data-dead"] == "not_json"


def test_a_cross_device_letter_also_shows_in_the_experience_it_names() -> None:
    rec = sample_records()
    payload = json.dumps({"device_id": DEV_B, "correlation": {"experience_id": EXP_DONE}})
    letter = {**rec["dead_letters"][0], "reason_code": "cross_device", "payload": payload}
    dom = parse(render_report(**{**rec, "dead_letters": [letter]}))
    assert _lane(dom, EXP_ABORT).attrs["data-dead"] == "cross_device"
    done = _lane(dom, EXP_DONE)
    assert done.attrs["data-dead"] == "cross_device"
    assert f"from device {DEV_B}, naming this experience" in done.text()


def test_divergences_are_marked_on_their_decision_and_in_the_banner() -> None:
    divergence = {
        "trigger_event_id": "obs_a_20",
        "kind": "different",
        "field": "decision",
        "recorded": "continue",
        "replayed": "return_to_station",
    }
    lost = {"trigger_event_id": "obs_zz", "kind": "not_reproduced", "recorded": "dec_zz"}
    page = render_report(**sample_records(), divergences=[divergence, lost], replay_mode="recorded")
    dom = parse(page)
    ret = _lane(dom, EXP_RET)
    marked = [r for r in ret.find_all(lambda n: n.tag == "tr") if "diverged" in r.classes]
    assert len(marked) == 1 and marked[0].attrs["data-decision-id"] == "dec_exp_guardian_002_obs_a_20"
    assert 'decision: recorded "continue" → replayed "return_to_station"' in marked[0].text()
    assert ret.attrs["data-diverged"] == "1"
    assert not [r for r in _lane(dom, EXP_DONE).find_all(lambda n: n.tag == "tr") if "diverged" in r.classes]
    banner = next(n for n in dom.iter() if n.attrs.get("id") == "replay-mode")
    assert "decisions recorded" in banner.text() and "2 divergences" in banner.text()
    assert "obs_zz" in banner.text() and "was not reproduced" in banner.text()


def test_no_banner_outside_a_replay(dom: Node) -> None:
    assert not [n for n in dom.iter() if n.attrs.get("id") == "replay-mode"]


def test_lanes_carry_their_severity_and_filter_values(dom: Node) -> None:
    by_exp = {n.attrs["data-experience"]: n for n in lanes(dom)}
    assert by_exp[EXP_ABORT].attrs["data-sev"] == "0"  # aborted
    assert by_exp[EXP_DONE].attrs["data-sev"] == by_exp[EXP_RET].attrs["data-sev"] == "5"
    assert by_exp[EXP_ABORT].attrs["data-decisions"] == "abort ask_user"
    assert by_exp[EXP_ABORT].attrs["data-backends"] == "fallback rules"
    assert by_exp[EXP_DONE].attrs["data-drops"] == "duplicate"
    for select in ("f-decision", "f-backend", "f-drop", "f-dead", "f-sort"):
        assert [n for n in dom.iter() if n.attrs.get("id") == select], select
    dead = next(n for n in dom.iter() if n.attrs.get("id") == "f-dead")
    assert [o.attrs["value"] for o in dead.find_all(lambda n: n.tag == "option")] == [
        "",
        "not_json",
        "privacy_violation",
    ]


def test_dispatch_trigger_links_to_the_triggers_entry(dom: Node) -> None:
    lane = _lane(dom, EXP_ABORT)
    table = lane.find_all(lambda n: n.tag == "table" and "dispatches" in n.classes)[0]
    links = table.find_all(lambda n: n.tag == "a")
    assert [a.text() for a in links] == ["obs_b_10", "obs_b_11"]
    for a in links:
        target = next(n for n in dom.iter() if n.attrs.get("id") == a.attrs["data-jump"])
        assert a.attrs["href"] == "#" + a.attrs["data-jump"]
        assert target.tag == "tr" and a.text() in target.text() and "observe" in target.text()


def test_state_of_reads_network_and_voice_facts_only() -> None:
    assert state_of("voice_llm.pipeline_state_changed", {"voice_session_active": True}) == ("voice", "active")
    net = "network.aws_iot_session_changed"
    assert state_of(net, {"connected": False}) == ("network", "disconnected")
    assert state_of(net, {"connected": True, "session_state": "reconnecting"}) == ("network", "reconnecting")
    assert state_of("security.person_detected", {"connected": False}) is None
    assert state_of(net, {"connected": "no"}) is None


def test_network_outage_and_voice_session_are_bands_and_the_voice_session_is_the_dispatch_cause() -> None:
    rec = sample_records()
    # device A: a 30 s outage; device B: a voice session that caused its second dispatch
    changes = [
        DeviceStateChange(DEV_A, "network", T0 + 5_000, "net_down", "disconnected"),
        DeviceStateChange(DEV_A, "network", T0 + 35_000, "net_up", "connected"),
        DeviceStateChange(DEV_B, "voice", T0 + 2_000, "voice_on", "active"),
        DeviceStateChange(DEV_B, "voice", T0 + 22_000, "voice_off", "idle"),
    ]
    dispatch = {**rec["dispatches"][1], "trigger_event_id": "voice_on", "decision_id": None}
    rec["dispatches"] = [rec["dispatches"][0], dispatch, rec["dispatches"][2]]
    dom = parse(render_report(**rec, device_states=changes))
    done = _lane(dom, EXP_DONE)
    bands = done.find_all(lambda n: n.tag == "rect" and "sb-network-disconnected" in n.classes)
    assert len(bands) == 2  # the lane's chart and its strip on the shared axis
    states = next(n for n in done.iter() if n.tag == "ul" and "states" in n.classes)
    assert "network disconnected" in states.text() and "(30s)" in states.text()
    assert not _lane(dom, EXP_RET).find_all(lambda n: n.tag == "ul" and "states" in n.classes)
    aborted = _lane(dom, EXP_ABORT)
    assert not aborted.find_all(lambda n: "sb-network-disconnected" in n.classes)
    table = aborted.find_all(lambda n: n.tag == "table" and "dispatches" in n.classes)[0]
    link = next(a for a in table.find_all(lambda n: n.tag == "a") if a.text() == "voice_on")
    target = next(n for n in dom.iter() if n.attrs.get("id") == link.attrs["data-jump"])
    assert target.tag == "li" and "voice session active" in target.text()
    labels = [t.text() for t in aborted.find_all(lambda n: n.tag == "text" and "staterow" in n.classes)]
    assert labels == ["Voice", "Dead letter"]
    dead_marks = aborted.find_all(lambda n: n.tag == "g" and "k-dead" in n.classes)[0]
    assert "privacy_violation: forbidden key at facts.bbox" in dead_marks.text()
