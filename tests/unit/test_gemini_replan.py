"""The Gemini backend's replans: valid model steps are used, invalid ones fall back to the rules'
replan, and the configured capability catalog judges them."""

# ruff: noqa: F811  (pytest fixtures imported from tests.gemini_stub and gemini_fixtures are test arguments)

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

import topics.registry as topics_registry
from config.settings import Settings
from guardian.replay import replay_records
from supervisor.sync import blocking_model_decider
from tests.gemini_stub import (
    GeminiStub,
    answer,
    gemini_stub,  # noqa: F401  (the fixture)
)
from tests.unit.gemini_fixtures import (
    FAST,
    Harness,
    make_backend,  # noqa: F401  (the fixture)
    patrol_with,
    registry,  # noqa: F401  (the fixture)
)
from topics.registry import Registry

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
