"""Plans (docs/CONTRACTS.md §3) and device context snapshots (§9): a new experience supersedes the
running one and starts, or waits for its preconditions (:mod:`pipeline.context_steps`)."""

from __future__ import annotations

from typing import Any

from pipeline import context_steps, debounce
from pipeline.observations import refuse, refused_cross_device
from pipeline.step import RawRef, Step, active
from tables.state import Budgets, ExperienceState
from topics.records import DeviceContext, ExperiencePlan


def on_plan(
    s: Step,
    exp: ExperienceState | None,
    plan: ExperiencePlan,
    received_at_ms: int,
    raw: RawRef | None,
    plan_json: dict[str, Any] | None = None,
) -> None:
    dev, res = s.dev, s.res
    if plan_json is None:
        plan_json = plan.model_dump(mode="json")
    # §2 rule 9: an experience_id belongs to the first device whose plan used it
    owner = s.owner(plan.experience_id)
    if refused_cross_device(
        s,
        owner,
        "plans",
        plan_json,
        raw,
        received_at_ms,
        event_id=plan.experience_id,
        detail="experience_id belongs to another device",
        path="experience_id",
    ):
        return
    dev.last_received_ms = max(dev.last_received_ms, received_at_ms)
    known = (exp is not None and exp.experience_id == plan.experience_id) or (
        dev.ended_status(plan.experience_id) is not None
    )
    if known:
        s.drop(
            "duplicate",
            plan.experience_id,
            received_at_ms,
            "plan already received",
            experience_id=plan.experience_id,
        )
        return
    # §2 rule 12: a new experience ID is claimed within the device's claim rate
    claim = s.claim_of
    if owner is None and claim is not None and not claim(plan.experience_id, dev.device_id, received_at_ms):
        refuse(
            s,
            "experience_rate",
            "plans",
            plan_json,
            raw,
            received_at_ms,
            event_id=plan.experience_id,
            detail="the device claims new experience IDs faster than its claim rate allows",
            path="experience_id",
        )
        return
    context_steps.deadline_due(s, exp, received_at_ms)
    current = active(dev, exp) or context_steps.pending_experience(dev, exp)
    if current is not None:
        s.end(current, "superseded", received_at_ms, f"superseded by {plan.experience_id}")
    budgets = Budgets(
        decisions=0,
        max_decisions=plan.decision_budget.max_decisions,
        local_retry=plan.intervention_budget.local_retry,
        cloud_replan=plan.intervention_budget.cloud_replan,
        user_question=plan.intervention_budget.user_question,
    )
    new = ExperienceState(
        experience_id=plan.experience_id,
        device_id=dev.device_id,
        workflow_id=plan.workflow_id,
        plan=plan_json,
        areas=list(plan.areas),
        budgets=budgets,
    )
    dev.active_experience_id = plan.experience_id
    debounce.prune(s.core.registry, dev, new)
    res.experience = new
    context_steps.admit_plan(s, new, received_at_ms)
    if owner is None:
        res.owner = (plan.experience_id, dev.device_id)


def on_device_context(s: Step, ctx: DeviceContext, received_at_ms: int) -> None:
    """Device context v2 (§9): kept per domain, never promoted; a pending plan is evaluated again."""
    dev = s.dev
    dev.last_received_ms = max(dev.last_received_ms, received_at_ms)
    context_steps.deadline_due(s, s.res.experience, received_at_ms)
    if context_steps.apply_snapshot(dev, ctx):
        context_steps.on_snapshot(s, s.res.experience, received_at_ms)
