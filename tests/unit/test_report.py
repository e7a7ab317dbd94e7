"""The HTML incident report: what a user sees, from records shaped as in docs/CONTRACTS.md §6–§8, §10."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from report import render_report, render_report_from_dir
from report.__main__ import main as report_main
from report.bands import state_of
from report.html import (
    LANE_DATA_TYPE,
    OPEN_LANES_MAX,
    DeviceStateChange,
    decode_lane_data,
    decode_lane_list,
)

T0 = 1785400000000
DEV_A = "airbot-0001"
DEV_B = "airbot-0002"
EXP_DONE = "exp_guardian_001"  # completed, with physical evidence
EXP_RET = "exp_guardian_002"  # returned after a return_to_station decision and dispatch
EXP_ABORT = "exp_guardian_003"  # aborted by a user cancel
SCRIPT = '<script>alert("pwned")</script>'
IMG = '"><img src=x onerror=alert(1)>'
WORKFLOW = {EXP_DONE: "wf_guardian_001", EXP_RET: "wf_guardian_002", EXP_ABORT: "wf_guardian_003"}


# --------------------------------------------------------------------------- synthetic records


def _tl(
    seq: int,
    device: str,
    exp: str | None,
    at: int,
    stage: str,
    ref: str,
    summary: str,
    drop: str | None = None,
    status: str | None = None,
) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "device_id": device,
        "experience_id": exp,
        "seq": seq,
        "at_ms": T0 + at,
        "stage": stage,
        "ref_id": ref,
        "summary": summary,
        "drop_reason": drop,
    }
    if stage == "end":
        entry["status"] = status
    return entry


def _decision(
    device: str, exp: str, trigger: str, decision: str, reason: str, backend: str, at: int, rationale: str
) -> dict[str, Any]:
    return {
        "decision_id": f"dec_{exp}_{trigger}",
        "device_id": device,
        "experience_id": exp,
        "workflow_id": WORKFLOW[exp],
        "trigger_event_id": trigger,
        "decision": decision,
        "reason_code": reason,
        "rationale": rationale,
        "backend": backend,
        "state_etag": "e3",
        "decided_at_ms": T0 + at,
        "budget_after": {"decisions": 1, "local_retry": 1, "cloud_replan": 2, "user_question": 1},
    }


def _dispatch(
    dec: dict[str, Any], at: int, requests: list[tuple[str, str]], tts: str | None
) -> dict[str, Any]:
    return {
        "dispatch_id": f"dsp_{dec['decision_id']}",
        "decision_id": dec["decision_id"],
        "trigger_event_id": dec["trigger_event_id"],
        "device_id": dec["device_id"],
        "experience_id": dec["experience_id"],
        "workflow_id": dec["workflow_id"],
        "created_at_ms": T0 + at,
        "kind": "device_workflow_requests",
        "requests": [
            {"step_id": f"sup_{i}", "capability": cap, "operation": op, "args": {}}
            for i, (cap, op) in enumerate(requests)
        ],
        "tts": tts,
    }


def _dead(reason: str, offset: int) -> dict[str, Any]:
    return {
        "reason_code": reason,
        "source_topic": "guardian.observations",
        "partition": 3,
        "offset": offset,
        "key": DEV_B,
        "event_id": f"obs_bad_{offset}",
        "detail": "forbidden key at facts.bbox" if reason == "privacy_violation" else "not JSON",
        "offending_paths": ["facts.bbox"] if reason == "privacy_violation" else [],
        "payload_sha256": "ab" * 32,
        "payload_size": 812,
        "payload": None,
        "received_at_ms": T0 + offset,
    }


def sample_records() -> dict[str, Any]:
    """3 experiences on 2 devices, plus unscoped drops and dead letters: render_report's keyword arguments."""
    d_person = _decision(
        DEV_A, EXP_DONE, "obs_a_10", "continue", "verification_pending", "gemini", 2_100, "ok"
    )
    d_battery = _decision(
        DEV_A, EXP_RET, "obs_a_20", "return_to_station", "battery_low", "rules", 62_000, "Battery low: " + IMG
    )
    d_ask = _decision(
        DEV_B, EXP_ABORT, "obs_b_10", "ask_user", "verification_failed", "fallback", 3_000, "Ask the user."
    )
    d_cancel = _decision(DEV_B, EXP_ABORT, "obs_b_11", "abort", "user_cancel", "rules", 9_000, "User cancel.")
    dispatches = [
        _dispatch(
            d_battery,
            62_005,
            [("security_patrol", "stop"), ("movement", "return_to_station")],
            None,
        ),
        _dispatch(d_ask, 3_005, [("voice_content", "speak")], "Someone unverified is in the living room."),
        _dispatch(d_cancel, 9_005, [("security_patrol", "stop"), ("movement", "return_to_station")], None),
    ]
    timeline = [
        # EXP_DONE: a quiet patrol with one person detection, closed by physical evidence
        _tl(1, DEV_A, EXP_DONE, 0, "goal", EXP_DONE, "goal: Check the home safely"),
        _tl(2, DEV_A, EXP_DONE, 1_000, "evidence", "te_a_1", "evidence: security.started"),
        _tl(3, DEV_A, EXP_DONE, 2_000, "observe", "obs_a_10", "observe: security.person_detected " + SCRIPT),
        _tl(4, DEV_A, EXP_DONE, 2_100, "decide", d_person["decision_id"], "decision: continue"),
        _tl(5, DEV_A, EXP_DONE, 2_100, "drop", "obs_a_10", "duplicate of obs_a_10", drop="duplicate"),
        _tl(6, DEV_A, EXP_DONE, 20_000, "evidence", "te_a_2", "evidence: security.area_patrolled 2"),
        _tl(7, DEV_A, EXP_DONE, 30_000, "evidence", "te_a_3", "evidence: security.stopped"),
        _tl(8, DEV_A, EXP_DONE, 40_000, "evidence", "te_a_4", "evidence: movement.station_charging"),
        _tl(9, DEV_A, EXP_DONE, 40_000, "end", EXP_DONE, "end: completed", status="completed"),
        # unscoped on device A: no experience
        _tl(10, DEV_A, None, 45_000, "drop", "obs_a_15", "network.aws_iot_session_changed", drop="stale"),
        # EXP_RET: battery low -> return_to_station -> returned
        _tl(11, DEV_A, EXP_RET, 50_000, "goal", EXP_RET, "goal: Check the home safely"),
        _tl(12, DEV_A, EXP_RET, 51_000, "evidence", "te_a_11", "evidence: security.started"),
        _tl(13, DEV_A, EXP_RET, 62_000, "observe", "obs_a_20", "observe: security.condition_changed"),
        _tl(14, DEV_A, EXP_RET, 62_000, "decide", d_battery["decision_id"], "decision: return_to_station"),
        _tl(15, DEV_A, EXP_RET, 62_005, "act", dispatches[0]["dispatch_id"], "dispatch: stop, return"),
        _tl(16, DEV_A, EXP_RET, 70_000, "evidence", "te_a_12", "evidence: security.stopped"),
        _tl(17, DEV_A, EXP_RET, 90_000, "evidence", "te_a_13", "evidence: movement.station_charging"),
        _tl(18, DEV_A, EXP_RET, 90_000, "end", EXP_RET, "end: returned", status="returned"),
        # EXP_ABORT on device B: failed verification, then a user cancel
        _tl(1, DEV_B, EXP_ABORT, 0, "goal", EXP_ABORT, "goal: Check the home safely"),
        _tl(2, DEV_B, EXP_ABORT, 500, "evidence", "te_b_1", "evidence: security.started"),
        _tl(3, DEV_B, EXP_ABORT, 3_000, "observe", "obs_b_10", "observe: security.verification_result"),
        _tl(4, DEV_B, EXP_ABORT, 3_000, "decide", d_ask["decision_id"], "decision: ask_user"),
        _tl(5, DEV_B, EXP_ABORT, 3_005, "act", dispatches[1]["dispatch_id"], "dispatch: voice_content.speak"),
        _tl(6, DEV_B, EXP_ABORT, 9_000, "observe", "obs_b_11", "observe: user.cancel_requested"),
        _tl(7, DEV_B, EXP_ABORT, 9_000, "decide", d_cancel["decision_id"], "decision: abort"),
        _tl(8, DEV_B, EXP_ABORT, 9_005, "act", dispatches[2]["dispatch_id"], "dispatch: stop, return"),
        _tl(9, DEV_B, EXP_ABORT, 9_500, "drop", "obs_b_12", "security.person_detected", drop="winding_down"),
        _tl(10, DEV_B, EXP_ABORT, 12_000, "evidence", "te_b_2", "evidence: security.stopped"),
        _tl(11, DEV_B, EXP_ABORT, 30_000, "evidence", "te_b_3", "evidence: movement.station_charging"),
        _tl(12, DEV_B, EXP_ABORT, 30_000, "end", EXP_ABORT, "end: aborted", status="aborted"),
    ]
    return {
        "decisions": [d_person, d_battery, d_ask, d_cancel],
        "dispatches": dispatches,
        "timeline": timeline,
        "dead_letters": [_dead("privacy_violation", 1), _dead("privacy_violation", 2), _dead("not_json", 3)],
        "statuses": {EXP_DONE: "completed", EXP_RET: "returned", EXP_ABORT: "aborted"},
    }


# --------------------------------------------------------------------------- a tiny DOM for assertions

_VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


@dataclass
class Node:
    tag: str
    attrs: dict[str, str]
    children: list[Node | str] = field(default_factory=list)

    def iter(self) -> Iterator[Node]:
        yield self
        for child in self.children:
            if isinstance(child, Node):
                yield from child.iter()

    def find_all(self, pred: Callable[[Node], bool]) -> list[Node]:
        return [n for n in self.iter() if pred(n)]

    def text(self) -> str:
        return "".join(c if isinstance(c, str) else c.text() for c in self.children)

    @property
    def classes(self) -> set[str]:
        return set(self.attrs.get("class", "").split())


class _TreeBuilder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("#root", {})
        self.stack = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag, {k: v or "" for k, v in attrs})
        self.stack[-1].children.append(node)
        if tag not in _VOID:
            self.stack.append(node)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.stack[-1].children.append(Node(tag, {k: v or "" for k, v in attrs}))

    def handle_endtag(self, tag: str) -> None:
        for i in range(len(self.stack) - 1, 0, -1):
            if self.stack[i].tag == tag:
                del self.stack[i:]
                return

    def handle_data(self, data: str) -> None:
        self.stack[-1].children.append(data)


def parse(page: str) -> Node:
    builder = _TreeBuilder()
    builder.feed(page)
    builder.close()
    return builder.root


def card_rows(dom: Node, title_prefix: str) -> dict[str, int]:
    """Name -> count of the overview card whose heading starts with title_prefix."""
    for card in dom.find_all(lambda n: "card" in n.classes):
        heads = card.find_all(lambda n: n.tag == "h3")
        if heads and heads[0].text().strip().startswith(title_prefix):
            rows: dict[str, int] = {}
            for tr in card.find_all(lambda n: n.tag == "tr"):
                cells = [c.text().strip() for c in tr.find_all(lambda n: n.tag == "td")]
                rows[cells[0]] = int(cells[1].replace(",", ""))
            return rows
    raise AssertionError(f"no overview card titled {title_prefix!r}")


# --------------------------------------------------------------------------- tests


@pytest.fixture(scope="module")
def page() -> str:
    return render_report(**sample_records(), generated_note="unit test")


@pytest.fixture(scope="module")
def dom(page: str) -> Node:
    return parse(page)


def lanes(dom: Node) -> list[Node]:
    return dom.find_all(lambda n: "lane" in n.classes)


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


def test_render_report_from_dir_and_main(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rec = sample_records()
    for name, key in (
        ("decisions.jsonl", "decisions"),
        ("dispatch.jsonl", "dispatches"),
        ("timeline.jsonl", "timeline"),
        ("deadletter.jsonl", "dead_letters"),
    ):
        (tmp_path / name).write_text("".join(json.dumps(r) + "\n" for r in rec[key]), encoding="utf-8")
    summary = {"decisions": 4, "experiences": rec["statuses"]}
    (tmp_path / "summary.json").write_text(json.dumps(summary), encoding="utf-8")

    out = render_report_from_dir(tmp_path)
    assert out == tmp_path / "report.html"
    dom = parse(out.read_text(encoding="utf-8"))
    assert {n.attrs["data-experience"] for n in lanes(dom)} == {EXP_DONE, EXP_RET, EXP_ABORT, ""}
    assert card_rows(dom, "Dead letters") == {"privacy_violation": 2, "not_json": 1}

    out.unlink()
    assert report_main([str(tmp_path)]) == 0
    assert out.exists()
    assert capsys.readouterr().out.strip().endswith("report.html")


def test_render_report_from_dir_names_a_bad_line(tmp_path: Path) -> None:
    (tmp_path / "timeline.jsonl").write_text('{"stage": "goal"}\nnot json\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"timeline\.jsonl:2"):
        render_report_from_dir(tmp_path)
    assert report_main([str(tmp_path)]) == 1
    (tmp_path / "timeline.jsonl").write_bytes(b'{"stage": "goal"}\n{"stage": "\xff"}\n')
    with pytest.raises(ValueError, match=r"timeline\.jsonl:2: not UTF-8"):
        render_report_from_dir(tmp_path)
    assert not (tmp_path / "report.html").exists() and not (tmp_path / "report.html.partial").exists()


# --------------------------------------------------------------------------- what an analyst looks for


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


def test_from_dir_reads_the_mode_and_divergences(tmp_path: Path) -> None:
    (tmp_path / "summary.json").write_text(json.dumps({"decisions_mode": "rules", "experiences": {}}))
    (tmp_path / "divergences.jsonl").write_text(
        json.dumps({"trigger_event_id": "t1", "kind": "no_recorded_decision"}) + "\n", encoding="utf-8"
    )
    dom = parse(render_report_from_dir(tmp_path).read_text(encoding="utf-8"))
    banner = next(n for n in dom.iter() if n.attrs.get("id") == "replay-mode")
    assert "decisions rules" in banner.text() and "1 divergence" in banner.text()


# --------------------------------------------------------------------------- lanes drawn on demand


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


@pytest.mark.parametrize("on_demand", [False, True])
def test_from_dir_streams_the_files_to_the_same_page(tmp_path: Path, on_demand: bool) -> None:
    """The directory's files are read lane by lane, not held: the page is the one its records make."""
    rec = sample_records()
    rec["timeline"][0]["summary"] = "goal: 거실과 주방을 순찰"
    divergences = [
        {"trigger_event_id": "obs_a_20", "kind": "different", "field": "decision", "recorded": "continue"},
        {"trigger_event_id": "obs_zz", "kind": "not_reproduced", "recorded": "dec_zz"},
    ]
    files = {
        "decisions.jsonl": rec["decisions"],
        "dispatch.jsonl": rec["dispatches"],
        "timeline.jsonl": rec["timeline"],
        "deadletter.jsonl": rec["dead_letters"],
        "divergences.jsonl": divergences,
    }
    for name, items in files.items():
        # blank lines and non-ASCII text shift the byte offsets the second pass seeks to
        (tmp_path / name).write_text("\n".join(json.dumps(r, ensure_ascii=False) + "\n" for r in items))
    summary = {"decisions_mode": "recorded", "experiences": rec["statuses"]}
    (tmp_path / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    states = [DeviceStateChange(DEV_A, "network", T0 + 5_000, "net_down", "disconnected")]
    page = render_report_from_dir(tmp_path, device_states=states, on_demand=on_demand).read_text(
        encoding="utf-8"
    )
    expected = render_report(
        **rec,
        generated_note=f"From {tmp_path.name}/: 30 timeline entries, 4 decisions, 3 dispatches, "
        "3 dead letters.",
        divergences=divergences,
        replay_mode="recorded",
        device_states=states,
        on_demand=on_demand,
    )
    assert page == expected
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("report.html")] == ["report.html"]
