"""The Gemini model's answer checked against the state: :func:`verdict_from_answer` (with
:func:`replan_requests` for a replan's steps), and :func:`fallback`, the rules' verdict when the
model's is not used."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from supervisor import rules
from supervisor.checks import rationale_problem
from supervisor.gemini_answer import FALLBACK_REASON_MAX, ModelAnswer, ProposedStep
from supervisor.verdict import RATIONALE_MAX, Verdict
from tables.state import ExperienceState, Trigger
from topics.records import ID_PATTERN
from topics.registry import Registry
from topics.steps import MODEL_EXPOSURES, exclusive_conflict, safety_actions, step_problem

_ID_RE = re.compile(ID_PATTERN)


def replan_requests(
    exp: ExperienceState, steps: list[ProposedStep], keep: set[str], registry: Registry
) -> list[dict[str, Any]] | str:
    """The dispatch requests of proposed replan steps, or why they cannot run.

    Like a plan (§3, §7): catalog capability and operation exposed to a planner (``GO``), in the
    plan's ``allowed_action_contracts`` (or a safety action), required args present and no
    others, areas among the remaining (and kept) areas only, unique step IDs that do not clash
    with the plan's, ``depends_on`` naming earlier steps, an exclusive resource (the camera) held
    at most once. The catalog part is :func:`topics.steps.step_problem`, as for plans and
    dispatches."""
    allowed = set(exp.plan.get("allowed_action_contracts") or ())
    safety = safety_actions(registry, exp.started_steps, exp.security_started)
    plan_steps = {s.get("step_id") for s in exp.plan.get("steps") or ()}
    remaining = set(exp.remaining_areas())
    seen: set[str] = set()
    out: list[dict[str, Any]] = []
    for i, step in enumerate(steps):
        where = f"replan step {i + 1}"
        if not _ID_RE.fullmatch(step.step_id) or step.step_id in seen or step.step_id in plan_steps:
            return f"{where}: step_id is not a fresh ID"
        name = f"{step.capability}.{step.operation}"
        found = step_problem(
            registry,
            step.capability,
            step.operation,
            None,
            exposures=MODEL_EXPOSURES,
            allowed=allowed,
            safety=safety,
        )
        if found is not None:
            if found.kind == "catalog":
                return f"{where}: {name} is not in the capability catalog"[:FALLBACK_REASON_MAX]
            if found.kind == "exposure":
                return f"{where}: {name} is not exposed to a planner"
            return f"{where}: {found.problem}"[:FALLBACK_REASON_MAX]
        required = registry.capabilities[step.capability].operations[step.operation]
        args: dict[str, Any] = {}
        for arg in required:
            if arg != "area_id" or step.area_id is None:
                return f"{where}: {name} needs {arg}, which a model replan cannot give"
            args["area_id"] = step.area_id
        if step.area_id is not None:
            if "area_id" not in required:
                return f"{where}: {name} takes no area"
            if step.area_id not in remaining:
                return f"{where}: area is not a remaining area of the plan"
            if step.area_id not in keep:
                return f"{where}: area is not among keep_areas"
        for dep in step.depends_on:
            if dep not in seen:
                return f"{where}: depends_on names no earlier step"
        request: dict[str, Any] = {
            "step_id": step.step_id,
            "capability": step.capability,
            "operation": step.operation,
            "args": args,
        }
        if step.depends_on:
            request["depends_on"] = list(dict.fromkeys(step.depends_on))
        out.append(request)
        seen.add(step.step_id)
    held = exclusive_conflict(registry, [(step.capability, step.operation) for step in steps])
    if held is not None:
        return f"replan: resource_conflict, the {held} would be held twice"
    return out


def verdict_from_answer(
    answer: ModelAnswer, exp: ExperienceState, trigger: Trigger, registry: Registry
) -> Verdict | str:
    """The model's verdict, or why the state does not allow it."""
    decision = answer.decision
    budgets = exp.budgets
    steps: tuple[dict[str, Any], ...] = ()
    keep_areas: tuple[str, ...] | None = None
    if decision == "ask_user" and budgets.user_question <= 0:
        return "ask_user with no user question left"
    if decision == "complete" and not exp.success_met(deciding=trigger.event_id):
        return "complete before every success condition has physical evidence"
    # JSON mode often sends every optional list, empty: empty means none, only a non-empty one conflicts
    if decision != "replan" and (answer.replan_steps or answer.keep_areas):
        return f"replan steps or keep_areas with decision {decision}"
    if decision == "replan":
        if budgets.cloud_replan <= 0:
            return "replan with no cloud replan left"
        remaining = exp.remaining_areas()
        if not remaining:
            return "replan with no remaining area"
        keep = set(remaining)
        if answer.keep_areas:
            kept = list(dict.fromkeys(answer.keep_areas))
            if not set(kept) <= keep:
                return "keep_areas names an area that is not a remaining area"
            keep = set(kept)
            keep_areas = tuple(kept)
        requests = replan_requests(exp, answer.replan_steps, keep, registry)
        if isinstance(requests, str):
            return requests
        steps = tuple(requests)
    rationale = " ".join(answer.rationale.split())[:RATIONALE_MAX] or f"{decision} (model)"
    problem = rationale_problem(rationale)
    if problem is not None:
        return problem
    return Verdict(
        decision,
        answer.reason_code,
        rationale,
        backend="gemini",
        replan_steps=steps,
        keep_areas=keep_areas,
    )


def fallback(exp: ExperienceState, trigger: Trigger, reason: str) -> Verdict:
    """The rules' verdict, marked as a fallback with its reason (timeline text)."""
    return replace(
        rules.decide(exp, trigger),
        backend="fallback",
        fallback_reason=f"model fallback: {reason}"[:FALLBACK_REASON_MAX],
    )
