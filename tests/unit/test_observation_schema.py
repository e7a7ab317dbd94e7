"""One observation schema: the model (``topics.records.Observation``), the gate's fast path, its
checked path and the paths it names in a dead letter judge every field alike."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest
from pydantic import ValidationError

from tests.unit.seed_records import SEED_OBSERVATION
from topics.gate import Admitted, Gate, Rejected
from topics.gate_observations import observation_schema_paths
from topics.records import Correlation, Observation
from topics.registry import load_registry

KEY = SEED_OBSERVATION["device_id"].encode()
ABSENT = object()

#: values the model admits, per field (ABSENT: the field left out)
GOOD: dict[str, list[Any]] = {
    "observed_at_ms": [0],
    "freshness_ms": [0, 10_000],
    "ttl_ms": [ABSENT, None, 0],
    "confidence": [ABSENT, None, 0, 1, 0.0, 1.0],
    "requires_cloud_decision": [ABSENT, True],
    "correlation": [ABSENT, None],
    "source": ["s", "x" * 256],
}
#: values the model refuses, per field
BAD: dict[str, list[Any]] = {
    "event_id": [ABSENT, None, 5, "", "has space"],
    "device_id": [ABSENT, None, 5, ""],
    "type": [ABSENT, None, 5],
    "source": [ABSENT, None, 5, "", "x" * 257],
    "observed_at_ms": [ABSENT, None, -1, "1", 1.5, True],
    "freshness_ms": [ABSENT, None, -1, "1", 1.5, True],
    "ttl_ms": [-1, "1", 1.5, True],
    "confidence": [-0.1, 1.5, "0.5", True],
    "privacy_class": [ABSENT],
    "requires_cloud_decision": [None, 1, "true"],
    "facts": [ABSENT, None, [], "x"],
    "correlation": [
        "x",
        [],
        {"experience_id": "exp_guardian_001"},
        {**SEED_OBSERVATION["correlation"], "extra": "x"},
        {**SEED_OBSERVATION["correlation"], "step_id": 5},
    ],
}


@pytest.fixture(scope="module")
def gate() -> Gate:
    return Gate(load_registry())


def variant(field: str, value: Any) -> dict[str, Any]:
    data = copy.deepcopy(SEED_OBSERVATION)
    if value is ABSENT:
        data.pop(field, None)
    else:
        data[field] = value
    return data


def admit(gate: Gate, data: dict[str, Any]) -> Admitted | Rejected:
    return gate.admit("observations", KEY, orjson.dumps(data), source_topic="guardian.observations",
                      partition=0, offset=1, received_at_ms=1785400000100)  # fmt: skip


def test_every_field_of_the_model_is_judged() -> None:
    assert set(BAD) == set(Observation.model_fields)
    assert set(SEED_OBSERVATION["correlation"]) == set(Correlation.model_fields)


@pytest.mark.parametrize(("field", "value"), [(f, v) for f, vs in GOOD.items() for v in vs])
def test_a_value_the_model_admits_takes_the_fast_path_and_is_admitted_as_the_model_reads_it(
    gate: Gate, field: str, value: Any
) -> None:
    data = variant(field, value)
    expected = Observation.model_validate(data).model_dump()
    fast = gate._fast_observation(data, KEY.decode())
    assert fast is not None and fast.model_dump() == expected
    result = admit(gate, data)
    assert isinstance(result, Admitted), result
    assert result.record.model_dump() == expected


@pytest.mark.parametrize(("field", "value"), [(f, v) for f, vs in BAD.items() for v in vs])
def test_a_value_the_model_refuses_is_a_schema_dead_letter_naming_the_field(
    gate: Gate, field: str, value: Any
) -> None:
    data = variant(field, value)
    with pytest.raises(ValidationError):
        Observation.model_validate(data)
    assert gate._fast_observation(data, KEY.decode()) is None
    named = [p for p in observation_schema_paths(data) if p == field or p.startswith(field + ".")]
    assert named, observation_schema_paths(data)
    result = admit(gate, data)
    assert isinstance(result, Rejected)
    assert result.dead_letter.reason_code == "schema_invalid", result.dead_letter
    assert any(p == field or p.startswith(field + ".") for p in result.dead_letter.offending_paths)
