"""Catalog ``requires`` on a dispatch's requests (docs/CONTRACTS.md §9.4): before a dispatch is
published, each request's condition is evaluated on the device's context; a request that does not
pass, and every request that depends on it, is left out (timeline drop ``condition_not_met`` with
the three-state result). Safety actions and compensations always go.
"""

from __future__ import annotations

from typing import Any

from pipeline.step import Step
from tables.state import ExperienceState
from topics.conditions import evaluate
from topics.registry import SAFETY_OPERATIONS


def passing_requests(
    s: Step,
    exp: ExperienceState,
    dispatch_id: str,
    requests: list[dict[str, Any]],
    at_ms: int,
) -> list[dict[str, Any]]:
    """The requests that may go: a request whose catalog ``requires`` is not ``KNOWN true`` on the
    device's context at ``at_ms`` is left out, and so is every request depending on one left out
    (each with timeline drop ``condition_not_met``). Safety actions always go."""
    registry, dev = s.core.registry, s.dev
    left_out: set[str] = set()
    kept: list[dict[str, Any]] = []
    compensations = {
        (name, undo) for name, cap in registry.capabilities.items() for undo in cap.compensation.values()
    }
    for r in requests:
        step_id = str(r.get("step_id"))
        capability, operation = str(r.get("capability")), str(r.get("operation"))
        name = f"{capability}.{operation}"
        blocked_by = [d for d in r.get("depends_on") or () if d in left_out]
        if blocked_by:
            left_out.add(step_id)
            s.drop(
                "condition_not_met",
                dispatch_id,
                at_ms,
                f"{name} ({step_id}) left out: depends on {blocked_by[0]}, left out",
                experience_id=exp.experience_id,
            )
            continue
        cap = registry.capabilities.get(capability)
        cond = cap.requires.get(operation) if cap is not None else None
        if cond is None or name in SAFETY_OPERATIONS or (capability, operation) in compensations:
            kept.append(r)
            continue
        result = evaluate(cond, dev.context, at_ms, args=r.get("args") or {})
        if result.passes:
            kept.append(r)
            continue
        left_out.add(step_id)
        s.drop(
            "condition_not_met",
            dispatch_id,
            at_ms,
            f"{name} ({step_id}) left out: {result.describe()}",
            experience_id=exp.experience_id,
        )
    return kept
