"""Property test: recorded decisions of any shape through ``guardian replay --decisions recorded``
(docs/CONTRACTS.md §12).

Whatever a ``decisions`` record of the input holds — any JSON, nesting up to thousands of levels,
repeated keys, huge integers, bytes that are not JSON, decision-shaped records with any field
replaced — the replay never raises, its outputs, divergences and report can be written, every
divergence is counted in the summary, and every recorded decision is accounted for: unreadable
(a divergence naming where it is), or matched by trigger (reused, or a divergence of its trigger).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from config.settings import Settings
from guardian.replay import InputRecord, read_kcat_lines, replay_records, write_outputs
from topics.names import TopicNames

ROOT = Path(__file__).resolve().parents[2]
BASE = list(read_kcat_lines(ROOT / "examples" / "incident.jsonl", TopicNames("guardian.")))
SETTINGS = Settings.from_env({})
SOME = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
T0 = 1785400000000
#: a decision the example's rules take (device airbot-0005's battery_low), reused when recorded alike
DECISION: dict[str, Any] = {
    "decision_id": "dec_recorded_1",
    "device_id": "airbot-0005",
    "experience_id": "exp_airbot-0005_1785400000000",
    "workflow_id": "wf_airbot-0005_1785400000000",
    "trigger_event_id": "obs_airbot-0005_00001",
    "decision": "return_to_station",
    "reason_code": "battery_low",
    "rationale": "Battery low; stopping and returning.",
    "backend": "rules",
    "state_etag": "e1",
    "decided_at_ms": T0 + 1_800,
    "budget_after": {"decisions": 1, "local_retry": 1, "cloud_replan": 2, "user_question": 1},
}

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=12,
)


@st.composite
def decision_shaped(draw: st.DrawFn) -> bytes:
    """The real decision with some fields replaced (or dropped) and some added, as JSON."""
    d = dict(DECISION)
    for name in draw(st.lists(st.sampled_from(sorted(DECISION)), max_size=4)):
        if draw(st.booleans()):
            d[name] = draw(json_values)
        else:
            d.pop(name, None)
    d.update(draw(st.dictionaries(st.text(max_size=6), json_values, max_size=2)))
    return json.dumps(d).encode()


@st.composite
def deep(draw: st.DrawFn) -> bytes:
    depth = draw(st.integers(min_value=0, max_value=3_000))
    opener, closer = draw(st.sampled_from([("[", "]"), ('{"a":', "}")]))
    nested = opener * depth + "null" + closer * depth
    return json.dumps(DECISION).replace('"backend": "rules"', f'"backend": {nested}').encode()


repeated_key = st.sampled_from(
    [
        b'{"device_id":"airbot-0005","device_id":"x"}',
        json.dumps(DECISION).encode()[:-1] + b', "decision": "abort"}',
    ]
)
payloads = st.one_of(
    decision_shaped(),
    deep(),
    repeated_key,
    json_values.map(lambda v: json.dumps(v).encode()),
    st.binary(max_size=40),
)


@SOME
@given(st.lists(payloads, min_size=1, max_size=5))
def test_recorded_decisions_of_any_shape_never_raise_and_are_counted(values: list[bytes]) -> None:
    decisions = [
        InputRecord("decisions", "guardian.decisions", 0, offset, T0 + 1_800, b"airbot-0005", value)
        for offset, value in enumerate(values)
    ]
    result = replay_records([*BASE, *decisions], settings=SETTINGS, mode="recorded")
    divergences = result.divergences
    assert result.summary["divergences"] == len(divergences)
    for d in divergences:
        orjson.dumps(d)  # every divergence can be written (no nesting past orjson's limit)
    with tempfile.TemporaryDirectory() as out:
        write_outputs(result, Path(out))
        assert (Path(out) / "report.html").stat().st_size > 0
    unreadable = {d["offset"] for d in divergences if d["kind"] == "unreadable_recorded_decision"}
    triggers = {d["trigger_event_id"] for d in divergences} | {
        d["trigger_event_id"] for d in result.outs["decisions"]
    }
    for offset, value in enumerate(values):
        if offset in unreadable:
            continue
        recorded = orjson.loads(value)  # readable, so JSON …
        assert recorded["trigger_event_id"] in triggers  # … and accounted for by its trigger
