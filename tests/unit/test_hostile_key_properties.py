"""Property tests: Kafka keys of any size and bytes, and conditions (plan ``preconditions``, catalog
``requires``) of any shape, through the gate and the core (docs/CONTRACTS.md §2, §9.2, §10).

- nothing raises, whatever the key or the condition;
- every output record (dead letters included) encodes within 900 KB, key and value, far below
  Kafka's default message limit, without the worker's last resort (``output_invalid``) being
  needed; a dead letter's key is bounded;
- no name that is not an identifier (a condition's key names, combinators, paths, ``$args``
  values) appears verbatim in any output, nor in the problems the validator reports.
"""

from __future__ import annotations

import copy
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.core import Pipeline
from pipeline.runner import MemoryStore, Processor
from supervisor import rules
from tests.unit.hostile_documents import SEEDS, mutate
from tests.unit.seed_records import ENVELOPE, SEED_PLAN
from topics.conditions import condition_problems, evaluate
from topics.context import ContextView, KeptEnvelope
from topics.envelope import Out
from topics.hostile import safe_key
from topics.kafka_key import MAX_KEY_BYTES, shown_key
from topics.outbound import Cause, encode_output
from topics.records import DeadLetter
from topics.registry import load_registry

REGISTRY = load_registry()
DEVICE = "airbot-0001"
T = 1785400000100
#: every output record stays below this (key and value): Kafka's default limit is 1,048,588 bytes
ROOM = 900_000
CAUSE = Cause("guardian.plans", 0, 0, b"{}", T)
SOME = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
#: a marker no output of Guardian holds otherwise: every free-text name carries it
MARK = "\u00a7"

# -- strategies --------------------------------------------------------------------------------

kafka_key = st.one_of(
    st.just(DEVICE.encode()),
    st.binary(max_size=MAX_KEY_BYTES + 8),
    # long keys: a short pattern repeated up to ~1.6 MB (control characters, invalid UTF-8, text)
    st.builds(lambda unit, n: unit * n, st.binary(min_size=1, max_size=8), st.integers(1, 200_000)),
    st.builds(lambda n: b"\x01" * n, st.integers(MAX_KEY_BYTES - 2, 170_000)),
    st.text(max_size=300).map(lambda t: t.encode("utf-8")),
    st.none(),
)
str_key = st.text(st.characters(codec=None, exclude_categories=()), max_size=300)
free_name = st.text(max_size=12).map(lambda t: MARK + t)
some_name = st.one_of(free_name, st.sampled_from(["path", "op", "value", "all", "any", "not", "colour"]))
known_path = st.sampled_from(
    ["battery.charging", "air_quality.grade", "battery.estimated_work_budget", "map.areas",
     "battery.level_pct", "movement.x", "vision.low_light", "network.last_success_ms"]
)  # fmt: skip
op = st.sampled_from(["equals", "not_equals", "in", "not_in", "lt", "lte", "gt", "gte", "is_true", "is_false",
                      "contains", "matches"])  # fmt: skip
scalar = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**53), 2**53), st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(["low", "bad", "very_bad", "2", "$args.area_id", "$args.room"]),
    free_name, free_name.map(lambda n: "$args." + n),
)  # fmt: skip
leaf_value = st.one_of(scalar, st.lists(scalar, max_size=4))


@st.composite
def leaf(draw: st.DrawFn) -> dict[str, Any]:
    node: dict[str, Any] = {"path": draw(st.one_of(known_path, free_name)), "op": draw(op)}
    if draw(st.booleans()):
        node["value"] = draw(leaf_value)
    for _ in range(draw(st.integers(0, 1))):
        node[draw(some_name)] = draw(scalar)
    return node


valid_leaf = st.one_of(
    st.builds(lambda o: {"path": "battery.charging", "op": o}, st.sampled_from(["is_true", "is_false"])),
    st.builds(
        lambda o, v: {"path": "battery.estimated_work_budget", "op": o, "value": v},
        st.sampled_from(["equals", "not_equals"]),
        st.sampled_from(["low", "medium", "high"]),
    ),
    st.builds(
        lambda o, v: {"path": "air_quality.grade", "op": o, "value": v},
        st.sampled_from(["in", "not_in"]),
        st.lists(st.sampled_from(["good", "moderate", "bad", "very_bad"]), min_size=1, max_size=3),
    ),
    st.builds(
        lambda v: {"path": "map.areas", "op": "contains", "value": v}, st.sampled_from(["2", "$args.area_id"])
    ),
)
#: conditions the validator accepts (``$args`` ones only with the args): admitted, then evaluated
valid_condition = st.recursive(
    valid_leaf,
    lambda inner: st.one_of(
        st.builds(lambda parts: {"all": parts}, st.lists(inner, min_size=1, max_size=3)),
        st.builds(lambda parts: {"any": parts}, st.lists(inner, min_size=1, max_size=3)),
        st.builds(lambda part: {"not": part}, inner),
    ),
    max_leaves=6,
)
hostile_condition = st.recursive(
    st.one_of(leaf(), scalar),
    lambda inner: st.one_of(
        st.builds(lambda parts: {"all": parts}, st.lists(inner, max_size=4)),
        st.builds(lambda parts: {"any": parts}, st.lists(inner, max_size=4)),
        st.builds(lambda part: {"not": part}, inner),
        st.builds(lambda name, part: {name: part}, some_name, st.one_of(inner, st.lists(inner, max_size=3))),
        st.dictionaries(some_name, inner, max_size=3),
    ),
    max_leaves=12,
)
condition = st.one_of(valid_condition, hostile_condition)
battery = st.fixed_dictionaries(
    {
        "charging": st.booleans(),
        "estimated_work_budget": st.sampled_from(["low", "medium", "high"]),
        "level_pct": st.integers(0, 100),
    }
)

# -- checks ------------------------------------------------------------------------------------


def names_in(cond: Any) -> set[str]:
    """Every free-text name (carrying :data:`MARK`) of a condition: key names (combinators among
    them), paths and ``$args`` values. (Other values are no names: a redacted copy keeps a defined
    field's value, and a condition that is a bare string is the value of ``preconditions``.)"""
    found: set[str] = set()
    stack = [cond]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            found.update(k for k in node if MARK in k)
            for k, v in node.items():
                named = k == "path" or (k == "value" and isinstance(v, str) and v.startswith("$args."))
                if named and isinstance(v, str) and MARK in v:
                    found.add(v)
                stack.append(v)
        elif isinstance(node, list):
            stack.extend(node)
    return found


def strings_of(doc: Any) -> list[str]:
    """Every key and string value of a parsed document, and of a dead letter's payload copy."""
    found: list[str] = []
    stack = [doc]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            found.extend(node)
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, str):
            found.append(node)
    return found


def check_outputs(outs: list[Out]) -> list[str]:
    """Every output fits with room to spare as the core built it; returns their strings."""
    texts: list[str] = []
    for out in outs:
        encoded = encode_output(out, CAUSE)
        assert encoded.refused is None, encoded.refused
        assert len(encoded.value) + len(encoded.key or b"") < ROOM
        assert out.key is None or len(out.key.encode("utf-8")) <= MAX_KEY_BYTES
        texts.extend(strings_of(out.value))
        if out.kind == "deadletter":
            letter = DeadLetter.model_validate(out.value)
            if letter.payload is not None:
                texts.extend(strings_of(orjson.loads(letter.payload)))
    return texts


# -- properties --------------------------------------------------------------------------------


@SOME
@given(st.sampled_from(sorted(SEEDS)), st.data(), kafka_key)
def test_any_kafka_key_gives_outputs_that_fit(kind: str, data: st.DataObject, key: bytes | None) -> None:
    raw = data.draw(st.one_of(st.just(orjson.dumps(SEEDS[kind])), mutate(SEEDS[kind])))
    processor = Processor(REGISTRY, Pipeline(REGISTRY, language="en"), rules.decide)
    store = MemoryStore()
    processor.process(store, "plans", DEVICE.encode(), orjson.dumps(SEED_PLAN), "guardian.plans", 0, 0, T)  # type: ignore[arg-type]
    done = processor.process(store, kind, key, raw, f"guardian.{kind}", 0, 1, T + 1)  # type: ignore[arg-type]
    check_outputs(done.outs)
    for out in done.outs:
        if out.kind == "deadletter" and out.value["source_topic"] == f"guardian.{kind}":
            assert out.key == out.value["key"] == shown_key(key)
            if key is not None and len(key) > MAX_KEY_BYTES:
                assert out.value["reason_code"] == "key_invalid"


@SOME
@given(str_key)
def test_any_str_key_is_shown_bounded(key: str) -> None:
    """Keys given as text (a replay's export): lone surrogates and all, shown as UTF-8 text of at
    most 256 bytes, and a record under one is judged without raising."""
    shown = shown_key(key)
    assert shown is not None and len(shown.encode("utf-8")) <= MAX_KEY_BYTES
    processor = Processor(REGISTRY, Pipeline(REGISTRY, language="en"), rules.decide)
    done = processor.process(MemoryStore(), "plans", key, orjson.dumps(SEED_PLAN), "guardian.plans", 0, 0, T)  # type: ignore[arg-type]
    check_outputs(done.outs)


@SOME
@given(condition, st.sampled_from([None, "refresh", "ask_user", "block"]), st.one_of(st.none(), battery))
def test_any_preconditions_are_judged_without_raising_or_leaking_names(
    cond: Any, on_unknown: str | None, charged: dict[str, Any] | None
) -> None:
    plan = copy.deepcopy(SEED_PLAN)
    plan["preconditions"] = cond
    if on_unknown is not None:
        plan["on_unknown"] = on_unknown
    processor = Processor(REGISTRY, Pipeline(REGISTRY, language="en"), rules.decide)
    store = MemoryStore()
    texts: list[str] = []
    if charged is not None:
        env = {**copy.deepcopy(ENVELOPE), "data": charged}
        env["freshness"] = {**env["freshness"], "observed_at_ms": T - 10, "ttl_ms": 60_000}
        ctx = {"device_id": DEVICE, "observed_at_ms": T - 10, "domains": {"battery": env}}
        done = processor.process(
            store, "device-context", DEVICE.encode(), orjson.dumps(ctx), "g.device-context", 0, 0, T - 5
        )  # type: ignore[arg-type]
        texts += check_outputs(done.outs)
    for offset, at in ((0, T), (1, T + 100)):  # the plan, and the same plan read again later
        done = processor.process(
            store, "plans", DEVICE.encode(), orjson.dumps(plan), "g.plans", 0, offset, at
        )  # type: ignore[arg-type]
        texts += check_outputs(done.outs)
    texts += check_outputs(processor.confirm_quiet(store, DEVICE, T + 11_000).outs)
    secrets = names_in(cond)
    leaked = [(name, text) for name in secrets for text in texts if name in text]
    assert not leaked, leaked


@SOME
@given(condition, st.lists(st.sampled_from(["area_id", "room", MARK + "x"]), max_size=2), battery)
def test_any_requires_is_validated_without_raising_or_leaking_names(
    cond: Any, args: list[str], charged: dict[str, Any]
) -> None:
    problems = condition_problems(cond, args=args)
    secrets = names_in(cond)
    assert not [(name, p) for name in secrets for p in problems if name in p]
    for p in problems:
        # every name the validator shows is an identifier or a hash
        assert MARK not in p, p
    if not problems:
        env = KeptEnvelope(T - 10, 1, 60_000, True, "summary", "normal", charged)
        view: ContextView = {"battery": env}
        result = evaluate(cond, view, T, args={"area_id": "2", "room": 3})
        assert result.state in ("KNOWN", "STALE", "UNKNOWN")
        assert not [(name, r) for name in secrets for r in result.reasons if name in r]


def test_the_strategies_reach_free_text_names_in_each_writer() -> None:
    """The names the properties generate are exactly those the writers must hash."""
    assert safe_key(MARK + "x") != MARK + "x"
    problems = condition_problems({"all": [{"path": MARK + "p", "op": "equals", "value": 1}]})
    assert problems == [f"condition.all.0.path: unknown path '{safe_key(MARK + 'p')}'"]
