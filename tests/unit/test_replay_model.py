"""``guardian replay --decisions model`` asks the model what the live worker asked it: the device's
domain states and device context are in the prompt, taken from the state as stored after the
record that queued the trigger (the live decision lane's view)."""

# ruff: noqa: F811  (pytest fixtures imported from tests.gemini_stub are test arguments)

from __future__ import annotations

import asyncio

import orjson

from config.settings import Settings
from guardian.replay import replay_records
from pipeline.core import Pipeline
from pipeline.runner import MemoryStore, Processor
from supervisor.gemini import GeminiBackend, GeminiOptions
from supervisor.sync import blocking_model_decider
from tables.state import DeviceState, ExperienceState
from tests.gemini_stub import GeminiStub, answer, gemini_stub  # noqa: F401  (the fixture)
from tests.scenario_scripts import build
from tests.streams import Script
from topics.registry import load_registry

SETTINGS = Settings.from_env({"GUARDIAN_GEMINI_MODEL": "gemini-stub-flash"})
FAST = GeminiOptions(retries=0, timeout_ms=3000, deadline_ms=6000, backoff_ms=10, backoff_max_ms=40)


def live_prompts(script: Script, stub: GeminiStub) -> list[bytes]:
    """The prompts a live worker sends: the core with an asynchronous backend (``decide=None``), each
    queued trigger decided by a lane on copies of the stored state, then applied."""
    registry = load_registry()
    processor = Processor(registry, Pipeline(registry, language=SETTINGS.language), None)
    store = MemoryStore()
    first = len(stub.requests)

    async def run() -> None:
        backend = GeminiBackend(
            SETTINGS, options=FAST, registry=registry, api_key="test", base_url=stub.base_url
        )
        try:
            for r in script.records:
                done = processor.process(
                    store, r.suffix, r.key, r.value, r.topic, r.partition, r.offset, r.ts
                )
                for trigger in done.queued:
                    assert done.device_id is not None
                    stored = store.get_experience(done.device_id)
                    dev = store.get_device(done.device_id)
                    assert stored is not None and dev is not None
                    exp = ExperienceState.from_json(stored.to_json())
                    verdict = await backend.decide(exp, DeviceState.from_json(dev.to_json()), trigger)
                    processor.apply(store, done.device_id, trigger, verdict, exp.etag, r.ts)
        finally:
            await backend.aclose()

    asyncio.run(run())
    return [req.raw for req in stub.requests[first:]]


def replay_prompts(script: Script, stub: GeminiStub) -> list[bytes]:
    first = len(stub.requests)
    with blocking_model_decider(SETTINGS, options=FAST, api_key="test", base_url=stub.base_url) as model:
        result = replay_records(script.records, settings=SETTINGS, mode="model", model_decider=model)
    assert {d["backend"] for d in result.outs["decisions"]} == {"gemini"}
    return [req.raw for req in stub.requests[first:]]


def context_of(body: bytes) -> dict[str, object]:
    text = orjson.loads(body)["contents"][0]["parts"][0]["text"]
    ctx = orjson.loads(text)
    assert isinstance(ctx, dict)
    return ctx


def test_the_replayed_prompt_holds_the_device_context_and_domains_as_live(gemini_stub: GeminiStub) -> None:
    gemini_stub.default = answer("continue", "device_verifies")
    script = build("HG-15")
    live = live_prompts(script, gemini_stub)
    replayed = replay_prompts(script, gemini_stub)
    assert live and replayed == live
    ctx = context_of(replayed[0])
    assert "device_context" in ctx and "domains" in ctx


def test_a_debounced_change_confirmed_by_a_later_record_is_asked_on_the_state_after_that_record(
    gemini_stub: GeminiStub,
) -> None:
    """The later record's snapshot update comes after the confirmation inside its step: the live
    lane, deciding after the step, sees it; so must the replay."""
    gemini_stub.default = answer("continue", "noted")
    s = Script().start().wait(500).security_started().wait(800).patrol("2").fresh_context()
    s.wait(700).obs("vision.low_light_changed", {"low_light": True})
    s.wait(2100).obs("security.condition_changed", {"battery": "ok", "network": "degraded"})
    live = live_prompts(s, gemini_stub)
    replayed = replay_prompts(s, gemini_stub)
    assert live and replayed == live
    assert context_of(replayed[0]).get("domains", {}).get("network") == "degraded"  # type: ignore[union-attr]
