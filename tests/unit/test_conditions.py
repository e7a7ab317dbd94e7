"""The three-state condition evaluator (§9.2): its validation, its rules, and properties over every
operator and every domain state."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from topics.conditions import Result as CondResult
from topics.conditions import condition_problems, evaluate
from topics.context import DOMAIN_TABLE, KeptEnvelope, KeySpec
from topics.gate import Admitted, Gate, Rejected
from topics.plans import guardian_plan
from topics.registry import load_registry

NOW = 1_785_400_000_000
FRESH_AGE = 10
DOMAIN_STATES = ("fresh", "stale", "unavailable", "missing_domain", "missing_key", "wrong_type")


def env(domain: str, data: dict[str, Any], *, age: int = FRESH_AGE, available: bool = True) -> KeptEnvelope:
    ttl = DOMAIN_TABLE[domain].default_ttl_ms
    return KeptEnvelope(NOW - age, 1, ttl, available, "summary", "normal", data)


# -- validation ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cond", "problem"),
    [
        ({"path": "battery.mood", "op": "equals", "value": "low"}, "unknown path"),
        ({"path": "battery", "op": "equals", "value": "low"}, "unknown path"),
        ({"path": "battery.estimated_work_budget", "op": "roughly", "value": "low"}, "unknown operator"),
        ({"path": "battery.estimated_work_budget", "op": "equals"}, "missing field 'value'"),
        ({"path": "battery.charging", "op": "is_true", "value": True}, "unknown field 'value'"),
        ({"path": "battery.estimated_work_budget", "op": "equals", "value": "plenty"}, "not a value"),
        ({"path": "battery.estimated_work_budget", "op": "in", "value": []}, "non-empty list"),
        ({"path": "battery.estimated_work_budget", "op": "in", "value": ["low", 3]}, "never takes"),
        ({"path": "battery.estimated_work_budget", "op": "lt", "value": 3}, "numeric key"),
        ({"path": "battery.estimated_work_budget", "op": "is_true"}, "boolean key"),
        ({"path": "battery.level_pct", "op": "lt", "value": 20}, "grounding or evidence"),
        ({"path": "movement.x", "op": "gt", "value": 0}, "grounding or evidence"),
        ({"path": "map.areas", "op": "equals", "value": "2"}, "contains applies to map.areas only"),
        ({"path": "battery.charging", "op": "contains", "value": "2"}, "contains applies to map.areas only"),
        ({"path": "map.areas", "op": "contains", "value": "$args.area_id"}, "names no argument"),
        ({"all": []}, "non-empty list"),
        ({"some": [{"path": "battery.charging", "op": "is_true"}]}, "unknown combinator"),
        ({"all": [1]}, "must be an object"),
        (
            {"all": [{"path": "battery.charging", "op": "is_true"}], "any": []},
            "exactly one of all, any, not",
        ),
        (
            {"not": {"not": {"not": {"not": {"path": "battery.charging", "op": "is_true"}}}}},
            "deeper than 4",
        ),
        ({"any": [{"path": "battery.charging", "op": "is_true"}] * 17}, "more than 16 leaves"),
    ],
)
def test_a_bad_condition_is_refused_where_it_is_written(cond: Any, problem: str) -> None:
    problems = condition_problems(cond)
    assert problems and any(problem in p for p in problems), problems


def test_valid_conditions_pass_validation() -> None:
    assert condition_problems({"not": {"not": {"not": {"path": "battery.charging", "op": "is_true"}}}}) == []
    assert condition_problems({"any": [{"path": "battery.charging", "op": "is_true"}] * 16}) == []
    move = {"path": "map.areas", "op": "contains", "value": "$args.area_id"}
    assert condition_problems(move, args=("area_id",)) == []
    assert condition_problems({"path": "air_quality.grade", "op": "in", "value": ["bad", "very_bad"]}) == []


def test_a_plan_with_a_bad_precondition_is_plan_invalid() -> None:
    gate = Gate(load_registry())
    plan = guardian_plan("airbot-0001") | {
        "preconditions": {"path": "battery.estimated_work_budget", "op": "between", "value": "low"},
        "on_unknown": "refresh",
    }
    verdict = gate.admit(
        "plans",
        b"airbot-0001",
        orjson.dumps(plan),
        source_topic="guardian.plans",
        partition=0,
        offset=0,
        received_at_ms=NOW,
    )
    assert isinstance(verdict, Rejected)
    assert verdict.dead_letter.reason_code == "plan_invalid"
    assert "preconditions" in verdict.dead_letter.offending_paths
    plan["preconditions"] = {"path": "battery.estimated_work_budget", "op": "not_equals", "value": "low"}
    ok = gate.admit(
        "plans",
        b"airbot-0001",
        orjson.dumps(plan),
        source_topic="guardian.plans",
        partition=0,
        offset=1,
        received_at_ms=NOW,
    )
    assert isinstance(ok, Admitted)
    plan["on_unknown"] = "guess"
    bad = gate.admit(
        "plans",
        b"airbot-0001",
        orjson.dumps(plan),
        source_topic="guardian.plans",
        partition=0,
        offset=2,
        received_at_ms=NOW,
    )
    assert isinstance(bad, Rejected) and bad.dead_letter.reason_code == "schema_invalid"


# -- the rules, by example ----------------------------------------------------------------------

LOW = {"path": "battery.estimated_work_budget", "op": "not_equals", "value": "low"}
BAD_AIR = {"path": "air_quality.grade", "op": "in", "value": ["bad", "very_bad"]}


def test_a_missing_value_never_makes_not_equals_true() -> None:
    for context in (
        {},
        {"battery": env("battery", {"charging": True})},
        {"battery": env("battery", {"estimated_work_budget": "high"}, available=False)},
        {"battery": env("battery", {"estimated_work_budget": 3})},
    ):
        result = evaluate(LOW, context, NOW)
        assert result.state == "UNKNOWN" and not result.passes


def test_the_domain_is_looked_at_first() -> None:
    stale = {"battery": env("battery", {"estimated_work_budget": "low"}, age=60_001)}
    result = evaluate(LOW, stale, NOW)
    assert result.state == "STALE"
    assert result.describe() == "condition STALE: battery (age 60001 ms > ttl 60000 ms)"
    unavailable = {"battery": env("battery", {}, available=False)}
    assert evaluate(LOW, unavailable, NOW).describe() == "condition UNKNOWN: battery (unavailable)"


def test_combinators_exactly_as_written() -> None:
    context = {
        "air_quality": env("air_quality", {"grade": "good"}),
        "battery": env("battery", {"estimated_work_budget": "low"}, age=70_000),
    }
    # all: KNOWN false wins over STALE
    both = evaluate({"all": [BAD_AIR, LOW]}, context, NOW)
    assert both.label == "KNOWN false" and "air_quality.grade is good" in both.describe()
    # any: STALE before UNKNOWN, when nothing is KNOWN true
    either = evaluate({"any": [BAD_AIR, LOW, {"path": "vision.low_light", "op": "is_true"}]}, context, NOW)
    assert either.state == "STALE" and "vision (no envelope)" in either.describe()
    # not swaps KNOWN and keeps STALE
    assert evaluate({"not": BAD_AIR}, context, NOW).passes
    assert evaluate({"not": LOW}, context, NOW).state == "STALE"


def test_contains_reads_the_request_args() -> None:
    move = {"path": "map.areas", "op": "contains", "value": "$args.area_id"}
    context = {"map": env("map", {"areas": [{"area_id": "2", "area_name": "거실"}]})}
    assert evaluate(move, context, NOW, args={"area_id": "2"}).passes
    absent = evaluate(move, context, NOW, args={"area_id": "3"})
    assert absent.label == "KNOWN false" and "map.areas lacks 3" in absent.describe()


# -- properties ------------------------------------------------------------------------------

_PROJECTED = [
    (f"{d.name}.{k}", spec) for d in DOMAIN_TABLE.values() for k, spec in d.keys.items() if spec.projected
]
_IDS = st.from_regex(r"[a-z0-9]{1,6}", fullmatch=True)


def _value(spec: KeySpec) -> st.SearchStrategy[Any]:
    if spec.type == "bool":
        return st.booleans()
    if spec.type == "enum":
        return st.sampled_from(spec.values)
    if spec.type == "id":
        return _IDS
    if spec.type == "int":
        return st.integers(min_value=spec.min or 0, max_value=spec.max or 10**9)
    if spec.type == "number":
        return st.floats(min_value=-1e6, max_value=1e6)
    return st.lists(
        st.builds(lambda a: {"area_id": a, "area_name": "방"}, _IDS),
        max_size=4,
        unique_by=lambda x: x["area_id"],
    )


def _wrong(spec: KeySpec) -> Any:
    return 5 if spec.type in ("enum", "id", "str", "area_list") else "five"


@st.composite
def leaves(draw: st.DrawFn) -> tuple[dict[str, Any], KeySpec]:
    path, spec = draw(st.sampled_from(_PROJECTED))
    if spec.type == "area_list":
        return {"path": path, "op": "contains", "value": draw(_IDS)}, spec
    ops = ["equals", "not_equals", "in", "not_in"]
    if spec.type == "bool":
        ops += ["is_true", "is_false"]
    if spec.type in ("int", "number"):
        ops += ["lt", "lte", "gt", "gte"]
    op = draw(st.sampled_from(ops))
    if op in ("is_true", "is_false"):
        return {"path": path, "op": op}, spec
    if op in ("in", "not_in"):
        return {"path": path, "op": op, "value": draw(st.lists(_value(spec), min_size=1, max_size=4))}, spec
    return {"path": path, "op": op, "value": draw(_value(spec))}, spec


@st.composite
def leaf_in_state(draw: st.DrawFn) -> tuple[dict[str, Any], str, dict[str, KeptEnvelope]]:
    leaf, spec = draw(leaves())
    domain, _, key = leaf["path"].partition(".")
    state = draw(st.sampled_from(DOMAIN_STATES))
    ttl = DOMAIN_TABLE[domain].default_ttl_ms
    value = draw(_value(spec))
    context: dict[str, KeptEnvelope] = {}
    if state == "fresh":
        context[domain] = env(domain, {key: value}, age=draw(st.integers(0, ttl)))
    elif state == "stale":
        context[domain] = env(domain, {key: value}, age=draw(st.integers(ttl + 1, ttl * 10)))
    elif state == "unavailable":
        context[domain] = env(domain, {key: value}, available=False)
    elif state == "missing_key":
        context[domain] = env(domain, {})
    elif state == "wrong_type":
        context[domain] = env(domain, {key: _wrong(spec)})
    return leaf, state, context


@settings(max_examples=400, deadline=None)
@given(leaf_in_state())
def test_only_a_known_value_can_pass(case: tuple[dict[str, Any], str, dict[str, KeptEnvelope]]) -> None:
    leaf, state, context = case
    assert condition_problems(leaf) == []
    result = evaluate(leaf, context, NOW)
    want = {"fresh": "KNOWN", "stale": "STALE"}.get(state, "UNKNOWN")
    assert result.state == want
    if result.passes:
        assert state == "fresh"
    if state != "fresh":
        assert not result.passes
        assert result.reasons  # the paths and why
        if leaf["op"] in ("not_equals", "not_in"):
            assert not result.passes
        negated = evaluate({"not": leaf}, context, NOW)
        assert negated.state == result.state and not negated.passes


def _reference(parts: list[CondResult], kind: str) -> str:
    labels = [p.label for p in parts]
    decisive, other = ("KNOWN false", "KNOWN true") if kind == "all" else ("KNOWN true", "KNOWN false")
    if decisive in labels:
        return decisive
    for state in ("STALE", "UNKNOWN"):
        if state in labels:
            return state
    return other


@settings(max_examples=200, deadline=None)
@given(st.lists(leaf_in_state(), min_size=1, max_size=5), st.sampled_from(["all", "any"]))
def test_combinators_follow_the_table(
    cases: list[tuple[dict[str, Any], str, dict[str, KeptEnvelope]]], kind: str
) -> None:
    # one context holding every case's domain (the first case for a domain wins, for all of them)
    context: dict[str, KeptEnvelope] = {}
    for _, _, ctx in cases:
        for name, e in ctx.items():
            context.setdefault(name, e)
    leaves_ = [leaf for leaf, _, _ in cases]
    parts = [evaluate(leaf, context, NOW) for leaf in leaves_]
    combined = evaluate({kind: leaves_}, context, NOW)
    assert combined.label == _reference(parts, kind)
    negated = evaluate({"not": {kind: leaves_}}, context, NOW)
    if combined.state != "KNOWN":
        assert negated.state == combined.state and not negated.passes
    else:
        assert negated.value != combined.value


def test_an_envelope_from_a_clock_ahead_is_never_current() -> None:
    ahead = {"battery": env("battery", {"estimated_work_budget": "high"}, age=-60_000)}
    result = evaluate(LOW, ahead, NOW)
    assert result.state == "UNKNOWN" and "clock skew" in result.describe()
    slightly = {"battery": env("battery", {"estimated_work_budget": "high"}, age=-4_000)}
    assert evaluate(LOW, slightly, NOW).passes  # within the 5 s allowance
