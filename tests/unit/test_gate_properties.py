"""Property tests of the gate (hypothesis)."""

from __future__ import annotations

import copy
import hashlib
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from tests.unit.seed_records import SEED_OBSERVATION
from topics.gate import GATE_KINDS, Admitted, Gate, Rejected
from topics.records import FORBIDDEN_KEYS, Observation
from topics.registry import FactSpec, Registry, load_registry

REGISTRY: Registry = load_registry()
GATE = Gate(REGISTRY)
KEY = b"airbot-0001"
FAST = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def admit(value: bytes | None, kind: Any = "observations", key: Any = KEY) -> Admitted | Rejected:
    return GATE.admit(kind, key, value, source_topic="t", partition=0, offset=0, received_at_ms=1785400000100)


safe_key = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCXYZ_-0123456789", min_size=1, max_size=12).filter(
    lambda k: k.casefold() not in FORBIDDEN_KEYS
)
scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**53), 2**53), st.text(max_size=20),
                    st.floats(allow_nan=False, allow_infinity=False))  # fmt: skip
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(safe_key, inner, max_size=4)),
    max_leaves=12,
)


@st.composite
def random_case(draw: st.DrawFn, word: str) -> str:
    flips = draw(st.lists(st.booleans(), min_size=len(word), max_size=len(word)))
    return "".join(c.upper() if f else c for c, f in zip(word, flips, strict=True))


@st.composite
def with_forbidden_key(draw: st.DrawFn) -> tuple[dict[str, Any], str]:
    """The seed observation with one forbidden key (random case) at a random depth; the path."""
    data = copy.deepcopy(SEED_OBSERVATION)
    key = draw(random_case(draw(st.sampled_from(sorted(FORBIDDEN_KEYS)))))
    leaf: Any = {key: draw(scalars)}
    suffix = [key]
    for _ in range(draw(st.integers(0, 6))):
        if draw(st.booleans()):
            pad = draw(st.lists(json_values, max_size=2))
            suffix.insert(0, str(len(pad)))
            leaf = [*pad, leaf]
        else:
            name = draw(safe_key)
            suffix.insert(0, name)
            leaf = {name: leaf}
    where = draw(st.sampled_from(["top", "facts", "correlation"]))
    if where == "top" and isinstance(leaf, dict):
        ((name, value),) = leaf.items()
        data[name] = value
        return data, ".".join(suffix)
    container = data if where == "top" else data[where]
    name = draw(safe_key.filter(lambda k: k not in container))
    container[name] = leaf
    prefix = "" if where == "top" else where + "."
    return data, prefix + name + "." + ".".join(suffix)


@FAST
@given(with_forbidden_key())
def test_forbidden_keys_are_always_privacy_violations(case: tuple[dict[str, Any], str]) -> None:
    data, path = case
    raw = orjson.dumps(data)
    result = admit(raw)
    assert isinstance(result, Rejected)
    dl = result.dead_letter
    assert dl.reason_code == "privacy_violation"
    assert path in dl.offending_paths
    assert dl.payload is None
    assert dl.payload_sha256 == hashlib.sha256(raw).hexdigest()
    assert dl.payload_size == len(raw)


@FAST
@given(
    kind=st.sampled_from(GATE_KINDS),
    value=st.one_of(st.none(), st.binary(max_size=300)),
    key=st.one_of(st.none(), st.binary(max_size=20), st.text(max_size=20)),
)
def test_random_bytes_never_raise(kind: Any, value: bytes | None, key: Any) -> None:
    result = admit(value, kind, key)
    assert isinstance(result, Rejected)
    assert result.dead_letter.payload_size == len(value or b"")


@FAST
@given(kind=st.sampled_from(GATE_KINDS), doc=st.dictionaries(safe_key, json_values, max_size=6))
def test_random_json_objects_never_raise(kind: Any, doc: dict[str, Any]) -> None:
    result = admit(orjson.dumps(doc), kind)
    assert isinstance(result, Admitted | Rejected)


_ident = st.from_regex(r"[A-Za-z0-9_.:-]{1,130}", fullmatch=True)
#: Values that are often valid for some observation field, mixed with arbitrary JSON.
plausible = st.one_of(
    st.integers(-2, 2**40),
    st.floats(-0.5, 1.5),
    st.sampled_from([0, 1, 0.0, 1.0, True, False, None, "", "x" * 257]),
    _ident,
    st.fixed_dictionaries({"experience_id": _ident, "workflow_id": _ident, "step_id": _ident}),
    json_values,
)

#: Mostly valid values per field (edge values included), to exercise the admitting side too.
NEAR_VALID: dict[str, st.SearchStrategy[Any]] = {
    "event_id": _ident,
    "source": st.text(min_size=0, max_size=260),
    "observed_at_ms": st.integers(-1, 2**50),
    "freshness_ms": st.integers(-1, 10**6),
    "ttl_ms": st.one_of(st.none(), st.integers(-1, 10**6)),
    "confidence": st.one_of(st.none(), st.floats(-0.01, 1.01), st.integers(-1, 2)),
    "requires_cloud_decision": st.booleans(),
    "correlation": st.one_of(
        st.none(), st.fixed_dictionaries({"experience_id": _ident, "workflow_id": _ident, "step_id": _ident})
    ),
}
MUTABLE = tuple(NEAR_VALID)
mutation = st.sampled_from(MUTABLE).flatmap(
    lambda f: st.tuples(st.just(f), st.one_of(NEAR_VALID[f], plausible))
)


@FAST
@given(
    changes=st.lists(mutation, min_size=1, max_size=3).map(dict),
    drop=st.lists(st.sampled_from(MUTABLE), max_size=2),
)
def test_fast_path_agrees_with_the_model(changes: dict[str, Any], drop: list[str]) -> None:
    data = {**copy.deepcopy(SEED_OBSERVATION), **changes}
    for name in drop:
        data.pop(name, None)
    try:
        expected: Observation | None = Observation.model_validate(data)
    except ValidationError:
        expected = None
    result = admit(orjson.dumps(data))
    if expected is None:
        assert isinstance(result, Rejected) and result.dead_letter.reason_code == "schema_invalid"
    else:
        assert isinstance(result, Admitted), result
        assert result.record == expected
        assert result.record.model_fields_set == expected.model_fields_set


def fact_values(spec: FactSpec) -> st.SearchStrategy[Any]:
    if spec.type == "bool":
        return st.booleans()
    if spec.type == "int":
        return st.integers(
            spec.min if spec.min is not None else -(2**31), spec.max if spec.max is not None else 2**31
        )
    if spec.enum is not None:
        return st.sampled_from(sorted(spec.enum))
    return st.from_regex(r"[A-Za-z0-9_.:-]{1,64}", fullmatch=True)


@st.composite
def valid_observations(draw: st.DrawFn) -> dict[str, Any]:
    cid = draw(st.sampled_from(sorted(REGISTRY.contracts)))
    spec = REGISTRY.contracts[cid]
    names = draw(st.lists(st.sampled_from(sorted(spec.facts)), unique=True))
    for group in spec.required:
        if not set(group) & set(names):
            names.append(draw(st.sampled_from(group)))
    ident = st.from_regex(r"[A-Za-z0-9_.:-]{1,40}", fullmatch=True)
    data: dict[str, Any] = {
        "event_id": draw(ident),
        "device_id": "airbot-0001",
        "type": cid,
        "source": draw(st.text(min_size=1, max_size=40)),
        "observed_at_ms": draw(st.integers(0, 2**50)),
        "freshness_ms": draw(st.integers(0, 10**6)),
        "privacy_class": "semantic_only",
        "facts": {n: draw(fact_values(spec.facts[n])) for n in names},
    }
    if draw(st.booleans()):
        data["ttl_ms"] = draw(st.integers(0, 10**6))
    if draw(st.booleans()):
        data["confidence"] = draw(st.floats(0.0, 1.0))
    if draw(st.booleans()):
        data["requires_cloud_decision"] = draw(st.booleans())
    if draw(st.booleans()):
        data["correlation"] = {
            "experience_id": draw(ident),
            "workflow_id": draw(ident),
            "step_id": draw(ident),
        }
    return data


@FAST
@given(valid_observations())
def test_valid_observations_round_trip(data: dict[str, Any]) -> None:
    result = admit(orjson.dumps(data))
    assert isinstance(result, Admitted), result
    record = result.record
    assert record == Observation.model_validate(data)
    again = admit(record.to_json_bytes())
    assert isinstance(again, Admitted)
    assert again.record == record
    assert orjson.loads(record.to_json_bytes()) == {"requires_cloud_decision": False, **data}
