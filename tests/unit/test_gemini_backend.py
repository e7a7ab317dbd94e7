"""The Gemini backend through the real ``google-genai`` SDK against the stub on 127.0.0.1: answers,
failure handling (HG-10), privacy of the prompt (HG-11), budgets, model replans, and replay with
``--decisions model``."""

# ruff: noqa: F811  (pytest fixtures imported from tests.gemini_stub are test arguments)

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest

import topics.registry as topics_registry
from config.settings import Settings
from guardian.replay import replay_records
from pipeline.core import Pipeline
from pipeline.runner import MemoryStore, Processor
from supervisor.gemini import GeminiBackend, GeminiConfigError, GeminiOptions
from supervisor.sync import blocking_model_decider
from supervisor.verdict import Verdict
from tables.state import Trigger
from tests.gemini_stub import (
    GeminiStub,
    Reply,
    answer,
    error,
    gemini_stub,  # noqa: F401  (the fixture)
    model_text,
)
from tests.scenario_scripts import CANARY, build
from tests.streams import Script
from topics.gate import forbidden_key_paths
from topics.registry import Registry, load_registry

SETTINGS = Settings.from_env({"GUARDIAN_GEMINI_MODEL": "gemini-stub-flash"})
FAST = GeminiOptions(retries=2, timeout_ms=300, deadline_ms=3000, backoff_ms=10, backoff_max_ms=40)


@pytest.fixture(scope="module")
def registry() -> Registry:
    return load_registry()


@pytest.fixture
async def make_backend(gemini_stub: GeminiStub, registry: Registry) -> AsyncIterator[Any]:
    made: list[GeminiBackend] = []

    def make(options: GeminiOptions = FAST) -> GeminiBackend:
        b = GeminiBackend(
            SETTINGS, options=options, registry=registry, api_key="test", base_url=gemini_stub.base_url
        )
        made.append(b)
        return b

    yield make
    for b in made:
        await b.aclose()


@dataclass
class Harness:
    """The functional core with an async backend (``decide=None``), as the live worker runs it."""

    registry: Registry
    store: MemoryStore = field(default_factory=MemoryStore)
    outs: list[Any] = field(default_factory=list)
    queued: list[Trigger] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.processor = Processor(self.registry, Pipeline(self.registry, language="en"), None)

    def feed(self, script: Script) -> None:
        for r in script.records:
            done = self.processor.process(
                self.store,
                r.suffix,
                r.key,
                r.value,
                source_topic=r.topic,
                partition=r.partition,
                offset=r.offset,
                received_at_ms=r.ts,
            )
            self.outs.extend(done.outs)
            self.queued.extend(done.queued)

    async def decide_next(self, backend: GeminiBackend, device_id: str = "airbot-0001") -> Verdict:
        trigger = self.queued.pop(0)
        exp = self.store.get_experience(device_id)
        assert exp is not None
        etag = exp.etag
        verdict = await backend.decide(exp, self.store.get_device(device_id), trigger)
        done = self.processor.apply(self.store, device_id, trigger, verdict, etag, trigger.received_at_ms + 5)
        self.outs.extend(done.outs)
        return verdict

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [o.value for o in self.outs if o.kind == kind]


def failed_verification(s: Script, attempt: int = 1) -> str:
    return s.obs(
        "security.verification_result",
        {"outcome": "failed", "method": "face", "terminal": True, "attempt": attempt},
    )


def patrol_with(*steps: str) -> Script:
    s = Script().start().wait(500).security_started().wait(800).patrol("2").fresh_context()
    for step in steps:
        s.wait(700)
        if step == "failed":
            failed_verification(s)
        elif step == "passed":
            s.obs("security.verification_result", {"outcome": "passed", "terminal": True})
        elif step == "battery":
            s.obs("security.condition_changed", {"battery": "low"})
        elif step == "low_light":
            s.obs("vision.low_light_changed", {"low_light": True})
            s.wait(2100).obs("vision.low_light_changed", {"low_light": True})
    return s


# ------------------------------------------------------------------------------------------------
# answers
# ------------------------------------------------------------------------------------------------


async def test_a_good_answer_becomes_the_decision(
    gemini_stub: GeminiStub, make_backend: Any, registry: Registry
) -> None:
    h = Harness(registry)
    h.feed(patrol_with("failed"))
    gemini_stub.push(answer("ask_user", "unverified_person", "A stranger in 거실; asking the household."))
    verdict = await h.decide_next(make_backend())
    assert verdict.backend == "gemini"
    [decision] = h.of("decisions")
    assert decision["decision"] == "ask_user" and decision["backend"] == "gemini"
    assert decision["reason_code"] == "unverified_person"
    [dispatch] = h.of("dispatch")
    assert dispatch["requests"][0]["operation"] == "speak"
    assert gemini_stub.calls() == 1
    req = gemini_stub.requests[0]
    assert req.path == "/v1beta/models/gemini-stub-flash:generateContent"
    assert req.headers.get("x-goog-api-key") == "test"
    body = req.json
    config = body["generationConfig"]
    assert config["responseMimeType"] == "application/json"
    assert config["temperature"] == 0
    assert config["responseSchema"]["properties"]["decision"]["enum"] == [
        "continue",
        "ask_user",
        "replan",
        "abort",
        "return_to_station",
        "complete",
    ]
    system = body["systemInstruction"]["parts"][0]["text"]
    for phrase in (
        "Goal:",
        "ask_user",
        "user's cancel always wins",
        "authoritative",
        "Bounded replan",
        "Budgets now",
    ):
        assert phrase in system
    context = orjson.loads(body["contents"][0]["parts"][0]["text"])
    assert context["trigger"]["type"] == "security.verification_result"
    assert context["budgets"]["user_question"] == 1


@pytest.mark.parametrize(
    ("script", "expected_calls", "decision", "reason"),
    [
        # HTTP 503, then success: one retry
        ([error(503), answer("continue", "looks_fine")], 2, "continue", None),
        # 429 is retried too
        ([error(429), error(429), answer("return_to_station", "safe_side")], 3, "return_to_station", None),
        # 5xx on every call: the configured retries, then the rules
        ([error(500), error(502), error(503)], 3, "ask_user", "HTTP 503"),
        # a 400 is not retried
        ([error(400)], 1, "ask_user", "HTTP 400"),
        # an answer outside the six decisions: no retry, the rules decide
        ([answer("call_the_police")], 1, "ask_user", "outside the six decisions"),
        # malformed JSON
        ([model_text('{"decision": "continue", "reason_code": ')], 1, "ask_user", "not valid JSON"),
        # JSON, but not the answer's shape
        (
            [model_text('{"decision": "continue", "reason_code": "Bad Code!", "rationale": "x"}')],
            1,
            "ask_user",
            "invalid",
        ),
        # a rationale that quotes a private key or hides a bidirectional override
        (
            [model_text('{"decision": "continue", "reason_code": "ok", "rationale": "The PIN is 4821"}')],
            1,
            "ask_user",
            "names a key outside the allowlist",
        ),
        (
            [model_text('{"decision": "continue", "reason_code": "ok", "rationale": "ok \\u202e"}')],
            1,
            "ask_user",
            "bidirectional",
        ),
        # a 200 whose body is not JSON at all
        ([Reply(body=b"<html>oops</html>")], 1, "ask_user", "not JSON"),
        ([Reply(body=b'{"candidates": "nope"}')], 1, "ask_user", "answer is empty"),
    ],
)
async def test_failures_end_in_the_right_decision_with_exact_call_counts(
    gemini_stub: GeminiStub,
    make_backend: Any,
    registry: Registry,
    script: list[Any],
    expected_calls: int,
    decision: str,
    reason: str | None,
) -> None:
    h = Harness(registry)
    h.feed(patrol_with("failed"))
    gemini_stub.push(*script)
    verdict = await h.decide_next(make_backend())
    assert gemini_stub.calls() == expected_calls
    assert verdict.decision == decision
    if reason is None:
        assert verdict.backend == "gemini" and verdict.fallback_reason is None
    else:
        assert verdict.backend == "fallback"
        assert verdict.fallback_reason is not None and reason in verdict.fallback_reason
        [entry] = [e for e in h.of("timeline") if e["stage"] == "decide"]
        assert "by fallback" in entry["summary"] and reason in entry["summary"]
    [d] = h.of("decisions")
    assert d["backend"] == verdict.backend


async def test_a_timeout_per_call_then_the_rules(
    gemini_stub: GeminiStub, make_backend: Any, registry: Registry
) -> None:
    h = Harness(registry)
    h.feed(patrol_with("failed"))
    gemini_stub.default = answer("continue", delay_s=2.0)
    verdict = await h.decide_next(make_backend())
    assert gemini_stub.calls() == 3  # 1 + GUARDIAN_GEMINI_RETRIES=2, each cut at its timeout
    assert verdict.backend == "fallback" and verdict.decision == "ask_user"
    assert verdict.fallback_reason is not None and "timeout after 300 ms" in verdict.fallback_reason


async def test_a_timeout_then_success(gemini_stub: GeminiStub, make_backend: Any, registry: Registry) -> None:
    h = Harness(registry)
    h.feed(patrol_with("failed"))
    gemini_stub.push(answer("continue", delay_s=1.0), answer("continue", "second_try"))
    verdict = await h.decide_next(make_backend())
    assert gemini_stub.calls() == 2
    assert verdict.backend == "gemini" and verdict.reason_code == "second_try"


async def test_the_decision_deadline_bounds_retries(
    gemini_stub: GeminiStub, make_backend: Any, registry: Registry
) -> None:
    h = Harness(registry)
    h.feed(patrol_with("failed"))
    gemini_stub.default = answer("continue", delay_s=2.0)
    options = GeminiOptions(retries=10, timeout_ms=300, deadline_ms=700, backoff_ms=10, backoff_max_ms=10)
    verdict = await h.decide_next(make_backend(options))
    assert verdict.backend == "fallback"
    # the deadline, not the retry count, ends it: 300 + 300 (+ what is left of 700), never 11 calls
    assert 2 <= gemini_stub.calls() <= 3


async def test_hg10_model_failures_fall_back_and_no_trigger_is_lost(
    gemini_stub: GeminiStub, make_backend: Any, registry: Registry
) -> None:
    """HTTP 5xx, then a timeout, then an answer outside the six decisions: three fallback decisions."""
    h = Harness(registry)
    s = patrol_with("passed", "failed", "battery")
    h.feed(s)
    assert len(h.queued) == 3
    gemini_stub.push(
        error(503),
        error(503),
        error(503),
        answer("continue", delay_s=1.0),
        answer("continue", delay_s=1.0),
        answer("continue", delay_s=1.0),
        answer("maybe_later"),
    )
    backend = make_backend()
    verdicts = [await h.decide_next(backend) for _ in range(3)]
    assert [v.backend for v in verdicts] == ["fallback"] * 3
    assert [v.decision for v in verdicts] == ["continue", "ask_user", "return_to_station"]
    assert gemini_stub.calls() == 7
    decisions = h.of("decisions")
    assert [d["backend"] for d in decisions] == ["fallback"] * 3
    why = [e["summary"] for e in h.of("timeline") if e["stage"] == "decide"]
    assert "HTTP 503" in why[0] and "timeout" in why[1] and "outside the six decisions" in why[2]
    exp = h.store.get_experience("airbot-0001")
    assert exp is not None and exp.pending == []
    assert not [e for e in h.of("timeline") if e["drop_reason"] == "stale_etag"]


# ------------------------------------------------------------------------------------------------
# validation against the state, budgets
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        (answer("complete", "all_done"), "complete before every success condition"),
        (
            answer(
                "continue",
                replan_steps=[{"step_id": "x", "capability": "movement", "operation": "return_to_station"}],
            ),
            "replan steps or keep_areas with decision continue",
        ),
    ],
)
async def test_answers_the_state_does_not_allow_fall_back(
    gemini_stub: GeminiStub, make_backend: Any, registry: Registry, reply: Any, reason: str
) -> None:
    h = Harness(registry)
    h.feed(patrol_with("failed"))
    gemini_stub.push(reply)
    verdict = await h.decide_next(make_backend())
    assert verdict.backend == "fallback" and verdict.decision == "ask_user"
    assert verdict.fallback_reason is not None and reason in verdict.fallback_reason


async def test_ask_user_without_a_question_left_falls_back(
    gemini_stub: GeminiStub, make_backend: Any, registry: Registry
) -> None:
    h = Harness(registry)
    s = Script().start(user_question=0, cloud_replan=0).wait(500).security_started()
    failed_verification(s.wait(700))
    s.wait(700).obs("security.condition_changed", {"network": "degraded"})
    h.feed(s)
    gemini_stub.push(answer("ask_user"), answer("replan"))
    backend = make_backend()
    first = await h.decide_next(backend)
    assert first.backend == "fallback" and first.decision == "return_to_station"
    assert first.fallback_reason is not None and "no user question left" in first.fallback_reason


async def test_replan_without_a_cloud_replan_left_falls_back(
    gemini_stub: GeminiStub, make_backend: Any, registry: Registry
) -> None:
    h = Harness(registry)
    s = Script().start(cloud_replan=0).wait(500).security_started()
    s.wait(700).obs("security.condition_changed", {"network": "degraded"})
    h.feed(s)
    gemini_stub.push(answer("replan"))
    verdict = await h.decide_next(make_backend())
    assert verdict.backend == "fallback" and verdict.decision == "continue"
    assert verdict.fallback_reason is not None and "no cloud replan left" in verdict.fallback_reason


async def test_budget_exhausted_means_no_http_call(
    gemini_stub: GeminiStub, make_backend: Any, registry: Registry
) -> None:
    h = Harness(registry)
    s = Script().start(max_decisions=1).wait(500).security_started()
    s.wait(700).obs("security.verification_result", {"outcome": "passed"})
    s.wait(700).obs("security.verification_result", {"outcome": "passed", "attempt": 2})
    h.feed(s)
    assert len(h.queued) == 2  # both promoted before any decision came back
    backend = make_backend()
    await h.decide_next(backend)
    assert gemini_stub.calls() == 1
    verdict = await h.decide_next(backend)
    assert gemini_stub.calls() == 1  # the budget is spent: no HTTP call at all
    assert verdict.backend == "rules"
    assert [e["drop_reason"] for e in h.of("timeline") if e["stage"] == "drop"] == ["budget_exhausted"]
    exp = h.store.get_experience("airbot-0001")
    assert exp is not None and exp.pending == []


# ------------------------------------------------------------------------------------------------
# model replan
# ------------------------------------------------------------------------------------------------


def _moves(*areas: str) -> list[dict[str, Any]]:
    steps: list[dict[str, Any]] = []
    for i, area in enumerate(areas):
        step: dict[str, Any] = {
            "step_id": f"m_{area}",
            "capability": "movement",
            "operation": "move_to_room",
            "area_id": area,
        }
        if i:
            step["depends_on"] = [f"m_{areas[i - 1]}"]
        steps.append(step)
    return steps


async def test_model_replan_with_valid_steps_is_used(
    gemini_stub: GeminiStub, make_backend: Any, registry: Registry
) -> None:
    h = Harness(registry)
    h.feed(patrol_with("low_light"))
    steps = [*_moves("6", "3"), {"step_id": "pause", "capability": "security_patrol", "operation": "pause"}]
    gemini_stub.push(
        answer("replan", "low_light_reorder", "Kitchen first, then the bedroom.", replan_steps=steps)
    )
    verdict = await h.decide_next(make_backend())
    assert verdict.backend == "gemini" and verdict.decision == "replan"
    [dispatch] = h.of("dispatch")
    assert dispatch["kind"] == "device_workflow_requests"
    assert [(r["step_id"], r["args"]) for r in dispatch["requests"]] == [
        ("m_6", {"area_id": "6"}),
        ("m_3", {"area_id": "3"}),
        ("pause", {}),
    ]
    assert dispatch["requests"][1]["depends_on"] == ["m_6"]
    exp = h.store.get_experience("airbot-0001")
    assert exp is not None and exp.budgets.cloud_replan == 1


async def test_model_replan_may_drop_areas_with_keep_areas(
    gemini_stub: GeminiStub, make_backend: Any, registry: Registry
) -> None:
    h = Harness(registry)
    h.feed(patrol_with("low_light"))
    gemini_stub.push(answer("replan", "skip_dark_room", replan_steps=_moves("3"), keep_areas=["3"]))
    verdict = await h.decide_next(make_backend())
    assert verdict.backend == "gemini" and verdict.keep_areas == ("3",)
    exp = h.store.get_experience("airbot-0001")
    assert exp is not None and exp.areas == ["2", "3"]


@pytest.mark.parametrize(
    ("steps", "keep", "reason"),
    [
        (
            [
                {
                    "step_id": "clean",
                    "capability": "air_cleaning",
                    "operation": "start_room_cleaning",
                    "area_id": "3",
                }
            ],
            None,
            "outside allowed_action_contracts",
        ),
        (
            [{"step_id": "view", "capability": "live_view", "operation": "start"}],
            None,
            "not exposed to a planner",
        ),
        (_moves("2"), None, "not a remaining area"),
        (_moves("9"), None, "not a remaining area"),
        (
            [{"step_id": "fly", "capability": "movement", "operation": "fly"}],
            None,
            "not in the capability catalog",
        ),
        ([{"step_id": "m", "capability": "movement", "operation": "move_to_room"}], None, "needs area_id"),
        ([{"step_id": "say", "capability": "voice_content", "operation": "speak"}], None, "needs text"),
        ([{**_moves("3")[0], "depends_on": ["later"]}], None, "depends_on names no earlier step"),
        ([*_moves("3"), *_moves("3")], None, "not a fresh ID"),
        (
            [{"step_id": "patrol_areas", "capability": "movement", "operation": "return_to_station"}],
            None,
            "not a fresh ID",
        ),
        (_moves("6"), ["3"], "not among keep_areas"),
        ([], ["2"], "keep_areas names an area that is not a remaining area"),
    ],
)
async def test_invalid_model_replan_falls_back_to_the_rules_replan(
    gemini_stub: GeminiStub,
    make_backend: Any,
    registry: Registry,
    steps: list[dict[str, Any]],
    keep: list[str] | None,
    reason: str,
) -> None:
    h = Harness(registry)
    h.feed(patrol_with("low_light"))
    gemini_stub.push(answer("replan", "model_plan", replan_steps=steps, keep_areas=keep))
    verdict = await h.decide_next(make_backend())
    assert verdict.backend == "fallback" and verdict.decision == "replan"
    assert verdict.fallback_reason is not None and reason in verdict.fallback_reason
    [dispatch] = h.of("dispatch")
    assert [r["step_id"] for r in dispatch["requests"]] == ["sup_replan_move_3", "sup_replan_move_6"]


async def test_empty_optional_lists_mean_none(
    gemini_stub: GeminiStub, make_backend: Any, registry: Registry
) -> None:
    """A model in JSON mode often sends every optional field, empty: that is not a conflict."""
    h = Harness(registry)
    h.feed(patrol_with("failed"))
    gemini_stub.push(answer("ask_user", "stranger", replan_steps=[], keep_areas=[]))
    verdict = await h.decide_next(make_backend())
    assert (verdict.backend, verdict.decision) == ("gemini", "ask_user")
    assert verdict.fallback_reason is None
    # on a replan, an empty keep_areas keeps every remaining area
    h = Harness(registry)
    h.feed(patrol_with("low_light"))
    gemini_stub.push(answer("replan", "dark_room", replan_steps=[], keep_areas=[]))
    verdict = await h.decide_next(make_backend())
    assert (verdict.backend, verdict.decision, verdict.keep_areas) == ("gemini", "replan", None)
    [dispatch] = h.of("dispatch")
    assert [r["args"]["area_id"] for r in dispatch["requests"]] == ["3", "6"]


async def test_hg15_the_model_sees_the_planner_summary_and_nothing_raw(
    gemini_stub: GeminiStub, make_backend: Any, registry: Registry
) -> None:
    h = Harness(registry)
    h.feed(build("HG-15"))
    gemini_stub.push(answer("continue", "device_verifies"))
    verdict = await h.decide_next(make_backend())
    assert verdict.backend == "gemini"
    (req,) = gemini_stub.requests
    context = orjson.loads(req.json["contents"][0]["parts"][0]["text"])
    device = context["device_context"]
    # room names and semantic states, with their freshness
    assert device["movement"] == {"state": "fresh", "age_ms": device["movement"]["age_ms"],
                                  "data": {"state": "moving", "current_area": "거실"}}  # fmt: skip
    assert device["map"]["data"]["areas"] == ["거실", "안방"]
    assert device["air_quality"]["data"] == {"grade": "moderate", "trend": "worsening", "main_cause": "pm"}
    assert device["battery"]["data"] == {"charging": False, "estimated_work_budget": "medium"}
    assert device["security"]["data"]["session_state"] == "running"
    assert device["network"]["state"] == "stale" and device["network"]["age_ms"] > 10_000
    # never coordinates, raw readings, streaming, or an ID where a name exists
    text = req.json["contents"][0]["parts"][0]["text"]
    for word in ("theta", '"x"', "pm25", "level_pct", "streaming", "live_view", "current_area_id", CANARY):
        assert word not in text, word
    assert forbidden_key_paths(context) == []


def test_the_backend_judges_with_the_configured_catalog(gemini_stub: GeminiStub, tmp_path: Any) -> None:
    """GUARDIAN_CAPABILITIES_FILE is the catalog of the core and of the model's answers alike: here
    it keeps ``movement`` behind a user checkpoint, so a model replan moving the robot is refused."""
    catalog = orjson.loads((Path(topics_registry.__file__).parent / "capabilities.json").read_bytes())
    catalog["capabilities"]["movement"]["exposure"] = "GO_USER_CHECKPOINT"
    path = tmp_path / "capabilities.json"
    path.write_bytes(orjson.dumps(catalog))
    settings = Settings.from_env(
        {"GUARDIAN_GEMINI_MODEL": "gemini-stub-flash", "GUARDIAN_CAPABILITIES_FILE": str(path)}
    )
    gemini_stub.push(answer("replan", "dark_room", replan_steps=_moves("3")))
    with blocking_model_decider(
        settings, options=FAST, api_key="test", base_url=gemini_stub.base_url
    ) as decider:
        result = replay_records(
            patrol_with("low_light").records, settings=settings, mode="model", model_decider=decider
        )
    (decision,) = result.outs["decisions"]
    assert decision["backend"] == "fallback"
    fallback = [e["summary"] for e in result.outs["timeline"] if e["stage"] == "decide"]
    assert "not exposed to a planner" in fallback[0]


# ------------------------------------------------------------------------------------------------
# privacy (HG-11) and replay with --decisions model
# ------------------------------------------------------------------------------------------------


def hg11_with_triggers() -> Script:
    s = build("HG-11")
    s.records = [
        r for r in s.records if not (r.suffix == "task-events" and b"station_charging" in (r.value or b""))
    ]
    s.wait(200).obs("security.verification_result", {"outcome": "failed", "method": "pin", "terminal": True})
    s.wait(300).obs("security.person_detected", {"area_id": "3", "presence": "detected", "bbox": CANARY})
    s.wait(300).obs("security.condition_changed", {"battery": "low"}, extra={"pin": CANARY})
    s.wait(300).obs("security.condition_changed", {"battery": "critical"})
    return s


def test_hg11_nothing_forbidden_reaches_a_prompt(gemini_stub: GeminiStub) -> None:
    gemini_stub.push(answer("ask_user", "unverified"), answer("return_to_station", "battery_critical"))
    s = hg11_with_triggers()
    with blocking_model_decider(
        SETTINGS, options=FAST, api_key="test", base_url=gemini_stub.base_url
    ) as decider:
        result = replay_records(s.records, settings=SETTINGS, mode="model", model_decider=decider)
    assert result.summary["deadletter_reasons"]["privacy_violation"] >= 4
    assert gemini_stub.calls() == 2
    assert [d["backend"] for d in result.outs["decisions"]] == ["gemini", "gemini"]
    for req in gemini_stub.requests:
        assert CANARY not in req.text
        context = orjson.loads(req.json["contents"][0]["parts"][0]["text"])
        assert forbidden_key_paths(context) == []
        assert "bbox" not in req.text.lower()
    for kind in ("decisions", "dispatch", "timeline"):
        assert CANARY not in orjson.dumps(result.outs[kind]).decode()


def test_replay_with_decisions_model(gemini_stub: GeminiStub) -> None:
    gemini_stub.push(answer("continue", "device_verifies"), answer("ask_user", "stranger"))
    gemini_stub.push(error(503), error(503), error(503))
    s = build("HG-03")
    with blocking_model_decider(
        SETTINGS, options=FAST, api_key="test", base_url=gemini_stub.base_url
    ) as decider:
        result = replay_records(s.records, settings=SETTINGS, mode="model", model_decider=decider)
        again = decider.backend.http_calls
    assert result.summary["decisions_mode"] == "model"
    decisions = result.outs["decisions"]
    assert [(d["decision"], d["backend"]) for d in decisions] == [
        ("continue", "gemini"),
        ("ask_user", "gemini"),
        ("return_to_station", "fallback"),
    ]
    assert again == gemini_stub.calls() == 5
    assert result.summary["experiences"] == {s.experience_id: "returned"}


def test_the_sdk_environment_variables_configure_the_client(
    gemini_stub: GeminiStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GEMINI_API_KEY", "from-env")
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    monkeypatch.setenv("GOOGLE_GEMINI_BASE_URL", gemini_stub.base_url)
    s = patrol_with("failed")
    with blocking_model_decider(SETTINGS, options=FAST) as decider:
        result = replay_records(s.records, settings=SETTINGS, mode="model", model_decider=decider)
    assert [d["backend"] for d in result.outs["decisions"]] == ["gemini"]
    assert gemini_stub.requests[0].headers.get("x-goog-api-key") == "from-env"


def test_no_api_key_is_a_settings_error(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "GEMINI_API_KEY",
        "GOOGLE_API_KEY",
        "GOOGLE_GENAI_USE_VERTEXAI",
        "GOOGLE_GENAI_USE_ENTERPRISE",
    ):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(GeminiConfigError, match="GEMINI_API_KEY"):
        blocking_model_decider(SETTINGS, options=FAST)


def test_options_come_from_the_environment() -> None:
    opts = GeminiOptions.from_env(
        {
            "GUARDIAN_GEMINI_RETRIES": "0",
            "GUARDIAN_GEMINI_TIMEOUT_MS": "1500",
            "GUARDIAN_GEMINI_DEADLINE_MS": "4000",
        }
    )
    assert (opts.retries, opts.timeout_ms, opts.deadline_ms) == (0, 1500, 4000)
    assert GeminiOptions.from_env({}) == GeminiOptions()
    with pytest.raises(GeminiConfigError, match="GUARDIAN_GEMINI_RETRIES"):
        GeminiOptions.from_env({"GUARDIAN_GEMINI_RETRIES": "two"})
    with pytest.raises(GeminiConfigError, match="at least 100"):
        GeminiOptions.from_env({"GUARDIAN_GEMINI_TIMEOUT_MS": "5"})
