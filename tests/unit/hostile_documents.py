"""Hostile documents for property tests: a seed record of each input kind and ``mutate``, which spoils one."""

from __future__ import annotations

import copy
import json
import re
from typing import Any, get_args

from hypothesis import strategies as st
from pydantic import BaseModel

from tests.unit.seed_records import ENVELOPE, SEED_OBSERVATION, SEED_PLAN, SEED_TASK_EVENT
from topics.records import FORBIDDEN_KEYS, RECORD_TYPES, DomainName
from topics.registry import load_registry

REGISTRY = load_registry()
DEVICE = "airbot-0001"

SEED_CONTEXT: dict[str, Any] = {
    "device_id": DEVICE,
    "observed_at_ms": 1785400000000,
    "event_id": "ctx_0001",
    "domains": {"movement": copy.deepcopy(ENVELOPE)},
}
SEEDS: dict[str, dict[str, Any]] = {
    "plans": SEED_PLAN,
    "observations": SEED_OBSERVATION,
    "task-events": SEED_TASK_EVENT,
    "device-context": SEED_CONTEXT,
}


def model_keys(model: type[BaseModel], into: set[str]) -> None:
    for name, info in model.model_fields.items():
        into.add(name)
        stack = [info.annotation]
        while stack:
            ann = stack.pop()
            model = isinstance(ann, type) and issubclass(ann, BaseModel)
            if model and ann.__name__ not in seen_models:
                seen_models.add(ann.__name__)
                model_keys(ann, into)
            stack.extend(get_args(ann))


seen_models: set[str] = set()
#: every key the contract defines somewhere (record fields, facts, args, domains)
DEFINED: set[str] = set(get_args(DomainName))
for _model in RECORD_TYPES:
    model_keys(_model, DEFINED)
DEFINED |= {name for spec in REGISTRY.contracts.values() for name in spec.facts}
DEFINED |= set(REGISTRY.arg_types)

# -- strategies --------------------------------------------------------------------------------

forbidden = st.sampled_from(sorted(FORBIDDEN_KEYS))
look_alike = st.one_of(
    forbidden.map(str.upper),
    forbidden.map(lambda k: "".join(chr(ord(c) + 0xFEE0) if c.isalpha() else c for c in k)),  # fullwidth
    forbidden.map(lambda k: k[0] + "\u200b" + k[1:]),
    forbidden.map(lambda k: k.replace("o", "о").replace("p", "р").replace("e", "е")),  # Cyrillic
    st.just("PİN"),
)
hostile_key = st.one_of(
    st.sampled_from(sorted(DEFINED)),
    look_alike,
    st.text(min_size=1, max_size=30),
    st.just("transcript: the PIN is 4821"),
)
scalar = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=30),
    st.sampled_from(["2", "detected", "pending", "running", "\u202eevil", "a\x07b"]),
)
value = st.recursive(
    scalar,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(hostile_key, inner, max_size=3)),
    max_leaves=8,
)


def deep(levels: int) -> Any:
    node: Any = 1
    for _ in range(levels):
        node = {"d": node}
    return node


@st.composite
def mutate(draw: st.DrawFn, seed: dict[str, Any]) -> bytes:
    """The seed with a few hostile changes at random places (and maybe a repeated key)."""
    doc = copy.deepcopy(seed)
    for _ in range(draw(st.integers(0, 3))):
        # a random dict inside the document
        nodes: list[dict[str, Any]] = []
        stack: list[Any] = [doc]
        while stack:
            node = stack.pop()
            if isinstance(node, dict):
                nodes.append(node)
                stack.extend(node.values())
            elif isinstance(node, list):
                stack.extend(node)
        target = draw(st.sampled_from(nodes))
        choice = draw(st.integers(0, 3))
        if choice == 0 and target:
            target[draw(st.sampled_from(sorted(target)))] = draw(value)
        elif choice == 1:
            target[draw(hostile_key)] = draw(value)
        elif choice == 2:
            target[draw(hostile_key)] = deep(draw(st.integers(10, 40)))
        else:
            target.pop(draw(st.sampled_from(sorted(target))), None) if target else None
    raw = json.dumps(doc, ensure_ascii=False).encode()  # orjson cannot write integers past 64 bits
    starts = [m.start() for m in re.finditer(rb'\{"', raw)]
    if starts and draw(st.booleans()):
        # repeat a key of some object, hiding a value in the first copy
        at = draw(st.sampled_from(starts))
        name = draw(st.sampled_from(["facts", "pin", "area_id", "device_id", "d"]))
        raw = raw[: at + 1] + json.dumps(name).encode() + b': {"bbox": [1, 2]}, ' + raw[at + 1 :]
    return raw
