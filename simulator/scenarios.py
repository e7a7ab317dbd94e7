"""The stories of docs/SCENARIOS.md as device-side scripts, and the outcome each must produce.

A scenario is a :class:`Story`: beats anchored to a point of the patrol (the n-th area the device
patrols, a fraction of the way through it), each beat a small device action (an observation, an
invalid record, a disconnect, a bridge restart, ...) at an offset after its anchor. Stories are
pure data built from a seeded RNG, so the same seed gives the same script. :data:`EXPECTED` is the
one table of what the pipeline must answer per scenario; :func:`check` compares an experience's
observed outputs with it.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

SCENARIO_IDS: tuple[str, ...] = tuple(f"HG-{n:02d}" for n in range(1, 13))

#: Beat kinds a device knows how to play.
BEAT_KINDS = (
    "observe",  # params: type, facts, scoped (bool), cross_device (bool), person (bool)
    "state",  # params: fact changes of the device's own state (low_light, voice, person)
    "invalid",  # params: variant (bbox, nested_pin, unknown_contract, too_large, not_json)
    "disconnect",  # the AWS IoT session drops: the outbox buffers
    "reconnect",  # the session returns: the buffer is relayed (late)
    "restart",  # the device bridge restarts: its outbox relays the last 50 records again
)


@dataclass(frozen=True)
class Beat:
    """One device action ``after_ms`` (simulated) after its anchor."""

    after_ms: int
    kind: str
    params: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Anchor:
    """Beats that start when the device is ``fraction`` of the way through its ``leg``-th area (0-based)."""

    leg: int
    fraction: float
    beats: tuple[Beat, ...]


@dataclass(frozen=True)
class Story:
    """A scenario as the device plays it."""

    scenario: str
    anchors: tuple[Anchor, ...] = ()
    #: the device pairs with another device's experience (HG-12)
    needs_partner: bool = False

    def anchors_for(self, leg: int) -> list[Anchor]:
        return [a for a in self.anchors if a.leg == leg]


def _person(area: str) -> Beat:
    """A person appears in ``area`` (the device's own state follows: its routine reports say so)."""
    facts = {"area_id": area, "presence": "detected", "verification_state": "pending", "light": "normal"}
    return Beat(0, "observe", {"type": "security.person_detected", "facts": facts, "person": True})


def _obs(after_ms: int, type_: str, facts: Mapping[str, Any], **extra: Any) -> Beat:
    return Beat(after_ms, "observe", {"type": type_, "facts": dict(facts), **extra})


def build_story(scenario: str, rng: random.Random, areas: Sequence[str]) -> Story:
    """The device-side script of ``scenario`` for a device patrolling ``areas`` (seeded by ``rng``)."""
    if scenario not in SCENARIO_IDS:
        raise ValueError(f"unknown scenario {scenario!r}: use one of {', '.join(SCENARIO_IDS)}")
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


def scenario_for(index: int, scenarios: Sequence[str], mix: bool) -> str:
    """The scenario of the ``index``-th device: round-robin over every scenario (mix) or the given ones."""
    pool: Sequence[str] = SCENARIO_IDS if mix or not scenarios else scenarios
    return pool[index % len(pool)]


# ------------------------------------------------------------------------------------------------
# Expected outcomes (docs/SCENARIOS.md, with the deterministic rules supervisor)
# ------------------------------------------------------------------------------------------------

STOP_AND_RETURN = frozenset({"security_patrol.stop", "movement.return_to_station"})
#: dead letter reasons whose letter must never carry a copy of the payload (docs/CONTRACTS.md §10)
NO_PAYLOAD_REASONS = frozenset({"not_json", "too_large", "privacy_violation", "fact_invalid"})


@dataclass(frozen=True)
class Expect:
    """What one experience of a scenario must produce."""

    status: str
    #: decision kinds in order
    decisions: tuple[str, ...] = ()
    #: reason codes that must appear, by decision index
    decision_reasons: Mapping[int, str] = field(default_factory=dict)
    #: allowed backends (None: any)
    backends: frozenset[str] | None = None
    #: each dispatch's set of "capability.operation", in order
    dispatches: tuple[frozenset[str], ...] = ()
    #: dispatches are local actions (decision_id null)
    local_dispatches: bool = False
    #: dead letters of the device, by reason (exact)
    dead_letters: Mapping[str, int] = field(default_factory=dict)
    #: timeline drops of the experience that must appear at least this often
    drops_min: Mapping[str, int] = field(default_factory=dict)
    #: physical evidence that must precede the end entry
    evidence_before_end: tuple[str, ...] = ("security.stopped", "movement.station_charging")
    #: the ask_user question names the area in words
    speaks_area: bool = False
    #: the scenario's forbidden canary value must appear in no output
    canary: bool = False
    #: a short description for tables
    story: str = ""


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


@dataclass
class Observed:
    """The pipeline's outputs about one experience (and its device's dead letters)."""

    status: str | None = None
    decisions: list[dict[str, Any]] = field(default_factory=list)
    dispatches: list[dict[str, Any]] = field(default_factory=list)
    timeline: list[dict[str, Any]] = field(default_factory=list)
    dead_letters: list[dict[str, Any]] = field(default_factory=list)
    #: output records delivered again with the same identity and other contents
    conflicts: list[str] = field(default_factory=list)


def expected_for(scenario: str, *, device_context: bool) -> Expect:
    """What ``scenario`` must produce; without device context a replan's moves fail their
    ``requires`` (fail-closed) and are left out, so HG-04 then dispatches nothing (HG-04-B)."""
    expect = EXPECTED[scenario]
    if scenario == "HG-04" and not device_context:
        return replace(expect, dispatches=(), drops_min={**expect.drops_min, "condition_not_met": 1})
    return expect


def check(
    expect: Expect,
    seen: Observed,
    *,
    area_names: Mapping[str, str] | None = None,
    canary_leaked: bool = False,
    foreign_refs: Sequence[str] = (),
) -> list[str]:
    """Every way ``seen`` misses ``expect`` (empty: the scenario met its outcome)."""
    problems: list[str] = list(seen.conflicts)
    if seen.status != expect.status:
        problems.append(f"status {seen.status or 'active'} != {expect.status}")
    kinds = tuple(str(d.get("decision")) for d in seen.decisions)
    if kinds != expect.decisions:
        problems.append(f"decisions {list(kinds)} != {list(expect.decisions)}")
    for index, reason in expect.decision_reasons.items():
        if index < len(seen.decisions) and seen.decisions[index].get("reason_code") != reason:
            problems.append(f"decision {index} reason {seen.decisions[index].get('reason_code')} != {reason}")
    if expect.backends is not None:
        bad = sorted({str(d.get("backend")) for d in seen.decisions} - expect.backends)
        if bad:
            problems.append(f"decision backends {bad} not in {sorted(expect.backends)}")
    ops = tuple(
        frozenset(f"{r['capability']}.{r['operation']}" for r in d.get("requests", ()))
        for d in seen.dispatches
    )
    if ops != expect.dispatches:
        problems.append(f"dispatches {[sorted(o) for o in ops]} != {[sorted(o) for o in expect.dispatches]}")
    if expect.local_dispatches and any(d.get("decision_id") is not None for d in seen.dispatches):
        problems.append("a local dispatch carries a decision_id")
    letters = Counter(str(d.get("reason_code")) for d in seen.dead_letters)
    if dict(letters) != dict(expect.dead_letters):
        problems.append(f"dead letters {dict(sorted(letters.items()))} != {dict(expect.dead_letters)}")
    for d in seen.dead_letters:
        if d.get("reason_code") in NO_PAYLOAD_REASONS and d.get("payload") is not None:
            problems.append(f"a {d.get('reason_code')} dead letter carries the payload")
    drops = Counter(str(e.get("drop_reason")) for e in seen.timeline if e.get("stage") == "drop")
    for reason, least in expect.drops_min.items():
        if drops[reason] < least:
            problems.append(f"timeline drops {reason}: {drops[reason]} < {least}")
    problems.extend(_check_timeline(expect, seen))
    if expect.speaks_area:
        problems.extend(_check_speech(seen, area_names or {}))
    if expect.canary and canary_leaked:
        problems.append("the canary value leaked into decisions, dispatch or timeline")
    if foreign_refs:
        problems.append(f"another device's event reached this experience: {sorted(foreign_refs)}")
    return problems


def _check_timeline(expect: Expect, seen: Observed) -> list[str]:
    entries = sorted(seen.timeline, key=lambda e: int(e.get("seq", 0)))
    if not entries:
        return ["no timeline"]
    problems: list[str] = []
    if entries[0].get("stage") != "goal":
        problems.append(f"timeline starts with {entries[0].get('stage')}, not goal")
    ends = [i for i, e in enumerate(entries) if e.get("stage") == "end"]
    if seen.status is not None:
        if len(ends) != 1 or ends[0] != len(entries) - 1:
            problems.append("the end entry is not the last, single one")
        before = entries[: ends[0]] if ends else entries
        signals = {
            str(e.get("summary", "")).removeprefix("evidence: ").split(" ")[0]
            for e in before
            if e.get("stage") == "evidence"
        }
        missing = [s for s in expect.evidence_before_end if s not in signals]
        if missing:
            problems.append(f"ended without physical evidence {missing}")
    return problems


def _check_speech(seen: Observed, area_names: Mapping[str, str]) -> list[str]:
    texts = [str(d.get("tts") or "") for d in seen.dispatches if d.get("tts")]
    if not texts:
        return ["no spoken question"]
    problems: list[str] = []
    for text in texts:
        if not any(name in text for name in area_names.values()):
            problems.append("the spoken question names no area in words")
        if any(ch.isdigit() for ch in text) or "_" in text or "area" in text.lower().split():
            problems.append("the spoken question carries an ID or a raw key")
    return problems
