"""The Gemini backend through the real ``google-genai`` SDK against the stub on 127.0.0.1: answers,
failure handling (HG-10), and answers the state or the budgets do not allow."""

# ruff: noqa: F811  (pytest fixtures imported from tests.gemini_stub and gemini_fixtures are test arguments)

from __future__ import annotations

from typing import Any

import orjson
import pytest

from supervisor.gemini import GeminiOptions
from tests.gemini_stub import (
    GeminiStub,
    Reply,
    answer,
    error,
    gemini_stub,  # noqa: F401  (the fixture)
    model_text,
)
from tests.streams import Script
from tests.unit.gemini_fixtures import (
    Harness,
    failed_verification,
    make_backend,  # noqa: F401  (the fixture)
    patrol_with,
    registry,  # noqa: F401  (the fixture)
)
from topics.registry import Registry

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
