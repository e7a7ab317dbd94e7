"""An experience's life from the device's reports (docs/CONTRACTS.md §5): the physical evidence of
a task event, and the end (``completed``, ``returned``, ``aborted``) once the evidence says so."""

from __future__ import annotations

from pipeline.step import Step
from tables.state import ExperienceState
from topics.records import TaskEvent


def evidence(
    s: Step, exp: ExperienceState, event: TaskEvent, signal: str, area_id: str | None, at_ms: int
) -> None:
    """Apply one piece of physical evidence to the experience (its ``evidence`` timeline entry)."""
    if signal == "security.started":
        exp.security, exp.security_started, exp.docked = "running", True, False
        if ("security_patrol", "start") not in exp.started_steps:
            exp.started_steps.append(("security_patrol", "start"))
    elif signal == "security.paused":
        exp.security = "paused"
    elif signal == "security.resumed":
        exp.security = "running"
    elif signal == "security.stopped":
        exp.security = "stopped"
    elif signal == "movement.arrived":
        exp.docked = False
        if area_id:
            exp.current_area = area_id
    elif signal == "movement.station_charging":
        exp.docked = True
    elif signal == "security.area_patrolled" and area_id:
        exp.current_area = area_id
        if area_id not in exp.patrolled and area_id in exp.plan_areas:
            exp.patrolled.append(area_id)
    if signal not in exp.evidence:
        exp.evidence.append(signal)
    where = f" ({exp.area_name(area_id) or 'an area'})" if area_id else ""
    s.timeline(
        experience_id=exp.experience_id,
        at_ms=at_ms,
        stage="evidence",
        ref_id=event.event_id,
        summary=f"evidence: {signal}{where}",
    )


def check_end(s: Step, exp: ExperienceState, at_ms: int) -> None:
    """End the experience when its evidence says it is over: docked after a wind-down, or every
    success condition met."""
    if exp.phase == "ended":
        return
    if exp.phase == "winding_down":
        if exp.docked and (not exp.security_started or exp.security == "stopped"):
            status = "aborted" if exp.wind_down == "abort" else "returned"
            s.end(exp, status, at_ms, "docked" + (", security stopped" if exp.security_started else ""))
        return
    if exp.success_met():
        s.end(exp, "completed", at_ms, "every success condition has physical evidence")
