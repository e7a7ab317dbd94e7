"""Hostile shapes at the gate (§2 rules 7 and 10) and what dead letters may show (§10)."""

from __future__ import annotations

import copy
import hashlib
from typing import Any

import orjson
import pytest

from config.settings import Settings
from guardian.replay import InputRecord, replay_records
from pipeline.core import Pipeline
from pipeline.runner import MemoryStore, Processor
from supervisor import rules
from tests.unit.seed_records import SEED_OBSERVATION, SEED_PLAN, SEED_TASK_EVENT
from topics.gate import Admitted, Gate, GateKind, Rejected
from topics.hostile import key_norm, safe_key
from topics.registry import load_registry

KEY = b"airbot-0001"
GATE = Gate(load_registry())


def admit(value: bytes, kind: GateKind = "observations", key: Any = KEY) -> Admitted | Rejected:
    return GATE.admit(kind, key, value, source_topic="guardian.x", partition=0, offset=1,
                      received_at_ms=1785400000100)  # fmt: skip


def reason(value: bytes, kind: GateKind = "observations", key: Any = KEY) -> str:
    result = admit(value, kind, key)
    return "admitted" if isinstance(result, Admitted) else result.dead_letter.reason_code


def rejected(value: bytes, kind: GateKind = "observations", key: Any = KEY) -> Rejected:
    result = admit(value, kind, key)
    assert isinstance(result, Rejected), result
    # the gate builds the dead letter's JSON form directly: exactly the model's, byte for byte
    assert orjson.dumps(result.value) == result.dead_letter.to_json_bytes()
    return result


def seed_text(seed: dict[str, Any]) -> str:
    return orjson.dumps(seed).decode()


def nested(depth: int) -> Any:
    value: Any = "x"
    for _ in range(depth):
        value = {"k": value}
    return value


# -- repeated keys -----------------------------------------------------------------------------


def test_a_repeated_key_anywhere_is_not_json_and_copies_nothing() -> None:
    # the first facts hide a bbox and a pin; a last-wins parse sees clean facts
    body = seed_text(SEED_OBSERVATION)
    hidden = body.replace('"facts":{', '"facts":{"bbox":[1,2],"pin":"4821"},"facts":{', 1)
    assert reason(hidden.encode()) == "not_json"
    letter = rejected(hidden.encode()).dead_letter
    assert letter.payload is None and "4821" not in letter.to_json_bytes().decode()
    # the same with another key mismatch (a payload reason): still nothing copied
    assert reason(hidden.encode(), key=b"other") == "not_json"
    inner = body.replace('"area_id":"2"', '"area_id":"2","area_id":"3"', 1)
    assert reason(inner.encode()) == "not_json"
    for seed, kind in ((SEED_TASK_EVENT, "task-events"), (SEED_PLAN, "plans")):
        text = seed_text(seed)
        twice = text.replace('"device_id":', '"device_id":"x","device_id":', 1)
        assert reason(twice.encode(), kind) == "not_json"  # type: ignore[arg-type]


def test_colons_inside_values_do_not_hide_or_invent_repeated_keys() -> None:
    data = copy.deepcopy(SEED_OBSERVATION)
    data["event_id"] = "obs:with:colons"
    data["source"] = "Device: a: b"
    assert reason(orjson.dumps(data)) == "admitted"
    text = orjson.dumps(data).decode().replace('"freshness_ms":', '"freshness_ms":1,"freshness_ms":', 1)
    assert reason(text.encode()) == "not_json"
    # a colon spelled as an escape cannot make up for the colon of a repeated key
    escaped = text.replace("obs:with:colons", "obs\\u003awith:colons")
    assert orjson.loads(escaped)["event_id"] == "obs:with:colons"
    assert reason(escaped.encode()) == "not_json"
    hidden = orjson.dumps(data).decode().replace("obs:with:colons", "obs\\u003awith\\u003acolons")
    hidden = hidden.replace('"facts":{', '"facts":{"pin":1},"facts":{', 1)
    assert reason(hidden.encode()) == "not_json"
    event = copy.deepcopy(SEED_TASK_EVENT)
    event["task_id"] = "task:1:2"
    assert reason(orjson.dumps(event), "task-events") == "admitted"
    text = orjson.dumps(event).decode().replace("task:1:2", "task\\u003a1\\u003a2")
    text = text.replace('"evidence":', '"evidence":{"pin":1},"evidence":', 1)
    assert reason(text.encode(), "task-events") == "not_json"


# -- depth and integers ------------------------------------------------------------------------


def test_the_poison_pill_plan_is_refused_and_deep_records_never_raise() -> None:
    plan = copy.deepcopy(SEED_PLAN)
    plan["steps"][0]["args"] = {"deep": nested(250)}
    raw = orjson.dumps(plan)
    letter = rejected(raw, "plans").dead_letter
    assert letter.reason_code == "schema_invalid" and "nesting" in letter.detail
    assert letter.payload is not None
    orjson.loads(letter.payload)  # the redacted copy is bounded in depth and parses
    deep = b'{"k":' * 900 + b"1" + b"}" * 900  # past what orjson can even write
    for kind, seed in (("observations", SEED_OBSERVATION), ("task-events", SEED_TASK_EVENT)):
        raw = orjson.dumps(seed)[:-1] + b',"extra":' + deep + b"}"
        assert reason(raw, kind) == "schema_invalid"  # type: ignore[arg-type]
    # a forbidden key deep down is still a privacy violation (§4.3 step 2 comes first)
    data = copy.deepcopy(SEED_OBSERVATION)
    data["extra"] = {"a": nested(30), "b": {"PIN": 1}}
    assert reason(orjson.dumps(data)) == "privacy_violation"


def test_sixteen_levels_are_admitted_seventeen_are_not() -> None:
    plan = copy.deepcopy(SEED_PLAN)
    plan["steps"][0]["args"] = {"deep": nested(12)}  # plan 1, steps 2, step 3, args 4, 12 more
    assert reason(orjson.dumps(plan), "plans") == "admitted"
    plan["steps"][0]["args"] = {"deep": nested(13)}
    assert reason(orjson.dumps(plan), "plans") == "schema_invalid"


@pytest.mark.parametrize("number", [2**63, 2**64 - 1, 2**64 + 5, -(2**63) - 1, 10**30])
def test_integers_outside_signed_64_bits_are_schema_invalid(number: int) -> None:
    text = seed_text(SEED_OBSERVATION).replace('"observed_at_ms":1785400000000', f'"observed_at_ms":{number}')
    assert reason(text.encode()) == "schema_invalid"
    event = seed_text(SEED_TASK_EVENT).replace('"sequence":41', f'"sequence":{number}')
    assert reason(event.encode(), "task-events") == "schema_invalid"
    fact = copy.deepcopy(SEED_OBSERVATION)
    fact["type"] = "security.session_state_changed"
    fact["facts"] = {"session_state": "running", "event_code": 7}
    text = orjson.dumps(fact).decode().replace('"event_code":7', f'"event_code":{number}')
    assert reason(text.encode()) == "schema_invalid"


def test_the_largest_64_bit_integer_and_big_floats_are_not_refused_for_their_size() -> None:
    fact = copy.deepcopy(SEED_OBSERVATION)
    fact["type"] = "security.session_state_changed"
    fact["facts"] = {"session_state": "running", "event_code": 2**63 - 1}
    assert reason(orjson.dumps(fact)) == "admitted"
    plan = copy.deepcopy(SEED_PLAN)
    plan["steps"][0]["args"] = {"scale": 1e30}
    assert reason(orjson.dumps(plan), "plans") == "admitted"


# -- forbidden keys after normalisation --------------------------------------------------------


LOOK_ALIKES = ["ｐｉｎ", "p\u200bin", "PİN", "Pin", "\ufeffbbox", "ＴＯＫＥＮ", "pa\u200dssword"]


@pytest.mark.parametrize("look_alike", LOOK_ALIKES)
@pytest.mark.parametrize("where", ["top", "facts", "nested"])
def test_forbidden_keys_are_found_after_normalisation(look_alike: str, where: str) -> None:
    assert key_norm(look_alike) in {"pin", "bbox", "token", "password"}
    data = copy.deepcopy(SEED_OBSERVATION)
    if where == "top":
        data[look_alike] = "4821"
    elif where == "facts":
        data["facts"][look_alike] = "4821"
    else:
        data["extra"] = [{"deeper": {look_alike: "4821"}}]
    letter = rejected(orjson.dumps(data)).dead_letter
    assert letter.reason_code == "privacy_violation" and letter.payload is None
    assert "4821" not in letter.to_json_bytes().decode()
    for kind, seed in (("task-events", SEED_TASK_EVENT), ("plans", SEED_PLAN)):
        other = copy.deepcopy(seed)
        other["extra"] = {look_alike: 1}
        assert reason(orjson.dumps(other), kind) == "privacy_violation"  # type: ignore[arg-type]


# -- redacted payloads and safe key names ------------------------------------------------------


def walk(node: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    found: list[tuple[tuple[str, ...], Any]] = []
    if isinstance(node, dict):
        for k, v in node.items():
            found.append(((*path, k), v))
            found.extend(walk(v, (*path, k)))
    elif isinstance(node, list):
        for v in node:
            found.extend(walk(v, path))
    return found


def test_payload_copies_keep_every_key_and_null_every_undefined_value() -> None:
    data = copy.deepcopy(SEED_OBSERVATION)
    data["рin"] = "4821"  # Cyrillic р: a look-alike, not a forbidden key
    data["correlation"]["nоte"] = {"deep": "secret"}  # Cyrillic о
    letter = rejected(orjson.dumps(data)).dead_letter
    assert letter.reason_code == "schema_invalid"
    assert letter.payload is not None
    copied = orjson.loads(letter.payload)
    # kept, but named by their hashes: neither is an identifier (§10)
    assert copied[safe_key("рin")] is None and copied["correlation"][safe_key("nоte")] is None
    assert "рin" not in letter.payload and "nоte" not in letter.payload
    assert copied["event_id"] == data["event_id"] and copied["facts"] == data["facts"]
    assert "4821" not in letter.payload and "secret" not in letter.payload
    # a key mismatch copies the defined values, never the raw bytes
    letter = rejected(orjson.dumps(SEED_OBSERVATION) + b"  ", key=b"someone-else").dead_letter
    assert letter.reason_code == "key_mismatch"
    assert letter.payload == orjson.dumps(SEED_OBSERVATION).decode()
    assert letter.payload_sha256 == hashlib.sha256(orjson.dumps(SEED_OBSERVATION) + b"  ").hexdigest()


def test_unknown_contract_and_plan_invalid_payloads_are_redacted() -> None:
    data = copy.deepcopy(SEED_OBSERVATION)
    data["type"] = "made.up"
    data["facts"] = {"note": "call me at 555", "area_id": "2"}
    letter = rejected(orjson.dumps(data)).dead_letter
    assert letter.reason_code == "unknown_contract" and letter.payload is not None
    copied = orjson.loads(letter.payload)
    assert copied["facts"] == {"note": None, "area_id": "2"}
    plan = copy.deepcopy(SEED_PLAN)
    plan["steps"][0]["args"] = {"secret_arg": {"x": "hidden"}}
    plan["allowed_action_contracts"].append("live_view.start")
    letter = rejected(orjson.dumps(plan), "plans").dead_letter
    assert letter.reason_code == "plan_invalid" and letter.payload is not None
    assert "hidden" not in letter.payload
    assert orjson.loads(letter.payload)["steps"][0]["args"] == {"secret_arg": None}


def test_non_identifier_keys_are_named_by_hash_in_paths_and_detail() -> None:
    key = "transcript: the PIN is 4821"
    shown = "<key:" + hashlib.sha256(key.encode()).hexdigest()[:8] + ">"
    assert safe_key(key) == shown and safe_key("area_id") == "area_id"
    data = copy.deepcopy(SEED_OBSERVATION)
    data["facts"][key] = "x"
    letter = rejected(orjson.dumps(data)).dead_letter
    assert letter.reason_code == "privacy_violation"
    assert f"facts.{shown}" in letter.offending_paths
    text = letter.to_json_bytes().decode()
    assert "4821" not in text and "transcript" not in text
    data = copy.deepcopy(SEED_OBSERVATION)
    data[key] = {"pin": 1}
    letter = rejected(orjson.dumps(data)).dead_letter
    assert letter.offending_paths == (f"{shown}.pin",) and "4821" not in letter.detail
    data = copy.deepcopy(SEED_TASK_EVENT)
    data[key] = 1
    letter = rejected(orjson.dumps(data), "task-events").dead_letter
    assert letter.reason_code == "schema_invalid"
    assert "4821" not in letter.detail and shown in letter.offending_paths


# -- §2 rule 10: printable plan text ----------------------------------------------------------


@pytest.mark.parametrize("bad", ["거실\u202e", "Living\x07room", "a\u2066b", "line\nbreak"])
def test_control_and_bidi_characters_in_plan_text_are_plan_invalid(bad: str) -> None:
    plan = copy.deepcopy(SEED_PLAN)
    plan["area_names"] = {"2": bad}
    assert reason(orjson.dumps(plan), "plans") == "plan_invalid"
    plan = copy.deepcopy(SEED_PLAN)
    plan["goal_summary"] = bad
    assert reason(orjson.dumps(plan), "plans") == "plan_invalid"
    plan = copy.deepcopy(SEED_PLAN)
    plan["area_names"] = {"2": "거실 (main) – 1층"}
    assert reason(orjson.dumps(plan), "plans") == "admitted"


def test_a_null_kafka_key_gives_a_dead_letter_with_a_null_key() -> None:
    rec = InputRecord("observations", "guardian.observations", 0, 5, 1785400000100, None,
                      orjson.dumps(SEED_OBSERVATION))  # fmt: skip
    result = replay_records([rec], settings=Settings.from_env({}))
    (letter,) = result.outs["deadletter"]
    assert letter["reason_code"] == "key_mismatch" and letter["key"] is None
    # the live worker publishes it with a null Kafka key too (not an empty one)
    registry = load_registry()
    proc = Processor(registry, Pipeline(registry), rules.decide)
    done = proc.process(MemoryStore(), "observations", None, rec.value, source_topic=rec.topic, partition=0,
                        offset=5, received_at_ms=rec.ts)  # fmt: skip
    assert [(o.kind, o.key) for o in done.outs] == [("deadletter", None)]


def test_a_plan_with_more_areas_than_a_map_holds_is_plan_invalid() -> None:
    plan = copy.deepcopy(SEED_PLAN)
    plan["areas"] = [f"a{i}" for i in range(64)]
    plan["area_names"] = {}
    plan["steps"][1]["args"]["area_ids"] = plan["areas"]
    assert reason(orjson.dumps(plan), "plans") == "admitted"
    plan["areas"].append("a64")
    letter = rejected(orjson.dumps(plan), "plans").dead_letter
    assert letter.reason_code == "plan_invalid" and "more than 64 areas" in letter.detail
