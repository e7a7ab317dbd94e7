"""The stories of docs/SCENARIOS.md as device-side scripts, and the outcome each must produce.

A scenario is a :class:`~simulator.story.Story` built from a seeded RNG, so the same seed gives the
same script. The patrol stories (HG-01..HG-12, HG-04-B) are here; the device-context stories
(HG-13..HG-16) in :mod:`simulator.context_stories`. :data:`SCENARIO_IDS` lists the 17 stories;
HG-13 and HG-14 are played as cases, one device each (``HG-13a``..``HG-13e``, ``HG-14f``..``HG-14h``).
:data:`EXPECTED` is the one table of what the pipeline must answer per case; :func:`check` compares
an experience's observed outputs with it.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from simulator.context_stories import CASES, CONTEXT_EXPECTED, CONTEXT_STORIES, build_context_story, case_of
from simulator.expect import STOP_AND_RETURN, Expect, Observed, check
from simulator.story import BEAT_KINDS, Anchor, Beat, Story
from topics.plans import DEFAULT_AREA_NAMES

#: The 17 stories, in the order a mixed fleet plays them.
SCENARIO_IDS: tuple[str, ...] = (
    *(f"HG-{n:02d}" for n in range(1, 5)),
    "HG-04-B",
    *(f"HG-{n:02d}" for n in range(5, 13)),
    *CONTEXT_STORIES,
)
#: Every case a device can play: a story, or one case of a story with cases (HG-13a, ...).
CASE_IDS: tuple[str, ...] = tuple(f"{s}{c}" for s in SCENARIO_IDS for c in (CASES.get(s) or [""]))
#: A mixed fleet's round-robin: each story once (its first case), then the other cases, interleaved
#: so that a fleet of 20 plays five of the eight context cases.
MIX_POOL: tuple[str, ...] = (
    *(f"{s}{CASES[s][0]}" if s in CASES else s for s in SCENARIO_IDS),  # each story's first case
    "HG-13b",
    "HG-14g",
    "HG-13c",
    "HG-14h",
    "HG-13d",
    "HG-13e",
)


def _person(area: str) -> Beat:
    """A person appears in ``area`` (the device's own state follows: its routine reports say so)."""
    facts = {"area_id": area, "presence": "detected", "verification_state": "pending", "light": "normal"}
    return Beat(0, "observe", {"type": "security.person_detected", "facts": facts, "person": True})


def _obs(after_ms: int, type_: str, facts: Mapping[str, Any], **extra: Any) -> Beat:
    return Beat(after_ms, "observe", {"type": type_, "facts": dict(facts), **extra})


def build_story(scenario: str, rng: random.Random, areas: Sequence[str]) -> Story:
    """The device-side script of ``scenario`` (a story or one of its cases, :data:`CASE_IDS`) for a
    device patrolling ``areas`` (seeded by ``rng``)."""
    scenario = first_case(scenario)
    if scenario not in CASE_IDS:
        raise ValueError(f"unknown scenario {scenario!r}: use one of {', '.join(SCENARIO_IDS)}")
    if case_of(scenario)[0] in CONTEXT_STORIES:
        verified = build_story("HG-02", rng, areas)
        return build_context_story(scenario, rng, areas, DEFAULT_AREA_NAMES, verified)
    if scenario == "HG-04-B":
        # HG-04 on a device that never sends its context: the replan's moves fail their requires
        return replace(build_story("HG-04", rng, areas), scenario=scenario, sends_context=False)
    f = round(rng.uniform(0.2, 0.4), 2)
    verify_ms = rng.randrange(2500, 4000, 100)
    a0, a1 = areas[0], areas[1 % len(areas)]
    if scenario == "HG-01":
        return Story(scenario)
    if scenario == "HG-02":
        return Story(
            scenario,
            (
                Anchor(
                    0,
                    f,
                    (
                        _person(a0),
                        _obs(verify_ms // 3, "security.verification_started", {"area_id": a0}),
                        _obs(verify_ms, "security.verification_result", _result("passed", "face", 1)),
                    ),
                ),
            ),
        )
    if scenario in ("HG-03", "HG-10"):
        return Story(
            scenario,
            (
                Anchor(
                    0,
                    f,
                    (
                        _person(a0),
                        _obs(verify_ms // 3, "security.verification_started", {"area_id": a0}),
                        _obs(verify_ms, "security.verification_result", _result("failed", "face", 1)),
                    ),
                ),
                Anchor(
                    1,
                    f,
                    (
                        _obs(0, "security.verification_started", {"area_id": a1}),
                        _obs(verify_ms, "security.verification_result", _result("failed", "pin", 2)),
                    ),
                ),
            ),
        )
    if scenario == "HG-04":
        # true / false / true within 2 s, then it stays true (the device's own light state)
        gap = rng.randrange(400, 700, 50)
        return Story(
            scenario,
            (
                Anchor(
                    0,
                    f,
                    (
                        Beat(0, "state", {"low_light": True}),
                        Beat(gap, "state", {"low_light": False}),
                        Beat(2 * gap, "state", {"low_light": True}),
                    ),
                ),
            ),
        )
    if scenario == "HG-05":
        return Story(
            scenario,
            (Anchor(1, f, (_obs(0, "security.condition_changed", {"battery": "low", "network": "ok"}),)),),
        )
    if scenario == "HG-06":
        return Story(
            scenario,
            (Anchor(0, 0.5, (Beat(0, "disconnect"), Beat(30_000, "reconnect"))),),
        )
    if scenario == "HG-07":
        return Story(
            scenario,
            (Anchor(0, f, (Beat(0, "state", {"voice": True}), Beat(20_000, "state", {"voice": False}))),),
        )
    if scenario == "HG-08":
        return Story(
            scenario,
            (
                Anchor(
                    0,
                    f,
                    (
                        _person(a0),
                        _obs(verify_ms, "security.verification_result", _result("passed", "face", 1)),
                    ),
                ),
                Anchor(
                    1,
                    f,
                    (
                        _person(a1),
                        _obs(verify_ms, "security.verification_result", _result("passed", "face", 1)),
                        _obs(verify_ms + 2000, "user.cancel_requested", {"channel": "app"}, scoped=False),
                    ),
                ),
            ),
        )
    if scenario == "HG-09":
        # the triggers fall inside the last 50 records the outbox relays after the restart
        return Story(
            scenario,
            (
                Anchor(
                    1,
                    f,
                    (
                        _person(a1),
                        _obs(verify_ms, "security.verification_result", _result("passed", "face", 1)),
                    ),
                ),
                Anchor(2, 0.3, (Beat(0, "restart", {"down_ms": rng.randrange(1500, 3000, 100)}),)),
            ),
        )
    if scenario == "HG-11":
        step = rng.randrange(250, 500, 50)
        variants = ("bbox", "nested_pin", "unknown_contract", "too_large", "not_json")
        return Story(
            scenario,
            (Anchor(0, f, tuple(Beat(i * step, "invalid", {"variant": v}) for i, v in enumerate(variants))),),
        )
    # HG-12: an observation correlated to another device's experience
    return Story(
        scenario,
        (
            Anchor(
                1,
                f,
                (
                    _obs(
                        0,
                        "security.person_detected",
                        {"area_id": a1, "presence": "detected", "verification_state": "pending"},
                        cross_device=True,
                    ),
                ),
            ),
        ),
        needs_partner=True,
    )


def _result(outcome: str, method: str, attempt: int) -> dict[str, Any]:
    return {"outcome": outcome, "method": method, "terminal": True, "attempt": attempt}


def first_case(scenario: str) -> str:
    """A story with cases stands for its first case (``HG-13`` -> ``HG-13a``); anything else as is."""
    return f"{scenario}{CASES[scenario][0]}" if scenario in CASES else scenario


def scenario_for(index: int, scenarios: Sequence[str], mix: bool) -> str:
    """The case of the ``index``-th device: round-robin over :data:`MIX_POOL` (mix) or the given stories;
    the k-th device of a story with cases plays its k-th case."""
    if mix or not scenarios:
        return MIX_POOL[index % len(MIX_POOL)]
    story = scenarios[index % len(scenarios)]
    if story not in CASES:
        return story
    k = sum(1 for i in range(index) if scenarios[i % len(scenarios)] == story)
    return f"{story}{CASES[story][k % len(CASES[story])]}"


_ASK_RETURN = ("continue", "ask_user", "return_to_station")
_SPEAK_THEN_RETURN = (frozenset({"voice_content.speak"}), STOP_AND_RETURN)

EXPECTED: dict[str, Expect] = {
    "HG-01": Expect("completed", story="quiet patrol"),
    "HG-02": Expect("completed", ("continue", "continue"), story="person, verification passed"),
    "HG-03": Expect(
        "returned",
        _ASK_RETURN,
        {1: "verification_failed", 2: "user_question_budget_spent"},
        dispatches=_SPEAK_THEN_RETURN,
        speaks_area=True,
        story="person, verification failed twice",
    ),
    "HG-04": Expect(
        "completed",
        ("replan",),
        {0: "low_light"},
        dispatches=(frozenset({"movement.move_to_room"}),),
        drops_min={"debounced": 1},
        story="low light flicker, then replan",
    ),
    "HG-05": Expect(
        "returned",
        ("return_to_station",),
        {0: "battery_low"},
        dispatches=(STOP_AND_RETURN,),
        story="battery low",
    ),
    "HG-06": Expect("completed", drops_min={"stale": 1}, story="AWS IoT disconnect, late relay"),
    "HG-07": Expect(
        "completed",
        dispatches=(frozenset({"security_patrol.pause"}), frozenset({"security_patrol.resume"})),
        local_dispatches=True,
        evidence_before_end=(
            "security.paused",
            "security.resumed",
            "security.stopped",
            "movement.station_charging",
        ),
        story="voice session pause/resume",
    ),
    "HG-08": Expect(
        "aborted",
        ("continue", "continue", "continue", "abort"),
        {3: "user_cancel"},
        dispatches=(STOP_AND_RETURN,),
        drops_min={"budget_exhausted": 1},
        story="user cancel after budget",
    ),
    "HG-09": Expect(
        "completed",
        ("continue", "continue"),
        drops_min={"duplicate": 1, "out_of_order": 1},
        story="outbox re-send after restart",
    ),
    "HG-10": Expect(
        "returned",
        _ASK_RETURN,
        backends=frozenset({"rules", "fallback"}),
        dispatches=_SPEAK_THEN_RETURN,
        speaks_area=True,
        story="model failure (device side as HG-03)",
    ),
    "HG-11": Expect(
        "completed",
        dead_letters={"privacy_violation": 2, "unknown_contract": 1, "too_large": 1, "not_json": 1},
        canary=True,
        story="invalid records",
    ),
    "HG-12": Expect("completed", dead_letters={"cross_device": 1}, story="cross-device correlation"),
}
#: HG-04-B: still replan, its moves left out (condition_not_met), none dispatched or played
EXPECTED["HG-04-B"] = replace(
    EXPECTED["HG-04"],
    dispatches=(),
    drops_min={**EXPECTED["HG-04"].drops_min, "condition_not_met": 1},
    never_played=("movement.move_to_room",),
    story="low light, no device context",
)
EXPECTED.update(CONTEXT_EXPECTED)


def expected_for(scenario: str, *, device_context: bool) -> Expect:
    """What ``scenario`` must produce; without device context a replan's moves fail their
    ``requires`` (fail-closed) and are left out, so HG-04 then dispatches nothing (HG-04-B)."""
    if scenario == "HG-04" and not device_context:
        return EXPECTED["HG-04-B"]
    return EXPECTED[first_case(scenario)]


__all__ = [
    "BEAT_KINDS",
    "CASE_IDS",
    "EXPECTED",
    "MIX_POOL",
    "SCENARIO_IDS",
    "STOP_AND_RETURN",
    "Anchor",
    "Beat",
    "Expect",
    "Observed",
    "Story",
    "build_story",
    "case_of",
    "check",
    "expected_for",
    "first_case",
    "scenario_for",
]
