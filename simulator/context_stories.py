"""The device-context stories of docs/SCENARIOS.md (HG-13..HG-16) as device scripts, and the end
each must reach.

HG-13 and HG-14 are played by several devices, one *case* each (HG-13 (a)..(e), HG-14 (f)..(h)):
a case is named by its story and letter, e.g. ``HG-13b``. The domain specs here (see
:mod:`simulator.context_snapshot`) are the ones the scripted replay tests send too.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from simulator.expect import Expect
from simulator.story import Anchor, Beat, Domains, Story

CONTEXT_STORIES: tuple[str, ...] = ("HG-13", "HG-14", "HG-15", "HG-16")
#: the cases of the stories that several devices play, one each
CASES: dict[str, str] = {"HG-13": "abcde", "HG-14": "fgh"}
#: what the presenter says of a state it cannot vouch for (§9.5), in each language
RECHECK = ("현재 상태를 다시 확인해야 합니다.", "I need to check the current state again.")
#: the air-care plan's own steps: a device plays none of them unless the pipeline started the plan
AIR_CARE_OPS = ("movement.move_to_room", "air_cleaning.start_room_cleaning", "movement.return_to_station")
#: a stale context envelope's age (the air-quality TTL is 5 minutes)
STALE_AGE_MS = 360_000


def air(grade: str, **env: Any) -> dict[str, Any]:
    """An ``air_quality`` domain spec."""
    return {"data": {"grade": grade, "trend": "worsening", "main_cause": "pm", "pm25": 61.0}, **env}


def battery(budget: str, **env: Any) -> dict[str, Any]:
    """A ``battery`` domain spec."""
    return {"data": {"charging": False, "estimated_work_budget": budget, "level_pct": 64}, **env}


#: HG-13: the snapshot each case sends just before its plan
HG13_CONTEXT: dict[str, Domains] = {
    "a": {"air_quality": air("bad"), "battery": battery("high")},
    "b": {"air_quality": air("bad"), "battery": battery("low")},
    "c": {"air_quality": air("very_bad")},
    "d": {"air_quality": air("bad"), "battery": {"available": False}},
    "e": {"air_quality": air("good"), "battery": battery("high")},
}
#: HG-14: the stale snapshot before the plan, and each case's answer to the refresh (None: none)
HG14_CONTEXT: Domains = {"air_quality": air("bad", age_ms=STALE_AGE_MS), "battery": battery("high")}
HG14_REPLY: dict[str, Domains | None] = {
    "f": {"air_quality": air("bad")},
    "g": None,
    "h": {"air_quality": air("good")},
}
HG14_REPLY_MS = 2000


def hg15_context(area: str, other: str, names: dict[str, str]) -> Domains:
    """HG-15's rich snapshot: coordinates, raw readings, a streaming domain, a stale network."""
    return {
        "movement": {
            "data": {"state": "moving", "current_area_id": area, "x": 1.25, "y": -3.5, "theta": 0.7}
        },
        "map": {"data": {"areas": [{"area_id": a, "area_name": names.get(a, a)} for a in (area, other)]}},
        "air_quality": air("moderate"),
        "battery": battery("medium"),
        "security": {"data": {"session_state": "running", "stage": "patrolling", "current_area_id": area}},
        "streaming": {"data": {"live_view_active": True}},
        "network": {"data": {"aws_iot_connected_cached": True, "last_error": "none"}, "age_ms": 60_000},
    }  # fmt: skip


def case_of(label: str) -> tuple[str, str]:
    """``HG-13b`` -> (``HG-13``, ``b``); a story without cases -> (story, "")."""
    for story, letters in CASES.items():
        if label.startswith(story) and label[len(story) :] in tuple(letters):
            return story, label[len(story) :]
    return label, ""


def build_context_story(
    label: str, rng: random.Random, areas: Sequence[str], names: dict[str, str], verified: Story
) -> Story:
    """The script of a context case; ``verified`` is HG-02's story (HG-15's promoted triggers)."""
    story, case = case_of(label)
    if story == "HG-13":
        return Story(label, plan="air_care", context_first=HG13_CONTEXT[case])
    if story == "HG-14":
        reply = HG14_REPLY[case]
        return Story(
            label,
            plan="air_care",
            on_unknown="refresh",
            context_first=HG14_CONTEXT,
            refresh_reply=reply,
            refresh_delay_ms=HG14_REPLY_MS,
            answers_refresh=reply is not None,
        )
    if story == "HG-16":
        return Story(label, plan="air_care", on_unknown="ask_user")
    # HG-15: a rich snapshot, a person verified (two promoted triggers), then a forbidden key
    a0, a1 = areas[0], areas[1 % len(areas)]
    at = round(rng.uniform(0.1, 0.2), 2)
    rich = Anchor(0, at, (Beat(0, "context", {"domains": hg15_context(a0, a1, names)}),))
    forbidden = {"battery": {"data": {"estimated_work_budget": "low", "face_image": "$canary"}}}
    late = Anchor(1, 0.5, (Beat(0, "context", {"domains": forbidden}),))
    return Story(
        label,
        (rich, *verified.anchors, late),
        extra_allowed=("air_cleaning.start_room_cleaning",),
    )


def _blocked(opens_with: str, end_says: str, story: str, **more: Any) -> Expect:
    """A case whose plan the pipeline blocks: the device plays none of the plan's steps."""
    return Expect(
        "blocked",
        evidence_before_end=(),
        never_played=AIR_CARE_OPS,
        opens_with=opens_with,
        end_says=end_says,
        story=story,
        **more,
    )


_DOCKED = ("movement.station_charging",)
_REFRESH = (frozenset({"device_context.refresh"}),)

CONTEXT_EXPECTED: dict[str, Expect] = {
    "HG-13a": Expect("completed", evidence_before_end=_DOCKED, story="air care, context fresh and poor"),
    "HG-13b": _blocked("end", "KNOWN false", "air care, budget low"),
    "HG-13c": _blocked("end", "UNKNOWN", "air care, no battery domain"),
    "HG-13d": _blocked("end", "UNKNOWN", "air care, battery unavailable"),
    "HG-13e": _blocked("end", "KNOWN false", "air care, air good"),
    "HG-14f": Expect(
        "completed",
        dispatches=_REFRESH,
        local_dispatches=True,
        evidence_before_end=_DOCKED,
        opens_with="act",
        story="stale context, refreshed",
    ),
    "HG-14g": _blocked(
        "act", "STALE", "stale context, no answer", dispatches=_REFRESH, local_dispatches=True
    ),
    "HG-14h": _blocked(
        "act", "KNOWN false", "stale context, refreshed good", dispatches=_REFRESH, local_dispatches=True
    ),
    "HG-15": Expect(
        "completed",
        ("continue", "continue"),
        dead_letters={"privacy_violation": 1},
        canary=True,
        story="planner summary and privacy",
    ),
    "HG-16": _blocked(
        "act",
        "UNKNOWN",
        "unknown state, ask the user",
        dispatches=(frozenset({"voice_content.speak"}),),
        local_dispatches=True,
        says=RECHECK,
    ),
}
