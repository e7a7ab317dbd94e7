"""Device context in the core (docs/CONTRACTS.md §9.1, §9.4): the kept snapshot, plan preconditions with
``on_unknown``, and ``requires`` on requests. Pure functions over the core's state; the other
step modules of the core call them with the step context (:class:`pipeline.step.Step`).

- :func:`apply_snapshot`: per domain, the newest envelope wins (§9.1 ordering); a kept envelope
  dated beyond the clock-skew bound (state from before the gate refused them) never does.
- :func:`admit_plan`: a plan's preconditions decide at its receive time: start, ``blocked`` at
  once, or (``on_unknown``) ask the device for a fresh snapshot and wait (phase ``pending``), ask
  the user, or block.
- :func:`on_snapshot`: a pending experience is evaluated again on each new snapshot.
- :func:`deadline_due`: a pending experience still not ``KNOWN true`` 10 s after its plan's
  receive time ends ``blocked`` at that deadline — decided, like a debounce window, by the first
  later record of the device, a live worker's timer, or the end of a replay's input.
- :func:`cancel_pending`: a user cancel while waiting ends it ``aborted`` (nothing to compensate).

Before a dispatch is published, each request's catalog ``requires`` is evaluated by
:func:`pipeline.requires.passing_requests`.
"""

from __future__ import annotations

from pipeline import dispatch, ids
from pipeline.step import Step
from supervisor.presenter import precondition_question
from tables.state import DeviceState, ExperienceState
from topics.conditions import Result as ConditionResult
from topics.conditions import evaluate
from topics.context import MAX_CLOCK_SKEW_MS, KeptEnvelope
from topics.records import DeviceContext

#: How long a plan waits for a fresh snapshot after asking for one (receive-time clock, §9.4).
REFRESH_DEADLINE_MS = 10_000


def apply_snapshot(dev: DeviceState, ctx: DeviceContext) -> int:
    """Keep, per domain, the newest envelope of ``ctx``; returns how many domains changed.

    The gate refuses a snapshot observed beyond the clock-skew bound (``clock_skew``), so a kept
    envelope is never observed more than that bound after the device's latest receive time; one
    that is (kept before the gate refused them) is replaced by the next envelope of its domain
    instead of freezing it."""
    changed = 0
    wedged_after = dev.last_received_ms + MAX_CLOCK_SKEW_MS
    for name, env in ctx.domains.items():
        kept = KeptEnvelope.of(name, env, ctx.observed_at_ms)
        old = dev.context.get(name)
        if old is None or old.observed_at_ms > wedged_after or kept.newer_than(old):
            dev.context[name] = kept
            changed += 1
    return changed


def pending_experience(dev: DeviceState, exp: ExperienceState | None) -> ExperienceState | None:
    """The device's experience while it waits for its preconditions, else None."""
    if exp is None or exp.phase != "pending" or dev.active_experience_id != exp.experience_id:
        return None
    return exp


def _goal(s: Step, exp: ExperienceState, at_ms: int, note: str) -> None:
    names = ", ".join(exp.area_name(a) or "an area" for a in exp.areas)
    goal_id = exp.plan.get("goal_id")
    s.timeline(
        experience_id=exp.experience_id,
        at_ms=at_ms,
        stage="goal",
        ref_id=exp.experience_id,
        summary=f"goal: {goal_id} ({len(exp.areas)} areas: {names}){note}",
    )


def _start(s: Step, exp: ExperienceState, at_ms: int, note: str) -> None:
    exp.phase = "active"
    s.dev.precondition_due_ms = None
    _goal(s, exp, at_ms, note)


def _block(s: Step, exp: ExperienceState, at_ms: int, why: str) -> None:
    s.dev.precondition_due_ms = None
    s.end(exp, "blocked", at_ms, why)


def admit_plan(s: Step, exp: ExperienceState, at_ms: int) -> None:
    """Start ``exp`` (just admitted) or gate it on its plan's preconditions (§9.4)."""
    dev = s.dev
    cond = exp.plan.get("preconditions")
    if cond is None:
        _goal(s, exp, at_ms, "")
        return
    result = evaluate(cond, dev.context, at_ms)
    if result.passes:
        _goal(s, exp, at_ms, f"; preconditions: {result.describe()}")
        return
    if result.state == "KNOWN":
        _block(s, exp, at_ms, f"preconditions: {result.describe()}")
        return
    on_unknown = exp.plan.get("on_unknown") or "block"
    if on_unknown == "refresh":
        exp.phase = "pending"
        dev.precondition_due_ms = at_ms + REFRESH_DEADLINE_MS
        dispatch.publish(
            s,
            exp,
            dispatch_id=ids.context_refresh_dispatch_id(dev.device_id, exp.experience_id),
            decision_id=None,
            trigger_event_id=exp.experience_id,
            requests=[dispatch.req("ctx_refresh", "device_context", "refresh", {})],
            tts=None,
            at_ms=at_ms,
            check=False,
            note=f"preconditions: {result.describe()}; waiting for a fresh snapshot",
        )
        return
    if on_unknown == "ask_user":
        text = precondition_question(
            cond,
            dev.context,
            at_ms,
            plan_area_names=exp.plan.get("area_names"),
            language=s.core.language,
        )
        dispatch.publish(
            s,
            exp,
            dispatch_id=ids.precondition_question_dispatch_id(dev.device_id, exp.experience_id),
            decision_id=None,
            trigger_event_id=exp.experience_id,
            requests=[dispatch.req("ctx_ask_user", "voice_content", "speak", {"text": text})],
            tts=text,
            at_ms=at_ms,
            check=False,
            note=f"preconditions: {result.describe()}; asking the user",
        )
    _block(s, exp, at_ms, f"preconditions: {result.describe()}")


def on_snapshot(s: Step, exp: ExperienceState | None, at_ms: int) -> None:
    """Evaluate a pending experience's preconditions again on a new snapshot: ``KNOWN true``
    starts it, ``KNOWN false`` blocks it at once; anything else keeps waiting."""
    dev = s.dev
    pending = pending_experience(dev, exp)
    if pending is None:
        return
    result: ConditionResult = evaluate(pending.plan["preconditions"], dev.context, at_ms)
    if result.passes:
        _start(s, pending, at_ms, f"; preconditions after refresh: {result.describe()}")
    elif result.state == "KNOWN":
        _block(s, pending, at_ms, f"preconditions after refresh: {result.describe()}")


def deadline_due(s: Step, exp: ExperienceState | None, now_ms: int | None) -> None:
    """Block a pending experience whose deadline has come at ``now_ms`` (None: end of a replay's
    input, every deadline has come). The end is stamped with the deadline itself."""
    dev = s.dev
    due = dev.precondition_due_ms
    if due is None or (now_ms is not None and now_ms < due):
        return
    pending = pending_experience(dev, exp)
    if pending is None:
        dev.precondition_due_ms = None
        return
    result = evaluate(pending.plan["preconditions"], dev.context, due)
    _block(
        s,
        pending,
        due,
        f"preconditions not KNOWN true within {REFRESH_DEADLINE_MS} ms: {result.describe()}",
    )


def cancel_pending(s: Step, exp: ExperienceState | None, at_ms: int) -> bool:
    """A user cancel while the preconditions wait: ``aborted``, nothing to compensate."""
    pending = pending_experience(s.dev, exp)
    if pending is None:
        return False
    s.dev.precondition_due_ms = None
    s.end(pending, "aborted", at_ms, "user cancel while waiting for preconditions")
    return True
