"""The HTML incident report at scale: a huge lane capped, lanes packed and drawn on demand, a fleet's page."""

from __future__ import annotations

import re
from typing import Any

from report import render_report
from report.html import (
    LANE_DATA_TYPE,
    OPEN_LANES_MAX,
    decode_lane_data,
    decode_lane_list,
)
from tests.unit.report_fixtures import (
    DEV_A,
    EXP_ABORT,
    SCRIPT,
    _tl,
    card_rows,
    lanes,
    parse,
    sample_records,
)


def unpack_page(page: str) -> str:
    """A page whose lane list is packed, with the list put in place (as the page's script does)."""
    block = re.search(rf'<script type="{LANE_DATA_TYPE}" id="lz-list">([^<]*)</script>', page)
    assert block, "no packed lane list"
    empty = '<div id="lane-list" class="packed"></div>'
    assert page.count(empty) == 1
    return page.replace(empty, f'<div id="lane-list" class="packed">{decode_lane_list(block.group(1))}</div>')


def _eager_parts(page: str) -> dict[str, tuple[str, str]]:
    """lane id -> (shared-axis strip, body) of a page that draws every lane up front."""
    parts: dict[str, tuple[str, str]] = {}
    for m in re.finditer(
        r'<section class="lane" id="(lane-\d+)".*?<summary>.*?(<svg class="shared" .*?</svg>)?</summary>'
        r'<div class="lanebody">(.*?)</div></details></section>',
        page,
        re.S,
    ):
        parts[m.group(1)] = (m.group(2) or "", m.group(3))
    return parts


def test_a_huge_lane_is_capped_and_says_so() -> None:
    timeline = [_tl(1, DEV_A, "exp_big", 0, "goal", "exp_big", "goal")]
    timeline += [
        _tl(i, DEV_A, "exp_big", i * 10, "drop", f"obs_{i}", "relayed", drop="stale") for i in range(2, 5001)
    ]
    timeline.append(_tl(5001, DEV_A, "exp_big", 60_000, "end", "exp_big", "end", status="failed"))
    page = render_report(
        decisions=[], dispatches=[], timeline=timeline, dead_letters=[], statuses={"exp_big": "failed"}
    )
    dom = parse(page)
    (lane,) = lanes(dom)
    rows = lane.find_all(lambda n: n.tag == "tr" and "more" in n.classes)
    assert len(rows) == 1 and "more entries not shown" in rows[0].text()
    circles = lane.find_all(lambda n: n.tag == "circle")
    assert len(circles) < 1000
    tips = " ".join(c.text() for c in circles)
    assert "goal" in tips and "status: failed" in tips  # goal and end always kept
    assert "Chart shows" in lane.text()
    assert len(page) < 2_000_000
    assert card_rows(dom, "Drop reasons") == {"stale": 4999}


def test_fleet_scale_page_stays_bounded() -> None:
    timeline: list[dict[str, Any]] = []
    statuses: dict[str, str] = {}
    stages = ["goal", "evidence", "observe", "decide", "act", "drop", "evidence", "evidence"]
    for e in range(2000):
        exp, dev = f"exp_{e:05d}", f"airbot-{e % 1000:04d}"
        statuses[exp] = "completed"
        for i in range(49):
            stage = stages[i % len(stages)]
            timeline.append(
                _tl(
                    i,
                    dev,
                    exp,
                    e * 100_000 + i * 500,
                    stage,
                    f"ref_{e}_{i}",
                    f"{stage} number {i}",
                    drop="stale" if stage == "drop" else None,
                )
            )
        timeline.append(_tl(50, dev, exp, e * 100_000 + 30_000, "end", exp, "end", status="completed"))
    assert len(timeline) == 100_000
    packed = render_report(decisions=[], dispatches=[], timeline=timeline, dead_letters=[], statuses=statuses)
    # collapsed and drawn on demand (drawn, it is ~33 MB): the lane list and the lanes' content are packed
    assert len(packed.encode()) < 5_000_000, len(packed)
    page = unpack_page(packed)
    assert page.count('class="lane"') == 2000
    assert page.count("data-chunk=") == 2000
    assert 'class="chart"' not in page


def test_collapsed_lanes_carry_their_content_compressed_and_identical() -> None:
    eager = render_report(**sample_records(), generated_note="unit test")
    packed = render_report(**sample_records(), generated_note="unit test", on_demand=True)
    assert 'class="lane"' not in packed and "exp_guardian_00" not in packed  # the list is packed too
    page = unpack_page(packed)
    dom = parse(page)
    sections = lanes(dom)
    assert len(sections) == 4
    # nothing of a lane's body is in the page as markup: no chart, no table, no strip
    assert not dom.find_all(lambda n: n.tag == "svg" and ("chart" in n.classes or n.classes == {"shared"}))
    assert not dom.find_all(lambda n: n.tag == "table" and "entries" in n.classes)
    assert SCRIPT not in page and "&lt;script&gt;alert" not in page  # the lane's text is packed, too
    # the filters still see every lane's values, and the overview is all there
    assert {n.attrs["data-experience"]: n.attrs["data-dead"] for n in sections}[EXP_ABORT] == (
        "not_json privacy_violation"
    )
    assert card_rows(dom, "Decisions") == {"continue": 1, "ask_user": 1, "abort": 1, "return_to_station": 1}
    assert all(n.find_all(lambda x: x.tag == "details" and "open" in x.attrs) == [] for n in sections)
    # each lane's packed strip and body is exactly what the eager page draws (its tables collapsed)
    data = {
        n.attrs["id"]: decode_lane_data(n.text())
        for n in dom.iter()
        if n.tag == "script" and n.attrs.get("type") == LANE_DATA_TYPE and n.attrs["id"] != "lz-list"
    }
    assert data and all(k.startswith("lz-") for k in data)
    expected = _eager_parts(eager)
    assert set(expected) == {n.attrs["id"] for n in sections}
    for n in sections:
        strip, body = data[f"lz-{n.attrs['data-chunk']}"][int(n.attrs["data-slot"])]
        want_strip, want_body = expected[n.attrs["id"]]
        assert strip == want_strip and strip.startswith('<svg class="shared"')
        assert body == want_body.replace('<details class="tbl" open>', '<details class="tbl">')
    aborted = next(n for n in sections if n.attrs["data-experience"] == EXP_ABORT)
    _, body = data[f"lz-{aborted.attrs['data-chunk']}"][int(aborted.attrs["data-slot"])]
    assert "Someone unverified is in the living room." in body and 'class="detail deadletters"' in body


def test_many_lanes_are_packed_in_several_chunks() -> None:
    rec = sample_records()
    timeline = list(rec["timeline"])
    statuses = dict(rec["statuses"])
    for e in range(OPEN_LANES_MAX + 1):
        exp = f"exp_more_{e:03d}"
        statuses[exp] = "completed"
        timeline.append(_tl(1, f"airbot-9{e:03d}", exp, 100_000 + e, "goal", exp, "goal: " + "x" * 8000))
    page = unpack_page(render_report(**{**rec, "timeline": timeline, "statuses": statuses}))
    dom = parse(page)
    assert len(lanes(dom)) == OPEN_LANES_MAX + 1 + 4
    assert all("data-chunk" in n.attrs for n in lanes(dom))  # automatic past OPEN_LANES_MAX
    blocks = [
        n
        for n in dom.iter()
        if n.tag == "script" and n.attrs.get("type") == LANE_DATA_TYPE and n.attrs["id"] != "lz-list"
    ]
    assert len(blocks) > 1
    slots = {(n.attrs["data-chunk"], n.attrs["data-slot"]) for n in lanes(dom)}
    assert len(slots) == len(lanes(dom))
    unpacked = [lane for b in blocks for lane in decode_lane_data(b.text())]
    assert len(unpacked) == len(lanes(dom))
    assert sum("x" * 8000 in body for _, body in unpacked) == OPEN_LANES_MAX + 1
