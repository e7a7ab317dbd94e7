"""The one check of a step against the capability catalog (docs/CONTRACTS.md §3, §7, §11), used by
the gate for a plan's steps, by the core for a dispatch's requests and by the model backend for a
model's replan steps.

Each caller says what it allows: the exposures (a planner's plan may name every capability but
``NO_GO`` ones; a model's replan only ``GO`` ones), the plan's ``allowed_action_contracts`` and the
safety actions (§7: the compensation of a started step and ``movement.return_to_station`` are
never refused, whatever the exposure or the allowed list).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from topics.registry import SAFETY_OPERATIONS, Registry

#: what a planner's plan may name: every capability but the ``NO_GO`` ones
PLANNER_EXPOSURES = frozenset({"GO", "GO_USER_CHECKPOINT"})
#: what a model's replan may name: the capabilities exposed without a user checkpoint
MODEL_EXPOSURES = frozenset({"GO"})


@dataclass(frozen=True, slots=True)
class StepProblem:
    """Why a step cannot go: ``kind`` (``catalog``: not in the catalog, ``exposure``: not exposed
    to this planner, ``args``: a required arg missing, ``allowed``: outside
    ``allowed_action_contracts``), ``where`` the step's field (``capability``, ``operation``,
    ``args.<name>``, ``operation``) and ``problem`` the reason in words."""

    kind: Literal["catalog", "exposure", "args", "allowed"]
    where: str
    problem: str


def step_problem(
    registry: Registry,
    capability: str,
    operation: str,
    args: Mapping[str, Any] | None,
    *,
    exposures: Collection[str],
    allowed: Collection[str] | None = None,
    safety: Collection[str] = (),
) -> StepProblem | None:
    """The first reason the step ``capability.operation`` cannot go, or None: the capability and
    the operation are in the catalog, the capability is exposed (a safety action always is), the
    required args are present (``args`` None: not checked here), and the step is allowed (``allowed``
    None: not checked; a safety action always is)."""
    name = f"{capability}.{operation}"
    is_safety = name in safety
    cap = registry.capabilities.get(capability)
    if cap is None:
        return StepProblem("catalog", "capability", "unknown capability")
    if cap.exposure not in exposures and not is_safety:
        never = "never exposed to a planner" if cap.exposure == "NO_GO" else "not exposed to this planner"
        return StepProblem("exposure", "capability", f"capability is {cap.exposure}: {never}")
    required = cap.operations.get(operation)
    if required is None:
        return StepProblem("catalog", "operation", "unknown operation of the capability")
    if args is not None:
        for arg in required:
            if arg not in args:
                return StepProblem("args", f"args.{arg}", "missing required arg")
    if allowed is not None and name not in allowed and not is_safety:
        return StepProblem("allowed", "operation", f"{name} is outside allowed_action_contracts")
    return None


def missing_args(registry: Registry, capability: str, operation: str, args: Mapping[str, Any]) -> list[str]:
    """The required args of a catalog operation that ``args`` lacks (an unknown operation: none)."""
    cap = registry.capabilities.get(capability)
    required = cap.operations.get(operation, ()) if cap is not None else ()
    return [a for a in required if a not in args]


def safety_actions(
    registry: Registry, started: Iterable[tuple[str, str]], security_started: bool
) -> set[str]:
    """§7: ``movement.return_to_station`` and the compensation of every step the device reported
    started (any capability, even one outside ``allowed_action_contracts`` or ``NO_GO``)."""
    names = set(SAFETY_OPERATIONS)
    if security_started:
        names.add("security_patrol.stop")
    for capability, operation in started:
        cap = registry.capabilities.get(capability)
        comp = cap.compensation.get(operation) if cap is not None else None
        if comp is not None:
            names.add(f"{capability}.{comp}")
    return names


def exclusive_conflict(registry: Registry, steps: Iterable[tuple[str, str]]) -> str | None:
    """The exclusive resource (the registry's ``plan_exclusive_resources``) that two ``start``
    steps of one dispatch would both hold, or None."""
    held: set[str] = set()
    for capability, operation in steps:
        cap = registry.capabilities.get(capability)
        if cap is None or operation != "start":
            continue
        for res in cap.resources:
            if res in registry.plan_exclusive_resources:
                if res in held:
                    return res
                held.add(res)
    return None
