"""The console's core: records in, a bounded view model out, lanes drawn by the report's own code."""

from __future__ import annotations

import argparse

import orjson
import pytest

from config.settings import SettingsError
from console.reader import parse_from
from console.render import kcat_lines, lane_fragment, offline_report, overview_fragment
from console.settings import ConsoleSettings
from console.state import ConsoleState, valid_key
from console.workers import WorkerTrack, parse_metrics
from report import render_report
from tests.unit.console_fixtures import fed
from tests.unit.report_fixtures import DEV_A, DEV_B, EXP_ABORT, EXP_DONE, EXP_RET, IMG, SCRIPT, sample_records
from topics.names import TopicNames

TOPICS = TopicNames("guardian.")


def test_each_experience_is_a_lane_with_its_status_decisions_and_device() -> None:
    state = fed()
    state.flush()
    rows = {row["experience"]: row for row in state.since(0)[0]}
    assert {EXP_DONE, EXP_RET, EXP_ABORT} <= set(rows)
    assert rows[EXP_DONE]["status"] == "completed" and rows[EXP_DONE]["device"] == DEV_A
    assert rows[EXP_ABORT]["status"] == "aborted"
    assert rows[EXP_ABORT]["decisions"] == ["abort", "ask_user"]
    assert "privacy_violation" in rows[EXP_ABORT]["dead"]
    assert state.statuses()["completed"] == 1


def test_a_lane_is_drawn_by_the_reports_own_code() -> None:
    """What the operator sees live is what the analyst sees later: the console's fragment of a lane
    is the report's lane section for the same records (only the lane's index and open state may differ)."""
    state = fed()
    fragment = lane_fragment(state, f"e:{EXP_RET}")
    assert fragment is not None
    page = render_report(**sample_records())
    start = page.index(f'data-experience="{EXP_RET}"')
    body_in_report = page[page.index('<div class="lanebody">', start) : page.index("</section>", start)]
    body_live = fragment[fragment.index('<div class="lanebody">') : fragment.index("</section>")]
    # the report's own lane numbering (lane-N) differs; the drawing does not
    assert body_live.replace("lane-1", "lane-N").count("<tr") == body_in_report.count("<tr")
    assert "return_to_station" in body_live and "battery_low" in body_live


def test_record_text_is_escaped_and_dead_letters_show_no_payload() -> None:
    hostile = dict(sample_records()["dead_letters"][0], payload=SCRIPT, detail="x")
    state = fed(extra_dead=[hostile])
    fragment = lane_fragment(state, f"e:{EXP_RET}") or ""
    assert IMG not in fragment and "&quot;&gt;&lt;img" in fragment
    for key in state.lanes:
        assert SCRIPT not in (lane_fragment(state, key) or "")
    assert SCRIPT not in overview_fragment(state, [])


def test_bad_records_are_counted_never_held_and_shown_as_such() -> None:
    state = ConsoleState()
    assert not state.add("timeline", 0, 1, 1, None, b"{not json")
    assert not state.add("decisions", 0, 2, 1, None, b"[1, 2]")
    assert not state.add("dispatch", 0, 3, 1, None, orjson.dumps({"dispatch_id": "x"}))
    assert not state.add("timeline", 0, 4, 1, None, None)
    assert state.bad == {"timeline: not_json": 2, "decisions: not_object": 1, "dispatch: invalid": 1}
    assert not state.lanes
    page = overview_fragment(state, [])
    assert "Refused records" in page and "dispatch: invalid" in page


def test_memory_is_bounded_least_recently_updated_lanes_go_first() -> None:
    state = ConsoleState(max_lanes=3, records_per_lane=2)
    base = sample_records()["timeline"][0]
    for i in range(5):
        rec = dict(base, experience_id=f"exp_{i}", seq=0)
        state.add("timeline", 0, i, 1000 + i, None, orjson.dumps(rec))
    assert list(state.lanes) == ["e:exp_2", "e:exp_3", "e:exp_4"]
    for seq in range(1, 6):
        state.add(
            "timeline",
            0,
            10 + seq,
            2000 + seq,
            None,
            orjson.dumps(dict(base, experience_id="exp_2", seq=seq)),
        )
    lane = state.lanes["e:exp_2"]
    assert len(lane.records) == 2 and lane.evicted == 4
    assert [h.record["seq"] for h in lane.records] == [4, 5]
    # a page that had every lane learns which ones went
    state.flush()
    _, gone, full = state.since(0)
    assert not full and set(gone) == {"e:exp_0", "e:exp_1"}


def test_a_burst_is_merged_and_a_resuming_page_gets_only_what_it_lacks() -> None:
    state = fed()
    seen = state.flush()
    base = sample_records()["timeline"][0]
    for seq in range(100, 300):
        state.add("timeline", 1, seq, 3000 + seq, None, orjson.dumps(dict(base, seq=seq)))
    after = state.flush()
    assert after == seen + 1  # 200 records of one lane: one new version
    changed, gone, full = state.since(seen)
    assert [row["key"] for row in changed] == [f"e:{base['experience_id']}"] and not gone and not full
    assert state.since(after) == ([], [], False)
    # a page of an unknown (later) sequence gets everything again
    assert state.since(after + 5)[2] is True


def test_records_download_as_kcat_lines_and_an_offline_report() -> None:
    state = fed()
    lines = kcat_lines(state, f"e:{EXP_DONE}", TOPICS).splitlines()
    parsed = [orjson.loads(line) for line in lines]
    assert parsed and {p["topic"] for p in parsed} <= {
        "guardian.timeline",
        "guardian.decisions",
        "guardian.dispatch",
    }
    assert all(orjson.loads(p["payload"]).get("experience_id") == EXP_DONE for p in parsed)
    assert {"partition", "offset", "ts", "key", "tstype"} <= set(parsed[0])
    page = offline_report(state, f"e:{EXP_DONE}") or ""
    assert page.startswith("<!DOCTYPE html>") and EXP_DONE in page and EXP_RET not in page


def test_lane_keys_are_ids() -> None:
    assert valid_key(f"e:{EXP_DONE}") and valid_key(f"d:{DEV_B}") and valid_key("d:")
    assert not valid_key("e:") and not valid_key("x:abc") and not valid_key("e:<b>")


def test_worker_lag_trend_and_seconds_behind() -> None:
    def page(lag: int, read: int) -> str:
        return (
            "# HELP guardian_consumer_lag_records lag\n"
            f'guardian_consumer_lag_records{{topic="guardian.observations",partition="1"}} {lag / 2}\n'
            f'guardian_consumer_lag_records{{topic="guardian.plans",partition="3"}} {lag / 2}\n'
            f'guardian_input_records_total{{topic="guardian.observations"}} {read}.0\n'
            "guardian_model_calls_total 7.0\nguardian_model_fallbacks_total 2.0\n"
        )

    track = WorkerTrack(0, "http://127.0.0.1:1")
    track.observe(0.0, True, True, (), parse_metrics(page(100, 0)))
    view = track.observe(10.0, True, True, (), parse_metrics(page(300, 1000)))
    assert view.lag_records == 300 and view.trend == "growing"
    assert view.lag_seconds == 3.0  # 300 records behind, reading 100 records/s
    assert view.partitions == (1, 3) and (view.model_calls, view.fallbacks) == (7, 2)
    view = track.observe(20.0, True, True, (), parse_metrics(page(0, 2000)))
    assert view.trend == "shrinking" and view.lag_seconds == 0.0


def test_from_takes_latest_earliest_or_a_zoned_time() -> None:
    assert parse_from("latest") == "latest" and parse_from("earliest") == "earliest"
    assert parse_from("2026-07-30T12:00:00Z") == 1785412800000
    for bad in ("2026-07-30T12:00:00", "yesterday"):
        with pytest.raises(ValueError, match="--from"):
            parse_from(bad)


def test_a_bad_console_setting_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    from guardian.cli import main

    assert main(["console", "--from", "noon", "--bootstrap", "127.0.0.1:9"]) == 2
    assert "--from takes latest, earliest" in capsys.readouterr().err
    env = {"GUARDIAN_CONSOLE_RECORDS_PER_EXPERIENCE": "5"}
    args = argparse.Namespace(
        host=None, port=None, worker=None, max_experiences=None, records_per_experience=None
    )
    with pytest.raises(SettingsError, match="GUARDIAN_CONSOLE_RECORDS_PER_EXPERIENCE"):
        ConsoleSettings.from_env_and_args(args, env)
    assert ConsoleSettings.from_env_and_args(args, {}).port == 8765


def test_a_dead_letter_goes_where_the_report_places_it() -> None:
    """Within an experience's span it marks that experience; after the experience ended, the device's
    own lane (as the report draws it), not the ended experience."""
    late = dict(
        sample_records()["dead_letters"][0],
        reason_code="too_large",
        received_at_ms=1785400000000 + 10_000_000,
    )
    state = fed(extra_dead=[late])
    state.flush()
    rows = {row["key"]: row for row in state.since(0)[0]}
    assert "privacy_violation" in rows[f"e:{EXP_ABORT}"]["dead"]
    assert "too_large" in rows[f"d:{DEV_B}"]["dead"]
    assert "too_large" not in rows[f"e:{EXP_ABORT}"]["dead"]


def test_where_a_dead_letter_stands_does_not_depend_on_which_topic_was_read_first() -> None:
    """The console reads its topics side by side: a dead letter read before its experience's
    timeline lands in the experience once the span is known, and its device keeps no lane of its
    own (a restarted console once showed a device lane that the first run had not)."""
    recs = sample_records()
    timeline_first = fed()
    dead_first = ConsoleState()
    offset = 0
    for rec in recs["dead_letters"]:
        offset += 1
        assert dead_first.add("deadletter", 3, offset, rec["received_at_ms"], None, orjson.dumps(rec))
    before = dead_first.flush()
    assert {row["key"] for row in dead_first.since(0)[0]} == {f"d:{DEV_B}"}
    for kind, name in (("timeline", "timeline"), ("decisions", "decisions"), ("dispatch", "dispatches")):
        for rec in recs[name]:
            offset += 1
            key = str(rec["device_id"]).encode()
            assert dead_first.add(kind, 1, offset, 1785400000000 + offset, key, orjson.dumps(rec))

    def rows(state: ConsoleState) -> dict[str, tuple[str, list[str]]]:
        state.flush()
        return {row["key"]: (row["status"], row["dead"]) for row in state.since(0)[0]}

    assert rows(dead_first) == rows(timeline_first)
    assert "privacy_violation" in rows(dead_first)[f"e:{EXP_ABORT}"][1]
    # the device lane went, and a page that showed it is told so
    assert f"d:{DEV_B}" not in rows(dead_first)
    assert f"d:{DEV_B}" in dead_first.since(before)[1]
