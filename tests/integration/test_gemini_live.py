"""The Gemini backend in a live worker on a real broker, the model being a stub on 127.0.0.1."""

# ruff: noqa: F811
from __future__ import annotations

import asyncio
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.gemini_stub import GeminiStub, answer, error, gemini_env, gemini_stub  # noqa: F401
from tests.live import Outputs, WorkerProcess, assert_single_content, collect, produce
from tests.streams import Script
from topics.names import TopicNames

pytestmark = pytest.mark.kafka

SLOW_ROOM = "attic"
FAST_ROOM = "veranda"


def started(device: str, prefix: str, room: str, area: str, t: int) -> Script:
    s = Script(device_id=device, prefix=prefix, t=t)
    s.start(areas=(area,), area_names={area: room})
    s.wait(50).security_started()
    return s


def test_a_slow_model_answer_for_one_device_does_not_hold_up_another(
    kafka_bootstrap: str,
    topic_prefix: str,
    guardian_env: dict[str, str],
    gemini_stub: GeminiStub,
    tmp_path: Path,
) -> None:
    names = TopicNames(topic_prefix)
    gemini_stub.when(SLOW_ROOM, answer("continue", "model_slow", "Slow but sure.", delay_s=5.0))
    gemini_stub.default = answer("continue", "model_fast", "Quick answer.")
    now = int(time.time() * 1000)
    slow = started("dev-slow", topic_prefix, SLOW_ROOM, "7", now)
    fast = started("dev-fast", topic_prefix, FAST_ROOM, "5", now)
    worker = WorkerProcess(gemini_env(guardian_env, gemini_stub), tmp_path / "worker.log").start()
    try:
        asyncio.run(produce(kafka_bootstrap, slow.records + fast.records))
        asyncio.run(
            collect(kafka_bootstrap, names, lambda o: len(o.statuses()) == 2, timeout_s=90, settle_s=0.5)
        )
        slow.records.clear()
        fast.records.clear()
        slow.t = fast.t = int(time.time() * 1000)
        slow.obs(
            "security.person_detected",
            {"area_id": "7", "presence": "detected", "verification_state": "failed"},
        )
        for i in range(3):
            fast.wait(10 + i).obs(
                "security.verification_result", {"outcome": "passed", "terminal": True, "attempt": i + 1}
            )
        produced_at = time.monotonic()
        asyncio.run(produce(kafka_bootstrap, slow.records + fast.records))

        def fast_decided(out: Outputs) -> bool:
            return sum(d["device_id"] == "dev-fast" for d in out.values["decisions"]) == 3

        early = asyncio.run(collect(kafka_bootstrap, names, fast_decided, timeout_s=60, settle_s=0.0))

        def both_decided(out: Outputs) -> bool:
            return fast_decided(out) and any(d["device_id"] == "dev-slow" for d in out.values["decisions"])

        final = asyncio.run(collect(kafka_bootstrap, names, both_decided, timeout_s=60, settle_s=0.5))
        slow_after = time.monotonic() - produced_at
    finally:
        worker.stop()
    assert not any(d["device_id"] == "dev-slow" for d in early.values["decisions"]), worker.log_tail()
    assert slow_after >= 5.0
    decisions = assert_single_content(final.values["decisions"], "decision_id")
    assert {d["backend"] for d in decisions.values()} == {"gemini"}
    fast_reasons = [d["reason_code"] for d in decisions.values() if d["device_id"] == "dev-fast"]
    assert fast_reasons == ["model_fast"] * 3
    # every prompt carried the bounded context, never a raw record
    assert all('"privacy_class"' not in body for body in gemini_stub.bodies())


def test_model_failures_fall_back_to_the_rules_and_the_timeline_says_why(
    kafka_bootstrap: str,
    topic_prefix: str,
    guardian_env: dict[str, str],
    gemini_stub: GeminiStub,
    tmp_path: Path,
) -> None:
    """HG-10: HTTP 5xx, then a timeout, then an answer outside the six decisions."""
    names = TopicNames(topic_prefix)
    env = gemini_env(guardian_env, gemini_stub)
    env["GUARDIAN_GEMINI_RETRIES"] = "0"
    env["GUARDIAN_GEMINI_TIMEOUT_MS"] = "700"
    gemini_stub.push(error(503), answer("continue", delay_s=2.0), answer("dance"))
    s = started("dev-hg10", topic_prefix, "거실", "2", int(time.time() * 1000))
    s.wait(100).obs(
        "security.person_detected", {"area_id": "2", "presence": "detected", "verification_state": "pending"}
    )
    s.wait(1100).obs(
        "security.person_detected", {"area_id": "2", "presence": "detected", "verification_state": "pending"}
    )
    s.wait(100).obs("security.verification_result", {"outcome": "failed", "terminal": True})
    s.wait(100).obs("security.verification_result", {"outcome": "failed", "terminal": True, "attempt": 2})
    worker = WorkerProcess(env, tmp_path / "worker.log").start()
    try:
        asyncio.run(produce(kafka_bootstrap, s.records))
        out = asyncio.run(
            collect(
                kafka_bootstrap, names, lambda o: len(o.values["decisions"]) >= 3, timeout_s=90, settle_s=1.0
            )
        )
        with urllib.request.urlopen(f"{worker.base_url}/metrics", timeout=10) as response:
            scraped = response.read().decode()
    finally:
        worker.stop()
    found = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(scraped)
        for sample in family.samples
    }
    # the worker's metrics tell the same story: three calls (503, timeout, bad answer), three fallbacks
    calls = {dict(k[1])["outcome"]: v for k, v in found.items() if k[0] == "guardian_model_calls_total"}
    assert calls == {"http_5xx": 1, "timeout": 1, "ok": 1}
    fallbacks = {
        dict(k[1])["reason"]: v for k, v in found.items() if k[0] == "guardian_model_fallbacks_total"
    }
    assert fallbacks == {"call_failed": 2, "bad_answer": 1}
    assert found[("guardian_model_call_duration_seconds_count", ())] == 3
    assert found[("guardian_model_retries_total", ())] == 0
    decisions = list(assert_single_content(out.values["decisions"], "decision_id").values())
    assert [d["backend"] for d in decisions] == ["fallback", "fallback", "fallback"]
    assert [d["decision"] for d in decisions] == ["continue", "ask_user", "return_to_station"]
    decide = [e["summary"] for e in out.values["timeline"] if e["stage"] == "decide"]
    assert all("fallback" in text for text in decide)
    assert gemini_stub.calls() == 3
