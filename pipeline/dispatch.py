"""Dispatch building (docs/CONTRACTS.md §7): the requests of a decision, the checks a dispatch
passes before it is published (catalog, ``allowed_action_contracts``, safety actions, ``requires``)
and the dispatch record with its ``act`` timeline entry."""

from __future__ import annotations

from typing import Any

from pipeline.requires import passing_requests
from pipeline.step import Step
from supervisor.presenter import Language, user_question
from supervisor.verdict import Verdict
from tables.state import ExperienceState, Trigger
from topics import steps
from topics.envelope import Out
from topics.registry import Registry


def req(step_id: str, capability: str, operation: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
    """One request of a dispatch."""
    return {"step_id": step_id, "capability": capability, "operation": operation, "args": args or {}}


def security_running(exp: ExperienceState) -> bool:
    return exp.security_started and exp.security != "stopped"


def compensation(registry: Registry, capability: str, operation: str) -> str | None:
    """The catalog's compensation of a started operation (``security_patrol.start`` -> ``stop``),
    or None."""
    cap = registry.capabilities.get(capability)
    return cap.compensation.get(operation) if cap is not None else None


def requests_for(
    registry: Registry, language: Language, exp: ExperienceState, trigger: Trigger, verdict: Verdict
) -> tuple[list[dict[str, Any]], str | None]:
    """The requests carrying out ``verdict`` (and the sentence spoken, for ``ask_user``)."""
    kind = verdict.decision
    if kind == "return_to_station":
        reqs: list[dict[str, Any]] = []
        if security_running(exp):
            reqs.append(req("sup_stop_security", "security_patrol", "stop"))
        ret = req("sup_return_home", "movement", "return_to_station")
        if reqs:
            ret["depends_on"] = ["sup_stop_security"]
        reqs.append(ret)
        return reqs, None
    if kind == "abort":
        reqs = []
        for capability, operation in exp.started_steps:
            comp = compensation(registry, capability, operation)
            if comp is None:
                continue
            if (capability, operation) == ("security_patrol", "start") and not security_running(exp):
                continue
            step_id = f"sup_compensate_{capability}_{operation}"
            if any(r["step_id"] == step_id for r in reqs):
                continue
            reqs.append(req(step_id, capability, comp))
        ret = req("sup_return_home", "movement", "return_to_station")
        if reqs:
            ret["depends_on"] = [r["step_id"] for r in reqs]
        reqs.append(ret)
        return reqs, None
    if kind == "ask_user":
        area = trigger.facts.get("area_id")
        name = exp.area_name(area if isinstance(area, str) else exp.current_area)
        text = user_question(verdict.reason_code, name, language)
        return [req("sup_ask_user", "voice_content", "speak", {"text": text})], text
    if kind == "replan":
        if verdict.replan_steps:
            return [dict(s) for s in verdict.replan_steps], None
        reqs = []
        previous: str | None = None
        for area in exp.remaining_areas():
            step_id = f"sup_replan_move_{area}"
            r = req(step_id, "movement", "move_to_room", {"area_id": area})
            if previous:
                r["depends_on"] = [previous]
            reqs.append(r)
            previous = step_id
        return reqs, None
    return [], None


def safety_actions(registry: Registry, exp: ExperienceState) -> set[str]:
    """§7: the actions never refused for ``exp`` (see :func:`topics.steps.safety_actions`)."""
    return steps.safety_actions(registry, exp.started_steps, exp.security_started)


def check_requests(registry: Registry, exp: ExperienceState, requests: list[dict[str, Any]]) -> str | None:
    """Why a dispatch may not be published (catalog, exposure, args, ``depends_on``,
    allowed_action_contracts, an exclusive resource held twice), or None."""
    allowed = set(exp.plan.get("allowed_action_contracts") or ())
    safe = safety_actions(registry, exp)
    step_ids = {r.get("step_id") for r in requests}
    for r in requests:
        capability, operation = str(r.get("capability")), str(r.get("operation"))
        name = f"{capability}.{operation}"
        args = r.get("args") or {}
        found = steps.step_problem(
            registry,
            capability,
            operation,
            args,
            exposures=steps.PLANNER_EXPOSURES,
            allowed=allowed,
            safety=safe,
        )
        if found is not None:
            if found.kind == "catalog":
                return f"{name} is not in the capability catalog"
            if found.kind == "exposure":
                return f"{capability} is never exposed to a planner"
            if found.kind == "args":
                missing = steps.missing_args(registry, capability, operation, args)
                return f"{name} misses args {', '.join(missing)}"
            return found.problem
        for dep in r.get("depends_on") or ():
            if dep not in step_ids:
                return f"{r.get('step_id')} depends on unknown step {dep}"
    held = steps.exclusive_conflict(
        registry, ((str(r.get("capability")), str(r.get("operation"))) for r in requests)
    )
    if held is not None:
        return f"resource_conflict: the dispatch would hold the {held} twice"
    return None


def publish(
    s: Step,
    exp: ExperienceState,
    *,
    dispatch_id: str,
    decision_id: str | None,
    trigger_event_id: str,
    requests: list[dict[str, Any]],
    tts: str | None,
    at_ms: int,
    check: bool,
    note: str = "",
) -> bool:
    """Publish a dispatch (after the checks, when ``check``); False when nothing went."""
    if check:
        problem = check_requests(s.core.registry, exp, requests)
        if problem is not None:
            s.drop(
                "plan_rejected",
                dispatch_id,
                at_ms,
                f"dispatch not published: {problem}",
                experience_id=exp.experience_id,
            )
            return False
        requests = passing_requests(s, exp, dispatch_id, requests, at_ms)
        if not requests:
            return False
    kind = (
        "device_workflow_requests" if any(r.get("depends_on") for r in requests) else "device_task_requests"
    )
    dev = s.dev
    dispatch = {
        "dispatch_id": dispatch_id,
        "decision_id": decision_id,
        "trigger_event_id": trigger_event_id,
        "device_id": dev.device_id,
        "experience_id": exp.experience_id,
        "workflow_id": exp.workflow_id,
        "created_at_ms": at_ms,
        "kind": kind,
        "requests": requests,
        "tts": tts,
    }
    s.res.outs.append(Out("dispatch", dev.device_id, dispatch))
    names = ", ".join(f"{r['capability']}.{r['operation']}" for r in requests)
    s.timeline(
        experience_id=exp.experience_id,
        at_ms=at_ms,
        stage="act",
        ref_id=dispatch_id,
        summary=f"dispatch: {names}" + (f"; {note}" if note else ""),
    )
    return True
