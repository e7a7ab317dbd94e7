"""The HTML incident report's page: lanes and charts, overview, filter controls, text kept inert and local."""

# ruff: noqa: F811  (pytest fixtures imported from tests.unit.report_fixtures are test arguments)

from __future__ import annotations

import re

from report import render_report
from tests.unit.report_fixtures import (
    DEV_A,
    DEV_B,
    EXP_ABORT,
    EXP_DONE,
    EXP_RET,
    IMG,
    SCRIPT,
    Node,
    card_rows,
    dom,  # noqa: F401  (the fixture)
    lanes,
    page,  # noqa: F401  (the fixture)
    parse,
    sample_records,
)


def test_one_lane_per_experience_with_its_device(dom: Node) -> None:
    exp_lanes = {
        n.attrs["data-experience"]: n.attrs["data-device"] for n in lanes(dom) if n.attrs["data-experience"]
    }
    assert exp_lanes == {EXP_DONE: DEV_A, EXP_RET: DEV_A, EXP_ABORT: DEV_B}


def test_entries_without_experience_get_a_per_device_lane(dom: Node) -> None:
    unscoped = [n for n in lanes(dom) if n.attrs["data-experience"] == ""]
    assert [n.attrs["data-device"] for n in unscoped] == [DEV_A]
    assert "no experience" in unscoped[0].text()
    assert "obs_a_15" in unscoped[0].text()


def test_overview_shows_final_statuses(dom: Node) -> None:
    rows = card_rows(dom, "Experiences by final status")
    assert rows["completed"] == 1
    assert rows["returned"] == 1
    assert rows["aborted"] == 1
    assert rows["active"] == 0


def test_overview_counts_drops_dead_letters_decisions_and_backends(dom: Node, page: str) -> None:
    assert card_rows(dom, "Drop reasons") == {"duplicate": 1, "winding_down": 1, "stale": 1}
    assert card_rows(dom, "Dead letters") == {"privacy_violation": 2, "not_json": 1}
    assert card_rows(dom, "Decisions") == {"continue": 1, "ask_user": 1, "abort": 1, "return_to_station": 1}
    assert card_rows(dom, "Decision backends") == {"rules": 2, "gemini": 1, "fallback": 1}
    stats = {
        n.find_all(lambda x: x.tag == "span")[0].text(): n.find_all(lambda x: x.tag == "b")[0].text()
        for n in dom.find_all(lambda n: "stat" in n.classes)
    }
    assert stats["dispatches"] == "3"
    assert stats["experiences"] == "3"
    assert stats["devices"] == "2"


def test_each_lane_shows_status_decisions_dispatches_and_closing_evidence(dom: Node) -> None:
    by_exp = {n.attrs["data-experience"]: n for n in lanes(dom)}
    ret = by_exp[EXP_RET]
    assert ret.attrs["data-status"] == "returned"
    text = ret.text()
    assert "return_to_station" in text and "battery_low" in text and "rules" in text
    assert "security_patrol.stop" in text and "movement.return_to_station" in text
    assert "Evidence that closed it (ended returned" in text
    assert "evidence: movement.station_charging" in text
    aborted = by_exp[EXP_ABORT].text()
    assert "Someone unverified is in the living room." in aborted
    assert "voice_content.speak" in aborted and "fallback" in aborted and "user_cancel" in aborted
    done = by_exp[EXP_DONE]
    assert done.attrs["data-status"] == "completed"
    assert "verification_pending" in done.text() and "gemini" in done.text()


def test_lane_chart_has_stage_rows_and_marks_with_tooltips(dom: Node) -> None:
    lane = next(n for n in lanes(dom) if n.attrs["data-experience"] == EXP_RET)
    svg = lane.find_all(lambda n: n.tag == "svg" and "chart" in n.classes)
    assert len(svg) == 1
    labels = [t.text() for t in svg[0].find_all(lambda n: n.tag == "text" and "rowlbl" in n.classes)]
    assert labels == ["Goal", "Observe", "Decide", "Act", "Evidence", "End", "Drop"]
    circles = svg[0].find_all(lambda n: n.tag == "circle")
    assert len(circles) == 8
    tips = [c.text() for c in circles]
    assert any("ref_id: te_a_13" in t and "station_charging" in t for t in tips)
    done = next(n for n in lanes(dom) if n.attrs["data-experience"] == EXP_DONE)
    drop_tip = [t.text() for t in done.find_all(lambda n: n.tag == "title") if "drop reason" in t.text()]
    assert drop_tip and "drop reason: duplicate" in drop_tip[0]


def test_equal_times_keep_sequence_order(dom: Node) -> None:
    lane = next(n for n in lanes(dom) if n.attrs["data-experience"] == EXP_DONE)
    xs: dict[str, float] = {}
    for group in lane.find_all(lambda n: n.tag == "g"):
        for c in group.find_all(lambda n: n.tag == "circle"):
            ref = re.search(r"ref_id: (\S+)", c.text())
            assert ref
            xs[ref.group(1) + ":" + group.attrs["class"]] = float(c.attrs["cx"])
    # decide (seq 4) and the drop (seq 5) share at_ms: the drop is drawn after it
    assert xs["obs_a_10:k-drop"] > xs[f"dec_{EXP_DONE}_obs_a_10:k-decide"]
    # evidence (seq 8) and end (seq 9) share at_ms too
    assert xs[f"{EXP_DONE}:k-end"] > xs["te_a_4:k-evidence"]


def test_filter_controls_are_present(dom: Node, page: str) -> None:
    text_box = dom.find_all(lambda n: n.tag == "input" and n.attrs.get("id") == "f-text")
    assert len(text_box) == 1
    device = dom.find_all(lambda n: n.tag == "select" and n.attrs.get("id") == "f-device")
    assert len(device) == 1
    options = [o.attrs["value"] for o in device[0].find_all(lambda n: n.tag == "option")]
    assert options == ["", DEV_A, DEV_B]
    status = dom.find_all(lambda n: n.tag == "select" and n.attrs.get("id") == "f-status")
    assert {o.attrs["value"] for o in status[0].find_all(lambda n: n.tag == "option")} >= {
        "",
        "completed",
        "returned",
        "aborted",
    }
    scripts = [n.text() for n in dom.find_all(lambda n: n.tag == "script")]
    assert any("data-experience" in js and "hidden" in js and "f-device" in js for js in scripts)


def test_record_text_is_escaped_and_inert(page: str, dom: Node) -> None:
    assert SCRIPT not in page
    assert "&lt;script&gt;alert(&quot;pwned&quot;)&lt;/script&gt;" in page
    scripts = dom.find_all(lambda n: n.tag == "script")
    assert len(scripts) == 2  # only the report's own: the CSP probe and the filter
    assert not any("pwned" in n.text() for n in scripts)
    assert dom.find_all(lambda n: n.tag == "img") == []
    assert not any(k.startswith("on") for n in dom.iter() for k in n.attrs)
    # the text is still there for the reader, as text
    assert SCRIPT in dom.text()
    assert IMG in dom.text()


def test_no_external_reference(page: str, dom: Node) -> None:
    assert "http://" not in page
    assert "https://" not in page
    assert not re.search(r"""(?:src|href|action)\s*=\s*["']?\s*(?:[a-z]+:)?//""", page, re.I)
    assert "url(" not in page
    assert "@import" not in page
    for node in dom.iter():
        for key in ("src", "href", "action", "xlink:href"):
            if key in node.attrs:
                assert node.attrs[key].startswith(("#", "data:")), (node.tag, node.attrs)
    assert dom.find_all(lambda n: n.tag in ("iframe", "object", "embed", "img", "audio", "video")) == []


def test_empty_input_renders_a_page() -> None:
    page = render_report(decisions=[], dispatches=[], timeline=[], dead_letters=[], statuses={})
    dom = parse(page)
    assert lanes(dom) == []
    assert "No experiences" in dom.text()
    assert card_rows(dom, "Experiences by final status")["completed"] == 0


def test_experience_known_only_from_summary_still_gets_a_lane() -> None:
    page = render_report(
        decisions=[], dispatches=[], timeline=[], dead_letters=[], statuses={"exp_quiet": "active"}
    )
    (lane,) = lanes(parse(page))
    assert lane.attrs["data-experience"] == "exp_quiet"
    assert lane.attrs["data-status"] == "active"


def test_status_falls_back_to_the_end_entry() -> None:
    rec = sample_records()
    rec["statuses"] = {}
    by_exp = {n.attrs["data-experience"]: n.attrs["data-status"] for n in lanes(parse(render_report(**rec)))}
    assert by_exp[EXP_DONE] == "completed" and by_exp[EXP_ABORT] == "aborted"
