"""The Gemini backend's prompts (HG-15, privacy HG-11), replay with ``--decisions model``, and the
client's configuration from the environment."""

# ruff: noqa: F811  (pytest fixtures imported from tests.gemini_stub and gemini_fixtures are test arguments)

from __future__ import annotations

from typing import Any

import orjson
import pytest

from guardian.replay import replay_records
from supervisor.gemini import GeminiConfigError, GeminiOptions
from supervisor.sync import blocking_model_decider
from tests.gemini_stub import (
    GeminiStub,
    answer,
    error,
    gemini_stub,  # noqa: F401  (the fixture)
)
from tests.scenario_scripts import CANARY, build
from tests.streams import Script
from tests.unit.gemini_fixtures import (
    FAST,
    SETTINGS,
    Harness,
    make_backend,  # noqa: F401  (the fixture)
    patrol_with,
    registry,  # noqa: F401  (the fixture)
)
from topics.gate import forbidden_key_paths
from topics.registry import Registry

# ------------------------------------------------------------------------------------------------
# what the model sees (HG-15), privacy (HG-11), and replay with --decisions model
# ------------------------------------------------------------------------------------------------


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
