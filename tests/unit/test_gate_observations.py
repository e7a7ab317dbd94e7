"""The gate on observations: one test per dead-letter reason code, in docs/CONTRACTS.md §4.3 order."""

# ruff: noqa: F811  (pytest fixtures imported from tests.unit.gate_fixtures are test arguments)

from __future__ import annotations

import asyncio
import copy
import hashlib
from typing import Any

import orjson
import pytest

from tests.unit.gate_fixtures import (
    KEY,
    admit,
    gate,  # noqa: F401  (the fixture)
    rejected,
)
from tests.unit.seed_records import SEED_OBSERVATION
from topics.gate import Admitted, Gate, Rejected, dead_letter_json
from topics.records import DeadLetter, Observation

MAX = 16 * 1024


def obs(**changes: Any) -> dict[str, Any]:
    data = copy.deepcopy(SEED_OBSERVATION)
    data.update(changes)
    return data


def with_facts(**facts: Any) -> bytes:
    return orjson.dumps(obs(facts=facts))


def key_paths(node: Any, prefix: str = "") -> set[str]:
    if isinstance(node, dict):
        found = {prefix + k for k in node}
        for k, v in node.items():
            found |= key_paths(v, f"{prefix}{k}.")
        return found
    if isinstance(node, list):
        return set().union(*(key_paths(v, f"{prefix}{i}.") for i, v in enumerate(node)))
    return set()


def assert_payload_rules(rej: Rejected, raw: bytes, *, copied: bool) -> None:
    dl = rej.dead_letter
    assert dl.payload_sha256 == hashlib.sha256(raw).hexdigest()
    assert dl.payload_size == len(raw)
    assert (dl.source_topic, dl.partition, dl.offset, dl.received_at_ms) == (
        "guardian.observations", 3, 1200, 1785400000100,
    )  # fmt: skip
    if copied:
        # a redacted copy (§10): the parsed record with every key kept; defined values kept
        assert dl.payload is not None
        assert key_paths(orjson.loads(dl.payload)) == key_paths(orjson.loads(raw))
    else:
        assert dl.payload is None


# --------------------------------------------------------------------------------------------
# Admitted records
# --------------------------------------------------------------------------------------------


def test_seed_observation_is_admitted_exactly_as_validated(gate: Gate) -> None:
    raw = orjson.dumps(SEED_OBSERVATION)
    result = admit(gate, raw)
    assert isinstance(result, Admitted)
    assert result.size == len(raw)
    assert isinstance(result.record, Observation)
    expected = Observation.model_validate(SEED_OBSERVATION)
    assert result.record == expected
    assert result.record.model_fields_set == expected.model_fields_set
    assert result.record.model_dump(mode="json") == SEED_OBSERVATION


def test_minimal_observation_and_str_key(gate: Gate) -> None:
    data = obs(facts={"channel": "app"}, type="user.cancel_requested")
    for name in ("ttl_ms", "confidence", "correlation", "requires_cloud_decision"):
        data.pop(name)
    result = admit(gate, orjson.dumps(data), key="airbot-0001")
    assert isinstance(result, Admitted)
    assert result.record == Observation.model_validate(data)
    assert isinstance(result.record, Observation) and result.record.correlation is None


def test_integer_confidence_becomes_a_float_like_the_model(gate: Gate) -> None:
    result = admit(gate, orjson.dumps(obs(confidence=1)))
    assert isinstance(result, Admitted) and isinstance(result.record, Observation)
    assert result.record.confidence == 1.0 and isinstance(result.record.confidence, float)


def test_condition_changed_needs_one_of_its_facts(gate: Gate) -> None:
    ok = admit(gate, orjson.dumps(obs(type="security.condition_changed", facts={"network": "offline"})))
    assert isinstance(ok, Admitted)
    rej = rejected(
        admit(gate, orjson.dumps(obs(type="security.condition_changed", facts={}))), "fact_invalid"
    )
    assert set(rej.dead_letter.offending_paths) == {"facts.battery", "facts.network", "facts.low_light"}


# --------------------------------------------------------------------------------------------
# Step 1: size and JSON
# --------------------------------------------------------------------------------------------


def test_too_large_is_checked_first(gate: Gate) -> None:
    raw = orjson.dumps(obs(bbox=[1, 2, 3]))
    raw = raw + b" " * (MAX + 1 - len(raw))
    assert len(raw) == MAX + 1
    rej = rejected(admit(gate, raw), "too_large")
    assert_payload_rules(rej, raw, copied=False)
    assert rej.event_id is None
    at_limit = orjson.dumps(SEED_OBSERVATION)
    at_limit = at_limit + b" " * (MAX - len(at_limit))
    assert isinstance(admit(gate, at_limit), Admitted)


@pytest.mark.parametrize(
    "raw",
    [
        b"\xff\xfe{}",
        orjson.dumps(SEED_OBSERVATION).replace(b"DeviceAgent", b"Device\xc3Agent"),
        b'{"event_id": "obs_1",',
        b"",
        b"[1, 2]",
        b'"just a string"',
        b"null",
    ],
)
def test_not_json(gate: Gate, raw: bytes) -> None:
    rej = rejected(admit(gate, raw), "not_json")
    assert_payload_rules(rej, raw, copied=False)
    assert rej.event_id is None and rej.dead_letter.event_id is None


def test_tombstone_value_is_not_json(gate: Gate) -> None:
    rej = rejected(admit(gate, None), "not_json")
    assert rej.dead_letter.payload_size == 0


# --------------------------------------------------------------------------------------------
# Step 2: privacy
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "path"),
    [
        (obs(facts={"area_id": "2", "presence": "detected", "bbox": [1, 2, 3, 4]}), "facts.bbox"),
        (obs(facts={"area_id": "2", "presence": "detected", "meta": {"Face": "b64..."}}), "facts.meta.Face"),
        (obs(PIN="1234"), "PIN"),
        (obs(extra=[{"ok": 1}, {"Signed_URL": "https://x.example/s?sig=abc"}]), "extra.1.Signed_URL"),
        (obs(correlation={**SEED_OBSERVATION["correlation"], "Token": "secret-token"}), "correlation.Token"),
        (obs(source={"deep": [[{"x": {"EMBEDDING": [0.1]}}]]}), "source.deep.0.0.x.EMBEDDING"),
    ],
)
def test_forbidden_keys_at_any_depth_and_case(gate: Gate, data: dict[str, Any], path: str) -> None:
    raw = orjson.dumps(data)
    rej = rejected(admit(gate, raw), "privacy_violation")
    assert path in rej.dead_letter.offending_paths
    assert path in rej.dead_letter.detail
    assert_payload_rules(rej, raw, copied=False)
    assert rej.event_id == "obs_guardian_0007" == rej.dead_letter.event_id
    for secret in ("1234", "b64...", "sig=abc", "secret-token", "0.1"):
        assert secret not in rej.dead_letter.to_json_bytes().decode()


def test_privacy_class_other_than_semantic_only(gate: Gate) -> None:
    raw = orjson.dumps(obs(privacy_class="raw_media"))
    rej = rejected(admit(gate, raw), "privacy_violation")
    assert rej.dead_letter.offending_paths == ("privacy_class",)
    assert "raw_media" not in rej.dead_letter.detail
    assert_payload_rules(rej, raw, copied=False)


def test_fact_key_outside_the_allowlist(gate: Gate) -> None:
    raw = with_facts(area_id="2", presence="detected", wearing="a red coat")
    rej = rejected(admit(gate, raw), "privacy_violation")
    assert rej.dead_letter.offending_paths == ("facts.wearing",)
    assert "red coat" not in rej.dead_letter.to_json_bytes().decode()
    assert_payload_rules(rej, raw, copied=False)


def test_privacy_comes_before_schema(gate: Gate) -> None:
    data = obs(token="t")
    del data["source"]
    rejected(admit(gate, orjson.dumps(data)), "privacy_violation")


# --------------------------------------------------------------------------------------------
# Step 3: schema, key, contract
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "path"),
    [
        ({k: v for k, v in SEED_OBSERVATION.items() if k != "source"}, "source"),
        (obs(unexpected=True), "unexpected"),
        (obs(observed_at_ms="1785400000000"), "observed_at_ms"),
        (obs(freshness_ms=-1), "freshness_ms"),
        (obs(confidence=1.5), "confidence"),
        (obs(ttl_ms=True), "ttl_ms"),
        (obs(event_id="obs with spaces"), "event_id"),
        (obs(correlation={"experience_id": "exp_guardian_001"}), "correlation.workflow_id"),
        (obs(correlation="exp_guardian_001"), "correlation"),
        (obs(facts=["area_id"]), "facts"),
        (obs(requires_cloud_decision="yes"), "requires_cloud_decision"),
    ],
)
def test_schema_invalid(gate: Gate, data: dict[str, Any], path: str) -> None:
    raw = orjson.dumps(data)
    rej = rejected(admit(gate, raw), "schema_invalid")
    assert path in rej.dead_letter.offending_paths
    assert_payload_rules(rej, raw, copied=True)


def test_schema_comes_before_key_and_contract(gate: Gate) -> None:
    data = obs(type="no.such_contract", unexpected=1)
    rejected(admit(gate, orjson.dumps(data), key=b"other-device"), "schema_invalid")


@pytest.mark.parametrize("key", [b"airbot-0002", "airbot-0002", None, b"\x01bad key\x7f"])
def test_key_mismatch(gate: Gate, key: Any) -> None:
    raw = orjson.dumps(SEED_OBSERVATION)
    rej = rejected(admit(gate, raw, key=key), "key_mismatch")
    assert_payload_rules(rej, raw, copied=True)
    assert rej.dead_letter.offending_paths == ("device_id",)


def test_key_mismatch_comes_before_unknown_contract(gate: Gate) -> None:
    raw = orjson.dumps(obs(type="security.teleported"))
    rejected(admit(gate, raw, key=b"airbot-0002"), "key_mismatch")


def test_unknown_contract(gate: Gate) -> None:
    raw = orjson.dumps(obs(type="security.teleported", facts={"anything": "goes"}))
    rej = rejected(admit(gate, raw), "unknown_contract")
    assert rej.dead_letter.offending_paths == ("type",)
    assert_payload_rules(rej, raw, copied=True)


# --------------------------------------------------------------------------------------------
# Step 4: fact values
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("facts", "path"),
    [
        ({"area_id": "x" * 65, "presence": "detected"}, "facts.area_id"),
        ({"area_id": "2", "presence": "maybe"}, "facts.presence"),
        ({"area_id": "2", "presence": True}, "facts.presence"),
        ({"area_id": 2, "presence": "detected"}, "facts.area_id"),
        ({"area_id": "2", "presence": "detected", "light": ["low"]}, "facts.light"),
        ({"area_id": "2"}, "facts.presence"),
    ],
)
def test_fact_invalid(gate: Gate, facts: dict[str, Any], path: str) -> None:
    raw = with_facts(**facts)
    rej = rejected(admit(gate, raw), "fact_invalid")
    assert path in rej.dead_letter.offending_paths
    assert "xxxxxxxx" not in rej.dead_letter.detail and "maybe" not in rej.dead_letter.detail
    assert_payload_rules(rej, raw, copied=False)


def test_int_fact_range(gate: Gate) -> None:
    base = {"type": "security.verification_result"}
    ok = admit(gate, orjson.dumps(obs(**base, facts={"outcome": "failed", "attempt": 10, "terminal": True})))
    assert isinstance(ok, Admitted)
    for attempt in (0, 11, 2.0, "3"):
        raw = orjson.dumps(obs(**base, facts={"outcome": "failed", "attempt": attempt}))
        assert rejected(admit(gate, raw), "fact_invalid").dead_letter.offending_paths == ("facts.attempt",)


# --------------------------------------------------------------------------------------------
# Event ID, the helper, cancellation
# --------------------------------------------------------------------------------------------


def test_event_id_only_when_it_is_a_valid_id(gate: Gate) -> None:
    bad_id = obs(event_id="has space", facts={"bbox": 1})
    rej = rejected(admit(gate, orjson.dumps(bad_id)), "privacy_violation")
    assert rej.event_id is None and rej.dead_letter.event_id is None
    rej = rejected(admit(gate, orjson.dumps(obs(event_id=["x"], unexpected=1))), "schema_invalid")
    assert rej.event_id is None


def test_dead_letter_for_cross_device() -> None:
    raw = orjson.dumps(SEED_OBSERVATION)
    direct = dead_letter_json(
        "cross_device", raw, source_topic="guardian.observations", partition=1, offset=7, key=KEY,
        received_at_ms=5, event_id="obs_guardian_0007", detail="correlation names another experience",
        offending_paths=("correlation.experience_id",), payload=raw.decode(),
    )  # fmt: skip
    dl = DeadLetter.model_validate(direct)
    assert dl.reason_code == "cross_device"
    assert dl.payload == raw.decode() and dl.key == "airbot-0001"
    assert dl.payload_sha256 == hashlib.sha256(raw).hexdigest() and dl.payload_size == len(raw)
    assert orjson.loads(dl.to_json_bytes())["offending_paths"] == ["correlation.experience_id"]
    assert orjson.dumps(direct) == dl.to_json_bytes()  # built directly, exactly the model's JSON
    hidden_json = dead_letter_json(
        "fact_invalid", raw, source_topic="t", partition=0, offset=0, key=None, received_at_ms=0,
        event_id="not an id", detail="x",
    )  # fmt: skip
    hidden = DeadLetter.model_validate(hidden_json)
    assert hidden.payload is None and hidden.event_id is None and hidden.key is None


def test_cancellation_propagates(gate: Gate) -> None:
    class Boom(bytes):
        def __eq__(self, other: object) -> bool:
            raise asyncio.CancelledError

        __hash__ = bytes.__hash__

    with pytest.raises(asyncio.CancelledError):
        admit(gate, orjson.dumps(SEED_OBSERVATION), key=Boom(KEY))


# --------------------------------------------------------------------------------------------
# Schema boundaries
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "admitted"),
    [
        ({"source": "s" * 256}, True),
        ({"source": "s" * 257}, False),
        ({"source": ""}, False),
        ({"event_id": "e" * 128}, True),
        ({"event_id": "e" * 129}, False),
        ({"ttl_ms": 0}, True),
        ({"ttl_ms": None}, True),
        ({"requires_cloud_decision": None}, False),
        ({"confidence": 0}, True),
        ({"observed_at_ms": 1.0}, False),
    ],
)
def test_schema_boundaries_agree_with_the_model(gate: Gate, change: dict[str, Any], admitted: bool) -> None:
    data = obs(**change)
    result = admit(gate, orjson.dumps(data))
    assert isinstance(result, Admitted) is admitted
    if admitted:
        assert result.record == Observation.model_validate(data)  # type: ignore[union-attr]
    else:
        assert rejected(result, "schema_invalid").dead_letter.offending_paths == tuple(change)
