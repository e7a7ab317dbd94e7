"""Free text in names never reaches a dead letter (docs/CONTRACTS.md §10): a name that is not an
identifier (``[A-Za-z0-9_.-]{1,64}``) is shown by its hash, by one function
(:func:`topics.hostile.safe_key`), in ``detail``, ``offending_paths`` and the redacted payload copy
alike: the condition validator's key names, combinator names, paths and ``$args`` values, and every
key of a payload copy."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest

from tests.unit.seed_records import SEED_OBSERVATION, SEED_PLAN
from topics.conditions import condition_problems
from topics.gate import Gate, Rejected
from topics.hostile import safe_key
from topics.registry import load_registry

GATE = Gate(load_registry())
SECRET = "my alarm code 4711"
HASHED = safe_key(SECRET)
LEAF = {"path": "battery.charging", "op": "is_true"}


def test_safe_key_is_the_name_itself_only_for_an_identifier() -> None:
    assert safe_key("battery.charging") == "battery.charging" and safe_key("a-b_c.9") == "a-b_c.9"
    assert HASHED.startswith("<key:") and HASHED.endswith(">") and len(HASHED) == 14
    for name in (SECRET, "$args.room", "x" * 65, "", "pin\u200b", "a:b"):
        assert safe_key(name).startswith("<key:"), name


CONDITIONS: list[tuple[Any, str]] = [
    ({**LEAF, SECRET: 1}, f"unknown field '{HASHED}'"),  # a key name
    ({SECRET: [LEAF]}, f"unknown combinator '{HASHED}'"),  # a combinator name
    ({"all": [{"path": SECRET, "op": "equals", "value": 1}]}, f"unknown path '{HASHED}'"),  # a path
    (  # an $args value (a plan's precondition reads no request's args)
        {"path": "map.areas", "op": "contains", "value": "$args." + SECRET},
        f"'$args.{HASHED}' names no argument",
    ),
]


@pytest.mark.parametrize(("cond", "expected"), CONDITIONS)
def test_condition_validation_names_free_text_by_its_hash(cond: Any, expected: str) -> None:
    problems = condition_problems(cond)
    assert any(expected in p for p in problems), problems
    assert not any("4711" in p or "alarm" in p for p in problems), problems


def test_identifier_names_stay_readable_in_condition_problems() -> None:
    assert condition_problems({**LEAF, "colour": 1}) == ["condition: unknown field 'colour'"]
    assert condition_problems({"some": [LEAF]}) == ["condition: unknown combinator 'some'"]
    assert condition_problems({"path": "battery.mood", "op": "is_true"}) == [
        "condition.path: unknown path 'battery.mood'"
    ]


def rejected(kind: Any, doc: dict[str, Any]) -> Any:
    verdict = GATE.admit(
        kind, b"airbot-0001", orjson.dumps(doc), source_topic="t", partition=0, offset=0, received_at_ms=1
    )
    assert isinstance(verdict, Rejected)
    return verdict.dead_letter


@pytest.mark.parametrize(("cond", "expected"), CONDITIONS)
def test_a_plans_preconditions_dead_letter_holds_no_free_text(cond: Any, expected: str) -> None:
    plan = {**copy.deepcopy(SEED_PLAN), "preconditions": cond, "on_unknown": "block"}
    letter = rejected("plans", plan)
    assert letter.reason_code == "plan_invalid" and expected in letter.detail
    shown = orjson.dumps(letter.model_dump(mode="json")).decode()
    assert "4711" not in shown and "alarm" not in shown, shown


def test_a_payload_copy_names_free_text_keys_as_detail_does() -> None:
    """One name, one form: the key the detail names by its hash is that very hash in the copy."""
    data = copy.deepcopy(SEED_OBSERVATION)
    data[SECRET] = "x"
    data["correlation"][SECRET] = {"nested " + SECRET: 1}
    letter = rejected("observations", data)
    assert letter.reason_code == "schema_invalid"
    assert HASHED in letter.offending_paths
    assert letter.payload is not None
    copied = orjson.loads(letter.payload)
    assert copied[HASHED] is None and copied["correlation"][HASHED] is None
    assert copied["event_id"] == data["event_id"]  # identifiers kept, with their defined values
    assert "4711" not in letter.payload and "alarm" not in letter.payload


def test_a_plans_free_text_key_in_its_args_is_hashed_in_the_payload_copy() -> None:
    plan = copy.deepcopy(SEED_PLAN)
    plan["steps"][0]["args"] = {SECRET: "x", "area_ids": ["2"]}
    plan["steps"][0]["capability"] = "no_such_capability"
    letter = rejected("plans", plan)
    assert letter.reason_code == "plan_invalid" and letter.payload is not None
    step = orjson.loads(letter.payload)["steps"][0]
    assert step["args"] == {HASHED: None, "area_ids": ["2"]}
