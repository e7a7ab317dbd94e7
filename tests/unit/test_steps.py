"""The one step check (``topics.steps``) that the gate, the core and the model backend share."""

from __future__ import annotations

from dataclasses import replace

from topics.registry import load_registry
from topics.steps import (
    MODEL_EXPOSURES,
    PLANNER_EXPOSURES,
    exclusive_conflict,
    safety_actions,
    step_problem,
)

REGISTRY = load_registry()


def test_the_catalog_exposure_args_and_allowed_list_are_checked_in_that_order() -> None:
    def kind(capability: str, operation: str, args: dict[str, object] | None, **kw: object) -> str | None:
        found = step_problem(REGISTRY, capability, operation, args, **kw)  # type: ignore[arg-type]
        return None if found is None else found.kind

    assert kind("teleport", "start", {}, exposures=PLANNER_EXPOSURES) == "catalog"
    assert kind("movement", "fly", {}, exposures=PLANNER_EXPOSURES) == "catalog"
    assert kind("live_view", "start", {}, exposures=PLANNER_EXPOSURES) == "exposure"
    # a user-checkpoint capability: a planner's plan may name it, a model's replan may not
    assert kind("vital_sign_session", "start", None, exposures=PLANNER_EXPOSURES) is None
    assert kind("vital_sign_session", "start", None, exposures=MODEL_EXPOSURES) == "exposure"
    assert kind("movement", "move_to_room", {}, exposures=PLANNER_EXPOSURES) == "args"
    assert kind("movement", "move_to_room", None, exposures=PLANNER_EXPOSURES) is None
    assert (
        kind("movement", "move_to_room", {"area_id": "a"}, exposures=PLANNER_EXPOSURES, allowed=())
        == "allowed"
    )


def test_a_safety_action_goes_whatever_the_exposure_and_the_allowed_list() -> None:
    safe = safety_actions(REGISTRY, [("live_view", "start")], security_started=True)
    assert {"movement.return_to_station", "security_patrol.stop", "live_view.stop"} <= safe
    assert (
        step_problem(REGISTRY, "live_view", "stop", {}, exposures=MODEL_EXPOSURES, allowed=(), safety=safe)
        is None
    )
    assert step_problem(REGISTRY, "live_view", "stop", {}, exposures=MODEL_EXPOSURES, allowed=()) is not None


def test_the_exclusive_resources_come_from_the_registry() -> None:
    both = [("security_patrol", "start"), ("vital_sign_session", "start")]
    assert exclusive_conflict(REGISTRY, both) == "camera"
    assert exclusive_conflict(REGISTRY, [both[0], ("vital_sign_session", "stop")]) is None
    assert exclusive_conflict(replace(REGISTRY, plan_exclusive_resources=frozenset()), both) is None
    motion = replace(REGISTRY, plan_exclusive_resources=frozenset({"motion"}))
    assert exclusive_conflict(motion, both) is None
    assert exclusive_conflict(motion, [both[0], both[0]]) == "motion"
