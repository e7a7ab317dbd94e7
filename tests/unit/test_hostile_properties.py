"""Property test: hostile variations of every input kind, through the gate, the core and the store's
serialisation (§2 rules 7–9, §10).

- nothing admitted raises, and every device's stored value encodes and decodes;
- every dead-letter payload parses and holds no key the contract does not define with a non-null
  value;
- no forbidden key (after NFKC, case folding and removing zero-width characters) survives in any
  output or stored value.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any

import orjson
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from pipeline.core import Pipeline
from pipeline.runner import MemoryStore, Processor
from supervisor import rules
from tables.store.faust_tables import DeviceEntry
from tests.unit.hostile_documents import DEFINED, DEVICE, REGISTRY, SEEDS, mutate
from tests.unit.seed_records import SEED_OBSERVATION, SEED_PLAN
from topics.records import FORBIDDEN_KEYS, DeadLetter

SOME = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
ZERO_WIDTH = re.compile("[\u200b\u200c\u200d\u2060\ufeff]")


def norm(key: str) -> str:
    return ZERO_WIDTH.sub("", unicodedata.normalize("NFKC", key).casefold())


ID_RE = re.compile(r"[A-Za-z0-9_.:-]{1,128}")
HASHED = re.compile(r"<key:[0-9a-f]{8}>")

# -- strategies --------------------------------------------------------------------------------


@st.composite
def batch(draw: st.DrawFn) -> list[tuple[str, bytes]]:
    out: list[tuple[str, bytes]] = [("plans", orjson.dumps(SEED_PLAN))]
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(sorted(SEEDS)))
        out.append((kind, draw(mutate(SEEDS[kind]))))
    return out


# -- checks ------------------------------------------------------------------------------------


def keys_and_values(node: Any, parent: str = "") -> list[tuple[str, str, Any]]:
    found: list[tuple[str, str, Any]] = []
    if isinstance(node, dict):
        for k, v in node.items():
            found.append((parent, k, v))
            found.extend(keys_and_values(v, k))
    elif isinstance(node, list):
        for v in node:
            found.extend(keys_and_values(v, parent))
    return found


def assert_no_forbidden_key(doc: Any) -> None:
    for _, k, _ in keys_and_values(doc):
        assert norm(k) not in FORBIDDEN_KEYS, k


def assert_payload_redacted(payload: str) -> None:
    copied = orjson.loads(payload)
    for parent, k, v in keys_and_values(copied):
        if v is None or isinstance(v, dict | list):
            continue
        # an area ID that is not an identifier (a colon, over 64 characters) is named by its hash
        area_key = parent == "area_names" and (ID_RE.fullmatch(k) or HASHED.fullmatch(k))
        assert k in DEFINED or area_key, (k, v)


def leaks_canary(text: str) -> bool:
    """Whether the canary key's digits are in ``text``, other than inside a key's hashed name (an
    8-hex-digit hash holds ``4821`` for about one key in 13,000: U+7EFD's is ``<key:29cb4821>``)."""
    return "4821" in HASHED.sub("", text)


#: a key whose hashed name holds the canary's digits, where a dead letter names it (an extra key)
HASH_LOOKS_LIKE_CANARY = [
    ("plans", orjson.dumps(SEED_PLAN)),
    ("observations", orjson.dumps({**SEED_OBSERVATION, "\u7efd": 1})),
]


@SOME
@given(batch())
@example(HASH_LOOKS_LIKE_CANARY)
def test_hostile_records_never_raise_and_leak_nothing(records: list[tuple[str, bytes]]) -> None:
    processor = Processor(REGISTRY, Pipeline(REGISTRY, language="en"), rules.decide)
    store = MemoryStore()
    for i, (kind, raw) in enumerate(records):
        done = processor.process(store, kind, DEVICE.encode(), raw, source_topic=f"guardian.{kind}",
                                 partition=0, offset=i, received_at_ms=1785400000100 + i)  # fmt: skip
        for out in done.outs:
            encoded = orjson.dumps(out.value)  # every output serialises
            assert_no_forbidden_key(orjson.loads(encoded))
            if out.kind == "deadletter":
                letter = DeadLetter.model_validate(out.value)
                if letter.payload is not None:
                    assert len(letter.payload.encode()) <= 16 * 1024
                    assert_payload_redacted(letter.payload)
                    assert_no_forbidden_key(orjson.loads(letter.payload))
                assert not leaks_canary(letter.detail) and not any(map(leaks_canary, letter.offending_paths))
        # the store's serialisation: the device's one value and its plan
        entry = DeviceEntry(store.get_device(DEVICE), store.get_experience(DEVICE))
        stored = entry.to_json()
        assert_no_forbidden_key(orjson.loads(stored))
        exp = entry.experience
        if exp is not None:
            plan = orjson.dumps(exp.plan)
            assert_no_forbidden_key(orjson.loads(plan))
            back = DeviceEntry.from_json(stored, lambda _e, plan=plan: plan)  # type: ignore[misc]
            assert back.experience is not None and back.experience.to_obj() == exp.to_obj()
