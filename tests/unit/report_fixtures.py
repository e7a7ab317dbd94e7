"""The HTML incident report's test records (docs/CONTRACTS.md §6–§8, §10), a tiny DOM and the sample page."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any

import pytest

from report import render_report

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


# --------------------------------------------------------------------------- the sample page


@pytest.fixture(scope="module")
def page() -> str:
    return render_report(**sample_records(), generated_note="unit test")


@pytest.fixture(scope="module")
def dom(page: str) -> Node:
    return parse(page)


def lanes(dom: Node) -> list[Node]:
    return dom.find_all(lambda n: "lane" in n.classes)
