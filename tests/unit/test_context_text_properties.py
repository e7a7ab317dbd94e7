"""Property tests (hypothesis): device-context envelopes of any shape and plans with any text,
through the gate and the core, then into everything a planner, the supervisor or the household
gets (docs/CONTRACTS.md §2 rule 10, §6.1, §9).

- nothing admitted raises, and the supervisor's context, its prompt and the spoken text build;
- a snapshot with a time more than 5 s after its receive time is never admitted and changes
  nothing; an admitted envelope's TTL is never longer than its domain's default;
- no invisible character reaches the supervisor's context, its prompt, the planner summary or
  spoken text.

The oracle of "invisible" is written here from the Unicode categories and the default-ignorable
code points, independently of ``topics.text``.
"""

from __future__ import annotations

import unicodedata
from typing import Any, get_args

import orjson
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from pipeline.core import Pipeline
from pipeline.runner import MemoryStore, Processor
from supervisor import rules
from supervisor.context import build_context
from supervisor.gemini import system_instruction
from supervisor.presenter import precondition_question, user_question
from supervisor.summary import planner_summary
from tables.state import DeviceState, ExperienceState, Trigger
from topics.context import DOMAIN_TABLE, KeySpec
from topics.plans import guardian_plan
from topics.records import DomainName
from topics.registry import load_registry

REGISTRY = load_registry()
DEVICE = "airbot-0001"
T0 = 1785400000000
SKEW_MS = 5_000
SOME = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])

#: Default-ignorable code points outside Unicode category C (DerivedCoreProperties.txt).
IGNORABLE_RANGES = (
    (0x034F, 0x034F), (0x115F, 0x1160), (0x17B4, 0x17B5), (0x180B, 0x180F), (0x3164, 0x3164),
    (0xFE00, 0xFE0F), (0xFFA0, 0xFFA0), (0xE0100, 0xE01EF),
)  # fmt: skip
HIDDEN = [
    "\U000e0041", "\U000e007f", "\U000e0001", "\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u2028",
    "\u2029", "\u202e", "\u2066", "\u061c", "\u00ad", "\u3164", "\ufe0f", "\U000e0100", "\x07", "\x85",
    "\ue000",
]  # fmt: skip


def invisible(ch: str) -> bool:
    cat = unicodedata.category(ch)
    return cat[0] == "C" or cat in ("Zl", "Zp") or any(a <= ord(ch) <= b for a, b in IGNORABLE_RANGES)


def assert_visible(what: str, text: str) -> None:
    bad = [f"U+{ord(ch):04X}" for ch in text if invisible(ch)]
    assert not bad, (what, bad)


def strings(node: Any) -> list[str]:
    """Every key and string value in ``node``."""
    out: list[str] = []
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            out.extend(k for k in item if isinstance(k, str))
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
        elif isinstance(item, str):
            out.append(item)
    return out


# -- strategies --------------------------------------------------------------------------------


#: text a household might write: letters, marks, numbers, punctuation, symbols and spaces
_WORDS = st.text(st.characters(categories=("L", "M", "N", "P", "S", "Zs")), max_size=40)


@st.composite
def text(draw: st.DrawFn, max_size: int = 40) -> str:
    """Any text: mostly visible words, sometimes any characters, sometimes a hidden one somewhere."""
    base: str = draw(rarely(_WORDS, st.text(max_size=max_size), 4))[:max_size]
    if draw(rarely(st.just(False), st.just(True), 5)):
        at = draw(st.integers(0, len(base)))
        base = base[:at] + draw(st.sampled_from(HIDDEN)) + base[at:]
    return base


def rarely(
    valid: st.SearchStrategy[Any], junk: st.SearchStrategy[Any], odds: int = 9
) -> st.SearchStrategy[Any]:
    """``valid`` ``odds`` times for each ``junk``."""
    return st.one_of(*([valid] * odds), junk)


def key_value(spec: KeySpec, hostile: bool) -> st.SearchStrategy[Any]:
    """Values of one data key: valid for it, or (``hostile``) sometimes anything."""
    if spec.type == "enum":
        valid: st.SearchStrategy[Any] = st.sampled_from(spec.values)
    elif spec.type == "bool":
        valid = st.booleans()
    elif spec.type == "int":
        valid = st.integers(spec.min if spec.min is not None else -(2**63), spec.max or 2**63 - 1)
    elif spec.type == "number":
        valid = st.floats(allow_nan=False, allow_infinity=False)
    elif spec.type == "area_list":
        valid = st.lists(
            st.fixed_dictionaries({"area_id": st.sampled_from(["2", "3", "6", "9"]), "area_name": text()}),
            max_size=4,
        )
    else:
        valid = st.one_of(st.sampled_from(["2", "3", "6", "ready"]), text())
    number = st.integers(-(2**63), 2**63 - 1)
    anything = st.one_of(st.none(), st.booleans(), number, text(), st.lists(number, max_size=2))
    return rarely(valid, anything) if hostile else valid


#: times around the receive time: far past, near, on the skew bound, far future
def around(received: int) -> st.SearchStrategy[int]:
    return st.one_of(
        st.integers(0, received),
        st.integers(received - 100_000, received + 2 * SKEW_MS),
        st.sampled_from([received + SKEW_MS, received + SKEW_MS + 1, received + 10 * 365 * 86_400_000]),
        st.integers(received, 2**63 - 1),
    )


@st.composite
def envelope(draw: st.DrawFn, domain: str, received: int, hostile: bool) -> dict[str, Any]:
    """One domain's envelope: valid, or (``hostile``) with a wrong field now and then."""
    spec = DOMAIN_TABLE[domain]

    def pick(valid: st.SearchStrategy[Any], junk: st.SearchStrategy[Any]) -> Any:
        return draw(rarely(valid, junk) if hostile else valid)

    freshness: dict[str, Any] = {
        "state": pick(st.sampled_from(["fresh", "stale", "unknown"]), st.just("old"))
    }
    if draw(st.integers(0, 4)):
        freshness["observed_at_ms"] = draw(around(received))
    if draw(st.booleans()):
        freshness["ttl_ms"] = pick(st.one_of(st.integers(0, 2**63 - 1), st.just(2**63 - 1)), st.just(-1))
    env: dict[str, Any] = {
        "available": pick(st.booleans(), st.just("yes")),
        "freshness": freshness,
        "planner_exposure": pick(st.sampled_from(["summary", "summary", "internal", "none"]), st.just("all")),
        "sensitivity": pick(st.sampled_from(["normal", "normal", "sensitive"]), st.just("secret")),
    }
    if draw(st.booleans()):
        env["provenance"] = {"sequence": pick(st.integers(0, 2**63 - 1), st.just(-1))}
    keys = sorted(spec.keys)
    chosen = draw(st.lists(st.sampled_from(keys), max_size=len(keys), unique=True))
    env["data"] = {k: draw(key_value(spec.keys[k], hostile)) for k in chosen}
    if hostile and draw(st.integers(0, 9)) == 0:
        env["data"][draw(text(max_size=8))] = draw(text())
    return env


@st.composite
def snapshot(draw: st.DrawFn, received: int) -> dict[str, Any]:
    names = draw(st.lists(st.sampled_from(get_args(DomainName)), min_size=1, max_size=4, unique=True))
    hostile = draw(st.booleans())
    return {
        "contract_version": "device_context.v2",
        "event_id": "ctx_1",
        "device_id": DEVICE,
        "observed_at_ms": draw(around(received)),
        "domains": {name: draw(envelope(name, received, hostile)) for name in names},
    }


@st.composite
def any_plan(draw: st.DrawFn) -> dict[str, Any]:
    """The §3 plan with any goal summary and any room names (and sometimes device preconditions)."""
    plan = guardian_plan(DEVICE, created_at_ms=T0)
    plan["goal_summary"] = draw(text(max_size=120))
    plan["area_names"] = {a: draw(text(max_size=20)) for a in draw(st.sets(st.sampled_from(["2", "3", "6"])))}
    if draw(st.booleans()):
        plan["preconditions"] = {"path": "map.areas", "op": "contains", "value": "2"}
        plan["on_unknown"] = draw(st.sampled_from(["ask_user", "refresh", "block"]))
    return plan


# -- the run -----------------------------------------------------------------------------------


def process(
    proc: Processor, store: MemoryStore, kind: str, value: dict[str, Any], offset: int, at: int
) -> Any:
    return proc.process(store, kind, DEVICE.encode(), orjson.dumps(value), source_topic=f"guardian.{kind}",
                        partition=0, offset=offset, received_at_ms=at).outs  # fmt: skip


def trigger(at: int) -> Trigger:
    return Trigger(
        event_id="obs_1",
        type="security.person_detected",
        observed_at_ms=at - 50,
        received_at_ms=at,
        facts={"area_id": "2", "presence": "detected", "verification_state": "failed"},
        correlation=("exp", "wf", "patrol_areas"),
    )


def assert_nothing_invisible_reaches_a_reader(exp: ExperienceState, dev: DeviceState, at: int) -> None:
    ctx = build_context(exp, dev, trigger(at), registry=REGISTRY)
    for s in strings(orjson.loads(orjson.dumps(ctx))):
        assert_visible("supervisor context", s)
    for line in system_instruction(exp).split("\n"):  # the prompt's own lines
        assert_visible("prompt", line)
    summary = planner_summary(exp.plan, dev.context, at, REGISTRY)
    for s in strings(summary):
        assert_visible("planner summary", s)
    names = exp.plan.get("area_names") or {}
    for area in exp.areas:
        assert_visible("question", user_question("verification_failed", exp.area_name(area), "ko"))
    cond = {"path": "map.areas", "op": "contains", "value": "2"}
    assert_visible(
        "spoken", precondition_question(cond, dev.context, at, plan_area_names=names, language="en")
    )


@SOME
@given(st.data())
def test_context_envelopes_of_any_shape(data: st.DataObject) -> None:
    proc, store = Processor(REGISTRY, Pipeline(REGISTRY, language="en"), rules.decide), MemoryStore()
    assert not [o for o in process(proc, store, "plans", guardian_plan(DEVICE, created_at_ms=T0), 0, T0)
                if o.kind == "deadletter"]  # fmt: skip
    at = T0
    for offset in range(1, data.draw(st.integers(1, 4)) + 1):
        at += data.draw(st.integers(0, 120_000))
        snap = data.draw(snapshot(at))
        before = store.devices[DEVICE].to_json()
        outs = process(proc, store, "device-context", snap, offset, at)
        fresh = [env["freshness"] for env in snap["domains"].values()]
        times = [snap["observed_at_ms"], *(f["observed_at_ms"] for f in fresh if "observed_at_ms" in f)]
        refused = [o.value["reason_code"] for o in outs if o.kind == "deadletter"]
        event(f"snapshot: {refused[0] if refused else 'admitted'}")
        if any(t > at + SKEW_MS for t in times):
            assert refused, "a future-dated snapshot was admitted"
            assert store.devices[DEVICE].to_json() == before
        if not refused:
            for name, kept in store.devices[DEVICE].context.items():
                assert kept.observed_at_ms <= at + SKEW_MS
                assert kept.ttl_ms <= DOMAIN_TABLE[name].default_ttl_ms
        for o in outs:
            for s in strings(orjson.loads(orjson.dumps(o.value))):
                if o.kind != "deadletter":
                    assert_visible(f"{o.kind} output", s)
        exp = store.experiences[DEVICE]
        assert_nothing_invisible_reaches_a_reader(exp, store.devices[DEVICE], at)


@SOME
@given(any_plan(), st.data())
def test_plans_with_any_text(plan: dict[str, Any], data: st.DataObject) -> None:
    proc, store = Processor(REGISTRY, Pipeline(REGISTRY, language="en"), rules.decide), MemoryStore()
    snap = data.draw(snapshot(T0 - 1000))
    process(proc, store, "device-context", snap, 0, T0 - 1000)
    outs = process(proc, store, "plans", plan, 0, T0)
    refused = [o.value["reason_code"] for o in outs if o.kind == "deadletter"]
    hidden = [s for s in [plan["goal_summary"], *plan["area_names"].values()] if any(map(invisible, s))]
    if hidden:
        assert refused and refused[0] in ("plan_invalid", "schema_invalid"), hidden
    for o in outs:
        for s in strings(o.value):
            if o.kind != "deadletter":
                assert_visible(f"{o.kind} output", s)
    exp = store.experiences.get(DEVICE)
    event(f"plan: {refused[0] if refused else 'admitted'}; hidden text: {bool(hidden)}")
    if refused or exp is None:
        return
    assert_nothing_invisible_reaches_a_reader(exp, store.devices[DEVICE], T0 + 1000)
