"""The presenter (§9.5): every sentence it can say, in ko and en, is free of keys, IDs, ``_ms``
values, coordinates and evidence numbers; and the planner summary projector (§9.3)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from supervisor.presenter import (
    SENTENCES,
    every_sentence,
    precondition_question,
    speakable_room,
    state_sentences,
    user_question,
)
from supervisor.summary import planner_summary
from topics.context import DOMAIN_TABLE, KeptEnvelope
from topics.plans import AIR_CARE_PRECONDITIONS, guardian_plan
from topics.records import FORBIDDEN_KEYS
from topics.registry import load_registry

NOW = 1_785_400_000_000
ROOMS = (None, "거실", "안방", "living room", "2", "area_2", "room7", "x" * 40, "a\u202eb", "Kitchen")
SNAKE = re.compile(r"[a-z0-9]+_[a-z0-9_]+")
ID_LIKE = re.compile(r"\b[A-Za-z]*[0-9][A-Za-z0-9_.:-]*\b")


def clean(sentence: str) -> None:
    assert not SNAKE.search(sentence), sentence
    assert "_ms" not in sentence and "_" not in sentence, sentence
    assert not ID_LIKE.search(sentence), sentence  # no IDs, numbers of evidence or coordinates
    assert not any(ch.isdigit() for ch in sentence), sentence
    assert "{" not in sentence and "}" not in sentence, sentence
    assert all(not ch.isascii() or ch.isprintable() for ch in sentence), sentence
    lowered = sentence.lower()
    for word in ("area", "domain", "stale", "unknown", "known", "true", "false", "null", "none"):
        assert not re.search(rf"\b{word}\b", lowered), (word, sentence)


def test_every_sentence_in_both_languages_is_clean() -> None:
    sentences = list(every_sentence(ROOMS))
    assert len(sentences) == 2 * len(SENTENCES) * len(ROOMS)
    for sentence in sentences:
        clean(sentence)


def test_the_table_of_the_contract() -> None:
    assert SENTENCES["room"]["ko"].format(room="거실") == "현재 거실에 있습니다."
    assert SENTENCES["air_poor"]["ko"] == "현재 공기질이 좋지 않은 편입니다."
    assert SENTENCES["air_poor"]["en"] == "The air quality is poor right now."
    assert SENTENCES["battery_low"]["ko"] == "긴 작업 전에는 충전하는 편이 안전합니다."
    assert SENTENCES["battery_low"]["en"] == "It is safer to charge before a long task."
    assert SENTENCES["recheck"]["ko"] == "현재 상태를 다시 확인해야 합니다."
    assert SENTENCES["recheck"]["en"] == "I need to check the current state again."


@pytest.mark.parametrize("name", ["2", "area_2", "room7", "exp_guardian_001", "", "  ", "a\u202eb", "x" * 40])
def test_ids_and_keys_are_never_spoken_as_room_names(name: str) -> None:
    assert speakable_room(name) is None
    for language in ("ko", "en"):
        text = user_question("verification_failed", name, language)  # type: ignore[arg-type]
        clean(text)
        assert ("집 안" in text) if language == "ko" else ("your home" in text)


def test_the_person_question_names_the_room() -> None:
    assert "거실" in user_question("verification_failed", "거실", "ko")
    assert user_question("verification_timed_out", "안방", "en").startswith(
        "We could not verify the person seen in 안방"
    )


def _env(
    domain: str, data: dict[str, Any], *, age: int = 5, available: bool = True, **kw: Any
) -> KeptEnvelope:
    ttl = DOMAIN_TABLE[domain].default_ttl_ms
    return KeptEnvelope(
        NOW - age, 1, ttl, available, kw.get("exposure", "summary"), kw.get("sensitivity", "normal"), data
    )


_DATA = {
    "movement": st.fixed_dictionaries(
        {"state": st.sampled_from(["idle", "moving"]), "current_area_id": st.sampled_from(["2", "3", "9"])},
        optional={"x": st.floats(-5, 5), "theta": st.floats(-3, 3)},
    ),
    "air_quality": st.fixed_dictionaries(
        {},
        optional={
            "grade": st.sampled_from(["good", "moderate", "bad", "very_bad"]),
            "pm25": st.floats(0, 500),
        },
    ),
    "battery": st.fixed_dictionaries(
        {},
        optional={
            "estimated_work_budget": st.sampled_from(["low", "medium", "high"]),
            "level_pct": st.integers(0, 100),
        },
    ),
}


@st.composite
def contexts(draw: st.DrawFn) -> dict[str, KeptEnvelope]:
    out: dict[str, KeptEnvelope] = {}
    for domain, data in _DATA.items():
        kind = draw(st.sampled_from(["fresh", "stale", "unavailable", "missing"]))
        if kind == "missing":
            continue
        ttl = DOMAIN_TABLE[domain].default_ttl_ms
        out[domain] = _env(
            domain, draw(data), age=ttl * 3 if kind == "stale" else 5, available=kind != "unavailable"
        )
    return out


@settings(max_examples=200, deadline=None)
@given(contexts(), st.sampled_from(["ko", "en"]))
def test_every_composed_sentence_is_clean(context: dict[str, KeptEnvelope], language: str) -> None:
    text = precondition_question(
        AIR_CARE_PRECONDITIONS,
        context,
        NOW,
        plan_area_names={"2": "거실"},
        language=language,  # type: ignore[arg-type]
    )
    clean(text)
    # anything stale, unavailable or missing that the condition reads is said as "check again"
    recheck = SENTENCES["recheck"][language]  # type: ignore[index]
    assert recheck in text


def test_state_sentences_say_what_is_known() -> None:
    context = {
        "movement": _env("movement", {"current_area_id": "2", "x": 1.5}),
        "air_quality": _env("air_quality", {"grade": "very_bad", "pm25": 88.0}),
        "battery": _env("battery", {"estimated_work_budget": "low", "level_pct": 12}),
    }
    said = state_sentences(
        context,
        NOW,
        paths=["air_quality.grade", "battery.estimated_work_budget"],
        names={"2": "거실"},
        language="ko",
    )
    assert said == [
        "현재 거실에 있습니다.",
        "현재 공기질이 좋지 않은 편입니다.",
        "긴 작업 전에는 충전하는 편이 안전합니다.",
    ]


# -- the planner summary (§9.3) -------------------------------------------------------------------

REGISTRY = load_registry()


AB = {"area_id": "9", "area_name": "Ab"}


def test_the_summary_projects_semantic_state_only() -> None:
    plan = guardian_plan("airbot-0001")
    plan["allowed_action_contracts"].append("air_cleaning.start_room_cleaning")
    context = {
        "movement": _env("movement", {"state": "moving", "current_area_id": "2", "x": 1.0, "theta": 3}),
        "map": _env("map", {"areas": [{"area_id": "2", "area_name": "Living"}, AB]}),
        "battery": _env("battery", {"level_pct": 50, "estimated_work_budget": "high"}),
        "air_quality": _env("air_quality", {"grade": "bad", "pm25": 80.0, "co2_ppm": 900}, age=400_000),
        "streaming": _env("streaming", {"live_view_active": True}),
        "network": _env("network", {}, available=False),
        "security": _env("security", {"stage": "patrolling"}, exposure="internal"),
        "vision": _env("vision", {"person_present": True}, sensitivity="sensitive"),
        "schedule": _env("schedule", {"busy": True}),  # not read by any capability in play
    }  # fmt: skip
    summary = planner_summary(plan, context, NOW, REGISTRY)
    assert summary["summary"] == "planner_context_summary.v2"
    domains = summary["domains"]
    assert set(domains) == {"movement", "map", "battery", "air_quality", "network"}
    assert domains["movement"]["data"] == {"state": "moving", "current_area": "Living"}
    assert domains["map"]["data"] == {"areas": ["Living", "Ab"]}
    assert domains["battery"] == {"state": "fresh", "age_ms": 5, "data": {"estimated_work_budget": "high"}}
    assert domains["air_quality"] == {"state": "stale", "age_ms": 400_000, "data": {"grade": "bad"}}
    assert domains["network"] == {"state": "unavailable", "age_ms": 5}


@settings(max_examples=150, deadline=None)
@given(contexts())
def test_no_summary_ever_holds_raw_or_forbidden_values(context: dict[str, KeptEnvelope]) -> None:
    plan = guardian_plan("airbot-0001")
    plan["allowed_action_contracts"].append("air_cleaning.start_room_cleaning")
    summary = planner_summary(plan, context, NOW, REGISTRY)
    for domain, entry in summary["domains"].items():
        assert entry["state"] in ("fresh", "stale", "unavailable")
        env = context[domain]
        assert (entry["state"] == "stale") == (env.available and not env.is_fresh(NOW))
        data = entry.get("data", {})
        if entry["state"] == "unavailable":
            assert "data" not in entry
        for key in data:
            assert key not in ("x", "y", "theta", "pm25", "pm10", "co2_ppm", "level_pct")
            assert key.casefold() not in FORBIDDEN_KEYS
        if "current_area" in data:
            assert data["current_area"] in ("거실", "안방", "주방")  # the plan's names
        if "current_area_id" in data:
            assert data["current_area_id"] == "9"  # an ID only where no name exists
    assert "streaming" not in summary["domains"]


def _sample(spec: Any) -> Any:
    return {
        "bool": True,
        "enum": spec.values[0] if spec.values else "x",
        "id": "2",
        "str": "text",
        "int": spec.max if spec.max is not None else 7,
        "number": 1.5,
        "area_list": [{"area_id": "2", "area_name": "거실"}],
    }[spec.type]


@pytest.mark.parametrize("stale", [False, True])
def test_every_domain_projects_state_keys_only(stale: bool) -> None:
    everything = {"allowed_action_contracts": [f"{c}.any" for c in REGISTRY.capabilities]}
    context = {}
    for name, domain in DOMAIN_TABLE.items():
        data = {k: _sample(spec) for k, spec in domain.keys.items()}
        context[name] = _env(name, data, age=domain.default_ttl_ms + 1 if stale else 1)
    summary = planner_summary(everything, context, NOW, REGISTRY)["domains"]
    read = {d for cap in REGISTRY.capabilities.values() for d in cap.context_reads}
    assert set(summary) == read - {"streaming"}
    assert "streaming" not in summary and "schedule" not in summary  # nothing in play reads it
    for name, entry in summary.items():
        assert entry["state"] == ("stale" if stale else "fresh")
        shown = set(entry.get("data", {}))
        state_keys = {k for k, spec in DOMAIN_TABLE[name].keys.items() if spec.projected}
        # grounding and evidence keys never; an area ID shown as its room name
        assert shown == {"current_area" if k == "current_area_id" else k for k in state_keys}, name
        if "current_area" in shown:
            assert entry["data"]["current_area"] == "거실"
        if name == "map":
            assert entry["data"]["areas"] == ["거실"]


def test_a_domain_from_a_clock_ahead_is_left_out_of_the_summary() -> None:
    plan = guardian_plan("airbot-0001")
    context = {"battery": _env("battery", {"estimated_work_budget": "high"}, age=-60_000)}
    assert planner_summary(plan, context, NOW, REGISTRY)["domains"] == {}
