"""From a promoted trigger to a decision (docs/CONTRACTS.md §4.3 steps 8–11, §6): correlation,
policy, budget, the supervisor (inline or queued), the decision applied with its dispatch, a user
cancel, and the local decisions of §6.3 (voice pause / resume)."""

from __future__ import annotations

from pipeline import context_steps, dispatch, ids, lifecycle
from pipeline.step import Step, active, summary_facts
from supervisor.verdict import Verdict
from tables.state import DECIDED_MEMORY, MAX_PENDING, RECENT_PROMOTED, ExperienceState, Trigger
from topics.envelope import Out


def promote(s: Step, trigger: Trigger, at_ms: int) -> None:
    """Steps 8–11 for a trigger that passed freshness and debounce."""
    dev, res = s.dev, s.res
    spec = s.core.registry.contracts[trigger.type]
    exp = active(dev, res.experience)
    if spec.scope == "unscoped":
        return
    if spec.scope == "device":
        if not context_steps.cancel_pending(s, res.experience, at_ms):
            cancel(s, exp, trigger, at_ms)
        return
    corr = trigger.correlation
    if corr is None or exp is None:
        why = "no correlation" if corr is None else "no active experience"
        s.drop("uncorrelated", trigger.event_id, at_ms, f"{trigger.type}: {why}")
        return
    exp_id, workflow_id, step_id = corr
    step_ids = {st["step_id"] for st in exp.plan["steps"]}
    if exp_id != exp.experience_id or workflow_id != exp.workflow_id or step_id not in step_ids:
        s.drop(
            "uncorrelated",
            trigger.event_id,
            at_ms,
            f"{trigger.type}: correlation does not name the active experience",
        )
        return
    # 9. policy
    subscribed = False
    for sub in exp.plan["observation_policy"]["subscriptions"]:
        if (
            sub["contract_id"] == trigger.type
            and sub["decision_mode"] == "supervisor"
            and step_id in (sub.get("step_ids") or ())
        ):
            subscribed = True
            break
    if not (subscribed or trigger.requires_cloud_decision):
        s.drop("not_subscribed", trigger.event_id, at_ms, f"{trigger.type}: state only")
        return
    # 10. budget
    if exp.winding_down:
        s.drop("winding_down", trigger.event_id, at_ms, f"{trigger.type}: winding down")
        return
    if exp.budgets.decisions >= exp.budgets.max_decisions:
        s.drop(
            "budget_exhausted",
            trigger.event_id,
            at_ms,
            f"{trigger.type}: {exp.budgets.max_decisions} decisions already taken",
        )
        return
    if s.decide is None and len(exp.pending) >= MAX_PENDING:
        # §2 rule 8: the queue of an asynchronous backend is bounded too
        s.drop(
            "budget_exhausted",
            trigger.event_id,
            at_ms,
            f"{trigger.type}: {MAX_PENDING} triggers already wait for a decision",
        )
        return
    # 11. supervisor
    observe(s, exp, trigger, at_ms)
    exp.recent.append(trigger)
    if len(exp.recent) > RECENT_PROMOTED:
        del exp.recent[: len(exp.recent) - RECENT_PROMOTED]
    area = trigger.facts.get("area_id")
    if isinstance(area, str):
        exp.current_area = area
    if s.decide is None:
        exp.pending.append(trigger)
        res.queued.append(trigger)
        return
    verdict = s.decide(exp, trigger)
    apply(s, exp, trigger, verdict, exp.etag, at_ms)


def observe(s: Step, exp: ExperienceState, trigger: Trigger, at_ms: int) -> None:
    """The timeline's ``observe`` entry: a trigger reaches the supervisor."""
    s.timeline(
        experience_id=exp.experience_id,
        at_ms=at_ms,
        stage="observe",
        ref_id=trigger.event_id,
        summary=f"observe: {trigger.type} {summary_facts(trigger.facts)}",
    )


def cancel(s: Step, exp: ExperienceState | None, trigger: Trigger, at_ms: int) -> None:
    """A user cancel: always wins, as an ``abort`` decision."""
    if exp is None:
        s.drop("uncorrelated", trigger.event_id, at_ms, "cancel: no active experience")
        return
    if exp.winding_down:
        s.drop("winding_down", trigger.event_id, at_ms, "cancel: already winding down")
        return
    observe(s, exp, trigger, at_ms)
    channel = trigger.facts.get("channel", "app")
    verdict = Verdict("abort", "user_cancel", f"The user cancelled by {channel}; user cancel always wins.")
    apply(s, exp, trigger, verdict, exp.etag, at_ms)


def apply_verdict(
    s: Step, exp: ExperienceState | None, trigger: Trigger, verdict: Verdict, decided_on_etag: int, at_ms: int
) -> None:
    """Apply a decision reached asynchronously on state version ``decided_on_etag``."""
    if exp is None or exp.experience_id != (trigger.correlation or ("",))[0]:
        return
    if trigger.event_id in exp.decided:
        return
    apply(s, exp, trigger, verdict, decided_on_etag, at_ms)


def apply(
    s: Step, exp: ExperienceState, trigger: Trigger, verdict: Verdict, decided_on_etag: int, at_ms: int
) -> None:
    """A verdict becomes a decision record (etag, phase and budget checked), then its dispatch."""
    dev, res = s.dev, s.res
    dec_id = ids.decision_id(dev.device_id, exp.experience_id, trigger.event_id)
    exp.pending = [t for t in exp.pending if t.event_id != trigger.event_id]
    if trigger.event_id in exp.decided:
        return
    user_cancel = verdict.decision == "abort" and verdict.reason_code == "user_cancel"
    if decided_on_etag != exp.etag:
        s.drop(
            "stale_etag",
            dec_id,
            at_ms,
            f"decision on e{decided_on_etag} discarded: state is now {exp.state_etag}",
        )
        return
    if exp.phase != "active":
        s.drop("winding_down", trigger.event_id, at_ms, "decision after wind-down discarded")
        return
    budgets = exp.budgets
    if not user_cancel and budgets.decisions >= budgets.max_decisions:
        s.drop("budget_exhausted", trigger.event_id, at_ms, "decision budget spent")
        return
    budgets.decisions += 1
    if verdict.decision == "ask_user":
        budgets.user_question = max(0, budgets.user_question - 1)
    elif verdict.decision == "replan":
        budgets.cloud_replan = max(0, budgets.cloud_replan - 1)
    exp.decided.append(trigger.event_id)
    if len(exp.decided) > DECIDED_MEMORY:
        del exp.decided[: len(exp.decided) - DECIDED_MEMORY]
    decision = {
        "decision_id": dec_id,
        "device_id": dev.device_id,
        "experience_id": exp.experience_id,
        "workflow_id": exp.workflow_id,
        "trigger_event_id": trigger.event_id,
        "decision": verdict.decision,
        "reason_code": verdict.reason_code,
        "rationale": verdict.clipped_rationale(),
        "backend": verdict.backend,
        "state_etag": exp.state_etag,
        "decided_at_ms": at_ms,
        "budget_after": budgets.after(),
    }
    res.outs.append(Out("decisions", dev.device_id, decision))
    why = f"; {verdict.fallback_reason}" if verdict.fallback_reason else ""
    s.timeline(
        experience_id=exp.experience_id,
        at_ms=at_ms,
        stage="decide",
        ref_id=dec_id,
        summary=f"decide: {verdict.decision} ({verdict.reason_code}) by {verdict.backend}{why}",
    )
    exp.etag += 1
    if verdict.decision in ("return_to_station", "abort"):
        exp.phase = "winding_down"
        exp.wind_down = "abort" if verdict.decision == "abort" else "return_to_station"
    if verdict.decision == "replan" and verdict.keep_areas is not None:
        keep = set(verdict.keep_areas)
        exp.areas = [a for a in exp.areas if a in keep or a in exp.patrolled]
    requests, tts = dispatch.requests_for(s.core.registry, s.core.language, exp, trigger, verdict)
    if requests:
        dispatch.publish(
            s,
            exp,
            dispatch_id=ids.dispatch_id(dec_id, 0),
            decision_id=dec_id,
            trigger_event_id=trigger.event_id,
            requests=requests,
            tts=tts,
            at_ms=at_ms,
            check=True,
        )
    lifecycle.check_end(s, exp, at_ms)


# ----------------------------------------------------------------------------------------------
# §6.3 local decisions: voice pause / resume
# ----------------------------------------------------------------------------------------------
def voice(s: Step, exp: ExperienceState | None, trigger: Trigger) -> None:
    """A voice session pauses a running patrol and its end resumes it (a local retry)."""
    dev = s.dev
    on = trigger.facts.get("voice_session_active")
    if not isinstance(on, bool):
        return
    previous = dev.voice_session_active
    dev.voice_session_active = on
    exp = active(dev, exp)
    if exp is None or on == previous:
        return
    at_ms = trigger.received_at_ms
    if on:
        if not dispatch.security_running(exp) or exp.security == "paused":
            return
        if exp.winding_down:
            s.drop("winding_down", trigger.event_id, at_ms, "voice session: winding down")
            return
        exp.voice_paused = True
        local_action(s, exp, trigger, "pause", at_ms)
        return
    if not exp.voice_paused:
        return
    exp.voice_paused = False
    if exp.winding_down:
        s.drop("winding_down", trigger.event_id, at_ms, "voice session ended: winding down")
        return
    if exp.budgets.local_retry <= 0:
        s.drop("budget_exhausted", trigger.event_id, at_ms, "no local retry left: patrol stays paused")
        return
    exp.budgets.local_retry -= 1
    local_action(s, exp, trigger, "resume", at_ms)


def local_action(s: Step, exp: ExperienceState, trigger: Trigger, operation: str, at_ms: int) -> None:
    dispatch.publish(
        s,
        exp,
        dispatch_id=ids.local_dispatch_id(s.dev.device_id, trigger.event_id),
        decision_id=None,
        trigger_event_id=trigger.event_id,
        requests=[dispatch.req(f"local_{operation}_security", "security_patrol", operation)],
        tts=None,
        at_ms=at_ms,
        check=True,
    )
