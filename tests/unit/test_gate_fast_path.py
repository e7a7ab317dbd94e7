"""The gate's fast path for observations against its full path: the same records, the same dead letters.

The fast path remembers what it judged before (IDs, built correlations, valid string fact values) so
that records repeating them cost less. A memory must never change an answer: a gate that has seen
many records, a fresh gate and a gate that always takes the ordered checks of the full path must
admit the same records and write the same dead letters, byte for byte, for hostile records too."""

from __future__ import annotations

import copy
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit.seed_records import SEED_OBSERVATION
from topics.gate import Admitted, Gate, Rejected
from topics.gate_observations import CORRELATIONS_MAX, KNOWN_VALUES_MAX
from topics.records import Observation
from topics.registry import Registry, load_registry

REGISTRY: Registry = load_registry()
KEY = b"airbot-0001"
#: one gate for the whole module: its memories fill with every example's records
WARM = Gate(REGISTRY)


class FullPathGate(Gate):
    """A gate that never takes the fast path: every observation goes through the ordered checks."""

    def _fast_observation(self, obj: dict[str, Any], key: Any) -> Observation | None:
        return None


def admit(gate: Gate, raw: bytes, key: Any = KEY) -> Admitted | Rejected:
    return gate.admit("observations", key, raw, source_topic="guardian.x", partition=0, offset=7,
                      received_at_ms=1785400000100)  # fmt: skip


def outcome(result: Admitted | Rejected) -> tuple[str, bytes, list[str]]:
    """What a caller of the gate sees: the admitted record with the fields it set, or the dead letter."""
    if isinstance(result, Admitted):
        record = result.record
        assert result.size > 0 and result.json is None
        return "admitted", record.to_json_bytes(), sorted(record.model_fields_set)
    return "rejected", orjson.dumps(result.value), []


#: IDs, correlations and area IDs from small pools, so that records repeat what the gate remembers
_ids = st.sampled_from(["exp_1", "wf_1", "patrol", "exp_2", "a:b", "x" * 128])
_bad_ids = st.sampled_from(["", "x" * 129, "has space", "é", "a\u200bb", "exp_1\n"])
_non_strings = st.sampled_from([None, 1, 1.5, True, [], ["exp_1"], {"exp_1": 1}])


def valid_correlation(draw: st.DrawFn) -> dict[str, Any]:
    return {"experience_id": draw(_ids), "workflow_id": draw(_ids), "step_id": draw(_ids)}


def hostile_correlation(draw: st.DrawFn) -> Any:
    """A correlation of pooled IDs with one thing wrong."""
    corr: dict[str, Any] = valid_correlation(draw)
    field = draw(st.sampled_from(sorted(corr)))
    change = draw(st.sampled_from(["value", "extra", "missing", "look-alike", "not a dict"]))
    if change == "value":
        corr[field] = draw(st.one_of(_bad_ids, _non_strings))
    elif change == "extra":
        corr[draw(st.sampled_from(["pin", "note", "step_id_", "PİN"]))] = draw(_ids)
    elif change == "missing":
        del corr[field]
    elif change == "look-alike":
        corr[field[:2] + "\u200b" + field[2:]] = corr.pop(field)
    else:
        return draw(st.one_of(_non_strings, st.just([corr])))
    return corr


_area_ids = st.sampled_from(["2", "kitchen", "a:b", "x" * 64])
_bad_facts = st.sampled_from(["", "x" * 65, "has space", "é", 2, 2.0, True, None, ["2"], {"2": 2}])
_bad_presence = st.sampled_from(["present", "DETECTED", "", 1, None, True])
CHANGES = (
    "none", "none", "correlation", "area", "presence", "forbidden fact", "unknown fact", "missing fact",
    "type", "confidence", "repeated fact", "repeated key", "deep", "big int",
)  # fmt: skip


@st.composite
def hostile_observations(draw: st.DrawFn) -> bytes:
    """The seed observation (a person in an area) with its correlation and area drawn from small
    pools (so a gate has seen them before) and one or two hostile changes: bad or non-string IDs,
    a correlation with a key too many, too few or a look-alike, invalid fact values, forbidden or
    unknown facts, another contract, repeated keys, deep nesting, a 65-bit integer."""
    data = copy.deepcopy(SEED_OBSERVATION)
    data["facts"] = {"area_id": draw(_area_ids), "presence": "detected", "verification_state": "pending"}
    if draw(st.booleans()):
        data["correlation"] = valid_correlation(draw)
    else:
        data.pop("correlation", None)
    facts = data["facts"]
    raw_changes = []
    for change in draw(st.lists(st.sampled_from(CHANGES), min_size=1, max_size=2)):
        if change == "correlation":
            data["correlation"] = hostile_correlation(draw)
        elif change == "area":
            facts["area_id"] = draw(_bad_facts)
        elif change == "presence":
            facts["presence"] = draw(_bad_presence)
        elif change == "forbidden fact":
            facts[draw(st.sampled_from(["pin", "Bbox", "ｐｉｎ"]))] = draw(_area_ids)
        elif change == "unknown fact":
            facts["light_level"] = draw(_area_ids)
        elif change == "missing fact":
            facts.pop(draw(st.sampled_from(["area_id", "presence", "verification_state"])), None)
        elif change == "type":
            data["type"] = draw(
                st.sampled_from(["security.verification_started", "network.link_changed", "x"])
            )
        elif change == "confidence":
            data["confidence"] = draw(st.sampled_from([0, 1, 0.5, 1.5, -0.1, True, "0.5"]))
        elif change != "none":
            raw_changes.append(change)
    raw = orjson.dumps(data)
    for change in raw_changes:
        if change == "repeated fact":
            raw = raw.replace(b'"facts":{', b'"facts":{"area_id":' + orjson.dumps(draw(_area_ids)) + b",", 1)
        elif change == "repeated key":
            raw = raw.replace(b"{", b'{"device_id":"airbot-0001",', 1)
        elif change == "deep":
            raw = raw.replace(b'"facts":{', b'"facts":{"area":' + b'{"k":' * 17 + b"1" + b"}" * 17 + b",", 1)
        else:
            raw = raw.replace(b'"freshness_ms":320', b'"freshness_ms":' + str(2**64).encode(), 1)
    return raw


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(hostile_observations(), min_size=1, max_size=6))
def test_the_fast_path_and_its_memories_never_change_an_answer(records: list[bytes]) -> None:
    for raw in records:
        seen = outcome(admit(WARM, raw))
        assert seen == outcome(admit(Gate(REGISTRY), raw)), raw
        assert seen == outcome(admit(FullPathGate(REGISTRY), raw)), raw
        # and with another device's key: a key_mismatch dead letter from each path alike
        other = outcome(admit(WARM, raw, b"airbot-0002"))
        assert other == outcome(admit(FullPathGate(REGISTRY), raw, b"airbot-0002")), raw
        assert other[0] == "rejected"


def test_a_remembered_correlation_is_reused_only_for_the_same_three_ids() -> None:
    gate = Gate(REGISTRY)
    seed = copy.deepcopy(SEED_OBSERVATION)
    first = admit(gate, orjson.dumps(seed))
    assert isinstance(first, Admitted)
    # the same IDs as another field's: a different correlation, built anew
    swapped = {**seed, "correlation": {**seed["correlation"], "step_id": seed["correlation"]["workflow_id"]}}
    second = admit(gate, orjson.dumps(swapped))
    assert isinstance(second, Admitted) and isinstance(second.record, Observation)
    assert second.record.correlation is not None
    assert second.record.correlation.step_id == seed["correlation"]["workflow_id"]
    assert second.record == Observation.model_validate(swapped)
    # the same IDs with a fourth key: refused as the full path refuses it
    extra = {**seed, "correlation": {**seed["correlation"], "note": "x"}}
    assert outcome(admit(gate, orjson.dumps(extra))) == outcome(
        admit(FullPathGate(REGISTRY), orjson.dumps(extra))
    )


def test_the_fast_paths_memories_stay_bounded_whatever_distinct_values_arrive() -> None:
    gate = Gate(REGISTRY)
    check = gate._checks["security.person_detected"]
    for i in range(max(CORRELATIONS_MAX, KNOWN_VALUES_MAX) + 100):
        data = copy.deepcopy(SEED_OBSERVATION)
        data["event_id"] = f"obs_{i}"
        data["correlation"] = {"experience_id": f"exp_{i}", "workflow_id": "wf", "step_id": "patrol"}
        data["facts"]["area_id"] = f"area_{i}"
        result = admit(gate, orjson.dumps(data))
        assert isinstance(result, Admitted)
        assert len(gate._correlations) <= CORRELATIONS_MAX
        assert len(check.known_str["area_id"]) <= KNOWN_VALUES_MAX
    # what the gate admitted last is what the model reads
    assert result.record == Observation.model_validate(data)
