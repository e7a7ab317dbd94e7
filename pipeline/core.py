"""The functional core: state and one admitted record in, new state and output records out.

No I/O and no wall clock: every time comes from the records (their receive time is the Kafka
timestamp), so the live worker and ``guardian replay`` reach the same results. State objects are
updated in place and handed back; the caller stores them.

Order of checks for an observation (docs/CONTRACTS.md §4.3, steps 5–11; steps 1–4 are the gate's):
dedup → freshness → debounce → correlation → policy → budget → supervisor. One deliberate
refinement: the ``cross_device`` part of step 8 is checked first, so a record correlated to
another device's experience is always dead-lettered and, like every dead-lettered record (§10),
changes no state: not the snapshot, not the dedup keys, not the device's clock; nothing else moves.

State stays bounded whatever a device sends (§2 rule 8): per-area debounce states only for the
active plan's areas, patrolled areas only among the plan's, started steps only for compensable
catalog operations, and bounded memories of decided and waiting triggers.

Device context v2 (§9) lives in :mod:`pipeline.context_steps`, called from small hooks here: the
kept snapshot, plan preconditions (an experience may wait, phase ``pending``, for a refresh until a
deadline decided like a debounce window), and ``requires`` on requests before a dispatch goes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from pipeline import context_steps, ids
from supervisor.presenter import Language, user_question
from supervisor.verdict import Verdict
from tables.state import (
    DECIDED_MEMORY,
    MAX_PENDING,
    RECENT_PROMOTED,
    Budgets,
    DebounceState,
    DeviceState,
    ExperienceState,
    SnapshotEntry,
    Trigger,
)
from topics.envelope import Out
from topics.gate import make_dead_letter
from topics.hostile import Redactor
from topics.records import DeviceContext, ExperiencePlan, Observation, TaskEvent
from topics.registry import Registry

#: §4.3 step 5: at least 10 minutes, and never shorter than the longest TTL.
MIN_DEDUP_WINDOW_MS = 600_000
#: §4.3 step 6: an observation more than 5 s in the future is clock skew.
MAX_CLOCK_SKEW_MS = 5_000

VOICE_PIPELINE_CONTRACT = "voice_llm.pipeline_state_changed"

#: Decider: rules (synchronous) for inline decisions; None queues triggers for an async backend.
Decider = Callable[[ExperienceState, Trigger], Verdict]
OwnerOf = Callable[[str], str | None]


@dataclass(slots=True)
class RawRef:
    """Where an input record came from (for dead letters the core writes itself)."""

    source_topic: str
    partition: int
    offset: int
    value: bytes


@dataclass(slots=True)
class Result:
    """What one step of the core did."""

    outs: list[Out] = field(default_factory=list)
    #: the experience state to store for the device (None: unchanged / none)
    experience: ExperienceState | None = None
    #: remember this event ID as seen (dedup memory)
    mark_seen: bool = False
    #: a plan was accepted: (experience_id, device_id) for the cross-device index
    owner: tuple[str, str] | None = None
    #: triggers promoted but not decided yet (async backend)
    queued: list[Trigger] = field(default_factory=list)


def _summary_facts(facts: dict[str, Any]) -> str:
    return " ".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in sorted(facts.items()))


class Pipeline:
    """The judgement of the pipeline over one device's state; registries and language are fixed."""

    def __init__(self, registry: Registry, *, language: Language = "ko") -> None:
        self.registry = registry
        self.language: Language = language
        self.dedup_window_ms = max(MIN_DEDUP_WINDOW_MS, registry.max_ttl_ms)
        self.redactor = Redactor(
            {name for spec in registry.contracts.values() for name in spec.facts}, registry.arg_types
        )

    # ------------------------------------------------------------------------------------------
    # helpers
    # ------------------------------------------------------------------------------------------
    def _timeline(
        self,
        dev: DeviceState,
        res: Result,
        *,
        experience_id: str | None,
        at_ms: int,
        stage: str,
        ref_id: str,
        summary: str,
        drop_reason: str | None = None,
        status: str | None = None,
    ) -> None:
        dev.timeline_seq += 1
        entry: dict[str, Any] = {
            "device_id": dev.device_id,
            "experience_id": experience_id,
            "seq": dev.timeline_seq,
            "at_ms": at_ms,
            "stage": stage,
            "ref_id": ref_id,
            "summary": summary[:300],
            "drop_reason": drop_reason,
        }
        if stage == "end":
            entry["status"] = status
        res.outs.append(Out("timeline", dev.device_id, entry))

    def _drop(
        self,
        dev: DeviceState,
        res: Result,
        reason: str,
        ref_id: str,
        at_ms: int,
        summary: str,
        experience_id: str | None = None,
    ) -> None:
        if experience_id is None:
            experience_id = dev.active_experience_id
        self._timeline(
            dev,
            res,
            experience_id=experience_id,
            at_ms=at_ms,
            stage="drop",
            ref_id=ref_id,
            summary=summary,
            drop_reason=reason,
        )

    @staticmethod
    def _active(dev: DeviceState, exp: ExperienceState | None) -> ExperienceState | None:
        """The device's running experience (not ended, not waiting for its preconditions)."""
        if exp is None or exp.phase in ("ended", "pending") or dev.active_experience_id != exp.experience_id:
            return None
        return exp

    def is_duplicate(self, seen_at: int | None, received_at_ms: int) -> bool:
        """A seen event within the dedup window (receive-time clock)."""
        return seen_at is not None and received_at_ms - seen_at <= self.dedup_window_ms

    # ------------------------------------------------------------------------------------------
    # plans (§3)
    # ------------------------------------------------------------------------------------------
    def on_plan(
        self,
        dev: DeviceState,
        exp: ExperienceState | None,
        plan: ExperiencePlan,
        received_at_ms: int,
        *,
        owner_of: OwnerOf | None = None,
        raw: RawRef | None = None,
    ) -> Result:
        res = Result()
        # §2 rule 9: an experience_id belongs to the first device whose plan used it
        owner = owner_of(plan.experience_id) if owner_of is not None else None
        if owner is not None and owner != dev.device_id:
            self._dead_letter(
                res,
                "plans",
                plan.model_dump(mode="json"),
                raw,
                dev.device_id,
                received_at_ms,
                event_id=plan.experience_id,
                detail="experience_id belongs to another device",
                path="experience_id",
            )
            return res
        dev.last_received_ms = max(dev.last_received_ms, received_at_ms)
        known = (exp is not None and exp.experience_id == plan.experience_id) or (
            dev.ended_status(plan.experience_id) is not None
        )
        if known:
            self._drop(
                dev,
                res,
                "duplicate",
                plan.experience_id,
                received_at_ms,
                "plan already received",
                experience_id=plan.experience_id,
            )
            return res
        context_steps.deadline_due(self, dev, exp, res, received_at_ms)
        current = self._active(dev, exp) or context_steps.pending_experience(dev, exp)
        if current is not None:
            self._end(dev, current, res, "superseded", received_at_ms, f"superseded by {plan.experience_id}")
        plan_dict = plan.model_dump(mode="json")
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
            plan=plan_dict,
            areas=list(plan.areas),
            budgets=budgets,
        )
        dev.active_experience_id = plan.experience_id
        self._prune_debounce(dev, new)
        res.experience = new
        context_steps.admit_plan(self, dev, new, res, received_at_ms)
        if owner is None:
            res.owner = (plan.experience_id, dev.device_id)
        return res

    def _prune_debounce(self, dev: DeviceState, exp: ExperienceState) -> None:
        """Drop the per-area debounce states of areas outside the new plan (§2 rule 8)."""
        areas = exp.plan_areas
        for key in list(dev.debounce):
            contract, sep, which = key.partition("/")
            spec = self.registry.contracts.get(contract)
            per_area = sep and spec is not None and spec.debounce is not None and spec.debounce.per_fact
            if per_area and which not in areas:
                del dev.debounce[key]

    # ------------------------------------------------------------------------------------------
    # device context v2 (§9): kept per domain, never promoted; a pending plan is evaluated again
    # ------------------------------------------------------------------------------------------
    def on_device_context(
        self, dev: DeviceState, exp: ExperienceState | None, ctx: DeviceContext, received_at_ms: int
    ) -> Result:
        res = Result(experience=exp)
        dev.last_received_ms = max(dev.last_received_ms, received_at_ms)
        context_steps.deadline_due(self, dev, exp, res, received_at_ms)
        if context_steps.apply_snapshot(dev, ctx):
            context_steps.on_snapshot(self, dev, exp, res, received_at_ms)
        return res

    # ------------------------------------------------------------------------------------------
    # observations (§4.3 steps 5–11)
    # ------------------------------------------------------------------------------------------
    def on_observation(
        self,
        dev: DeviceState,
        exp: ExperienceState | None,
        obs: Observation,
        received_at_ms: int,
        *,
        seen_at: int | None,
        owner_of: OwnerOf,
        decide: Decider | None,
        raw: RawRef | None = None,
    ) -> Result:
        res = Result(experience=exp)
        spec = self.registry.contracts[obs.type]
        # cross_device (step 8, checked first: a dead-lettered record changes no state, §10)
        corr = obs.correlation
        if spec.scope == "scoped" and corr is not None:
            owner = owner_of(corr.experience_id)
            if owner is not None and owner != dev.device_id:
                self._cross_device(dev, res, obs, received_at_ms, raw)
                return res
        dev.last_received_ms = max(dev.last_received_ms, received_at_ms)
        # 5. deduplication
        if self.is_duplicate(seen_at, received_at_ms):
            self._drop(dev, res, "duplicate", obs.event_id, received_at_ms, f"duplicate {obs.type}")
            return res
        res.mark_seen = True
        # pending debounce changes (and a precondition deadline) passed on the receive-time clock
        context_steps.deadline_due(self, dev, exp, res, received_at_ms)
        self._confirm_due(dev, exp, res, received_at_ms, owner_of, decide)
        # 6. freshness
        ttl = spec.default_ttl_ms if obs.ttl_ms is None else min(obs.ttl_ms, spec.default_ttl_ms)
        if obs.observed_at_ms > received_at_ms + MAX_CLOCK_SKEW_MS:
            self._drop(
                dev,
                res,
                "clock_skew",
                obs.event_id,
                received_at_ms,
                f"{obs.type} observed {obs.observed_at_ms - received_at_ms} ms in the future",
            )
            return res
        age = max(obs.freshness_ms, received_at_ms - obs.observed_at_ms)
        fresh = age <= ttl
        facts = dict(obs.facts)
        current = dev.snapshot.get(obs.type)
        if current is None or obs.observed_at_ms > current.observed_at_ms:
            dev.snapshot[obs.type] = SnapshotEntry(
                obs.event_id, obs.observed_at_ms, received_at_ms, facts, stale=not fresh
            )
        if not fresh:
            self._drop(
                dev, res, "stale", obs.event_id, received_at_ms, f"{obs.type} age {age} ms > ttl {ttl} ms"
            )
            return res
        trigger = Trigger(
            event_id=obs.event_id,
            type=obs.type,
            observed_at_ms=obs.observed_at_ms,
            received_at_ms=received_at_ms,
            facts=facts,
            correlation=(corr.experience_id, corr.workflow_id, corr.step_id) if corr else None,
            requires_cloud_decision=obs.requires_cloud_decision,
        )
        # confirmation by a later record's observed_at_ms
        self._confirm_due(dev, exp, res, obs.observed_at_ms, owner_of, decide, by_observed=True)
        exp = res.experience
        if obs.type == VOICE_PIPELINE_CONTRACT:
            self._voice(dev, exp, res, trigger)
            return res
        # 7. debounce
        debounce = spec.debounce
        if debounce is not None and spec.debounce_ms > 0:
            value = facts.get(debounce.fact)
            key = obs.type
            if debounce.per_fact:
                # §2 rule 8: a state per area only for the areas of the active plan
                which = facts.get(debounce.per_fact)
                active = self._active(dev, exp)
                if active is None or which not in active.plan_areas:
                    why = "no active experience" if active is None else "an area outside the active plan"
                    self._drop(dev, res, "uncorrelated", obs.event_id, received_at_ms, f"{obs.type}: {why}")
                    return res
                key = f"{obs.type}/{which}"
            st = dev.debounce.get(key)
            if st is None:
                st = DebounceState(stable=debounce.resting)
                dev.debounce[key] = st
            if st.pending is None:
                if value == st.stable:
                    return res
                st.pending, st.pending_value, st.window_ms = trigger, value, spec.debounce_ms
                return res
            if value == st.pending_value:
                return res
            suppressed = st.pending
            self._drop(
                dev,
                res,
                "debounced",
                suppressed.event_id,
                received_at_ms,
                f"{obs.type} change to {st.pending_value} reverted within {spec.debounce_ms} ms",
            )
            if value == st.stable:
                st.pending, st.pending_value = None, None
            else:
                st.pending, st.pending_value, st.window_ms = trigger, value, spec.debounce_ms
            return res
        self._promote(dev, res, trigger, received_at_ms, decide)
        return res

    def _cross_device(
        self,
        dev: DeviceState,
        res: Result,
        obs: Observation,
        received_at_ms: int,
        raw: RawRef | None,
    ) -> None:
        self._dead_letter(
            res,
            "observations",
            obs.model_dump(mode="json"),
            raw,
            dev.device_id,
            received_at_ms,
            event_id=obs.event_id,
            detail="correlation names an experience of another device",
            path="correlation.experience_id",
        )

    def _dead_letter(
        self,
        res: Result,
        kind: str,
        record: dict[str, Any],
        raw: RawRef | None,
        device_id: str,
        received_at_ms: int,
        *,
        event_id: str,
        detail: str,
        path: str,
    ) -> None:
        """A ``cross_device`` dead letter of an admitted record (its redacted copy, §10)."""
        value = raw.value if raw is not None else orjson.dumps(record)
        letter = make_dead_letter(
            "cross_device",
            value,
            source_topic=raw.source_topic if raw else "",
            partition=raw.partition if raw else 0,
            offset=raw.offset if raw else 0,
            key=device_id,
            received_at_ms=received_at_ms,
            event_id=event_id,
            detail=detail,
            offending_paths=(path,),
            payload=self.redactor.payload(kind, record),
        )
        res.outs.append(Out("deadletter", device_id, letter.model_dump(mode="json")))

    # -- debounce confirmation -----------------------------------------------------------------
    def _confirm(
        self,
        dev: DeviceState,
        exp: ExperienceState | None,
        res: Result,
        due: Callable[[DebounceState], bool],
        owner_of: OwnerOf,
        decide: Decider | None,
    ) -> None:
        if not dev.debounce:
            return
        ready = [
            (st.pending.received_at_ms, key, st)
            for key, st in dev.debounce.items()
            if st.pending is not None and due(st)
        ]
        if not ready:
            return
        ready.sort(key=lambda r: (r[0], r[1]))
        for _, _key, st in ready:
            trigger, value = st.pending, st.pending_value
            assert trigger is not None
            st.stable, st.pending, st.pending_value = value, None, None
            spec = self.registry.contracts[trigger.type]
            if spec.debounce is None or value != spec.debounce.alert:
                continue
            self._promote(dev, res, trigger, trigger.received_at_ms + st.window_ms, decide)

    def _confirm_due(
        self,
        dev: DeviceState,
        exp: ExperienceState | None,
        res: Result,
        now_ms: int,
        owner_of: OwnerOf,
        decide: Decider | None,
        *,
        by_observed: bool = False,
    ) -> None:
        """Confirm the pending changes whose window has passed at ``now_ms``: on the receive-time
        clock, or (``by_observed``) by a later record's ``observed_at_ms``."""
        if not dev.has_pending():
            return

        def due(st: DebounceState) -> bool:
            assert st.pending is not None
            start = st.pending.observed_at_ms if by_observed else st.pending.received_at_ms
            return start + st.window_ms <= now_ms

        self._confirm(dev, exp, res, due, owner_of, decide)

    def confirm_pending(
        self,
        dev: DeviceState,
        exp: ExperienceState | None,
        now_ms: int | None,
        *,
        owner_of: OwnerOf,
        decide: Decider | None,
    ) -> Result:
        """Confirm pending debounce changes of a quiet device (live: a timer on the receive-time clock;
        replay: ``now_ms=None`` at the end of its input confirms every one)."""
        res = Result(experience=exp)
        context_steps.deadline_due(self, dev, exp, res, now_ms)
        if now_ms is None:
            self._confirm(dev, exp, res, lambda st: True, owner_of, decide)
        else:
            self._confirm_due(dev, exp, res, now_ms, owner_of, decide)
        return res

    # -- steps 8–11 ----------------------------------------------------------------------------
    def _promote(
        self, dev: DeviceState, res: Result, trigger: Trigger, at_ms: int, decide: Decider | None
    ) -> None:
        spec = self.registry.contracts[trigger.type]
        exp = self._active(dev, res.experience)
        if spec.scope == "unscoped":
            return
        if spec.scope == "device":
            if not context_steps.cancel_pending(self, dev, res.experience, res, at_ms):
                self._cancel(dev, exp, res, trigger, at_ms)
            return
        corr = trigger.correlation
        if corr is None or exp is None:
            why = "no correlation" if corr is None else "no active experience"
            self._drop(dev, res, "uncorrelated", trigger.event_id, at_ms, f"{trigger.type}: {why}")
            return
        exp_id, workflow_id, step_id = corr
        step_ids = {s["step_id"] for s in exp.plan["steps"]}
        if exp_id != exp.experience_id or workflow_id != exp.workflow_id or step_id not in step_ids:
            self._drop(
                dev,
                res,
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
            self._drop(dev, res, "not_subscribed", trigger.event_id, at_ms, f"{trigger.type}: state only")
            return
        # 10. budget
        if exp.winding_down:
            self._drop(dev, res, "winding_down", trigger.event_id, at_ms, f"{trigger.type}: winding down")
            return
        if exp.budgets.decisions >= exp.budgets.max_decisions:
            self._drop(
                dev,
                res,
                "budget_exhausted",
                trigger.event_id,
                at_ms,
                f"{trigger.type}: {exp.budgets.max_decisions} decisions already taken",
            )
            return
        if decide is None and len(exp.pending) >= MAX_PENDING:
            # §2 rule 8: the queue of an asynchronous backend is bounded too
            self._drop(
                dev,
                res,
                "budget_exhausted",
                trigger.event_id,
                at_ms,
                f"{trigger.type}: {MAX_PENDING} triggers already wait for a decision",
            )
            return
        # 11. supervisor
        self._observe(dev, exp, res, trigger, at_ms)
        exp.recent.append(trigger)
        if len(exp.recent) > RECENT_PROMOTED:
            del exp.recent[: len(exp.recent) - RECENT_PROMOTED]
        area = trigger.facts.get("area_id")
        if isinstance(area, str):
            exp.current_area = area
        if decide is None:
            exp.pending.append(trigger)
            res.queued.append(trigger)
            return
        verdict = decide(exp, trigger)
        self._apply(dev, exp, res, trigger, verdict, exp.etag, at_ms)

    def _observe(
        self, dev: DeviceState, exp: ExperienceState, res: Result, trigger: Trigger, at_ms: int
    ) -> None:
        """The timeline's ``observe`` entry: a trigger reaches the supervisor."""
        self._timeline(
            dev,
            res,
            experience_id=exp.experience_id,
            at_ms=at_ms,
            stage="observe",
            ref_id=trigger.event_id,
            summary=f"observe: {trigger.type} {_summary_facts(trigger.facts)}",
        )

    def _cancel(
        self, dev: DeviceState, exp: ExperienceState | None, res: Result, trigger: Trigger, at_ms: int
    ) -> None:
        if exp is None:
            self._drop(dev, res, "uncorrelated", trigger.event_id, at_ms, "cancel: no active experience")
            return
        if exp.winding_down:
            self._drop(dev, res, "winding_down", trigger.event_id, at_ms, "cancel: already winding down")
            return
        self._observe(dev, exp, res, trigger, at_ms)
        channel = trigger.facts.get("channel", "app")
        verdict = Verdict(
            "abort", "user_cancel", f"The user cancelled by {channel}; user cancel always wins."
        )
        self._apply(dev, exp, res, trigger, verdict, exp.etag, at_ms)

    # ------------------------------------------------------------------------------------------
    # decisions and dispatch (§6, §7)
    # ------------------------------------------------------------------------------------------
    def apply_verdict(
        self,
        dev: DeviceState,
        exp: ExperienceState | None,
        trigger: Trigger,
        verdict: Verdict,
        *,
        decided_on_etag: int,
        at_ms: int,
    ) -> Result:
        """Apply a decision reached asynchronously on state version ``decided_on_etag``."""
        res = Result(experience=exp)
        if exp is None or exp.experience_id != (trigger.correlation or ("",))[0]:
            return res
        if trigger.event_id in exp.decided:
            return res
        self._apply(dev, exp, res, trigger, verdict, decided_on_etag, at_ms)
        return res

    def _apply(
        self,
        dev: DeviceState,
        exp: ExperienceState,
        res: Result,
        trigger: Trigger,
        verdict: Verdict,
        decided_on_etag: int,
        at_ms: int,
    ) -> None:
        dec_id = ids.decision_id(dev.device_id, exp.experience_id, trigger.event_id)
        exp.pending = [t for t in exp.pending if t.event_id != trigger.event_id]
        if trigger.event_id in exp.decided:
            return
        user_cancel = verdict.decision == "abort" and verdict.reason_code == "user_cancel"
        if decided_on_etag != exp.etag:
            self._drop(
                dev,
                res,
                "stale_etag",
                dec_id,
                at_ms,
                f"decision on e{decided_on_etag} discarded: state is now {exp.state_etag}",
            )
            return
        if exp.phase != "active":
            self._drop(
                dev, res, "winding_down", trigger.event_id, at_ms, "decision after wind-down discarded"
            )
            return
        budgets = exp.budgets
        if not user_cancel and budgets.decisions >= budgets.max_decisions:
            self._drop(dev, res, "budget_exhausted", trigger.event_id, at_ms, "decision budget spent")
            return
        budgets.decisions += 1
        if verdict.decision == "ask_user":
            budgets.user_question = max(0, budgets.user_question - 1)
        elif verdict.decision == "replan":
            budgets.cloud_replan = max(0, budgets.cloud_replan - 1)
        exp.decided.append(trigger.event_id)
        if len(exp.decided) > DECIDED_MEMORY:
            del exp.decided[: len(exp.decided) - DECIDED_MEMORY]
        decided_etag = exp.state_etag
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
            "state_etag": decided_etag,
            "decided_at_ms": at_ms,
            "budget_after": budgets.after(),
        }
        res.outs.append(Out("decisions", dev.device_id, decision))
        why = f"; {verdict.fallback_reason}" if verdict.fallback_reason else ""
        self._timeline(
            dev,
            res,
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
        requests, tts = self._requests_for(exp, trigger, verdict)
        if requests:
            self._publish_dispatch(
                dev,
                exp,
                res,
                dispatch_id=ids.dispatch_id(dec_id, 0),
                decision_id=dec_id,
                trigger_event_id=trigger.event_id,
                requests=requests,
                tts=tts,
                at_ms=at_ms,
                check=True,
            )
        self._check_end(dev, exp, res, at_ms)

    def _security_running(self, exp: ExperienceState) -> bool:
        return exp.security_started and exp.security != "stopped"

    def _requests_for(
        self, exp: ExperienceState, trigger: Trigger, verdict: Verdict
    ) -> tuple[list[dict[str, Any]], str | None]:
        kind = verdict.decision
        if kind == "return_to_station":
            reqs: list[dict[str, Any]] = []
            if self._security_running(exp):
                reqs.append(_req("sup_stop_security", "security_patrol", "stop"))
            ret = _req("sup_return_home", "movement", "return_to_station")
            if reqs:
                ret["depends_on"] = ["sup_stop_security"]
            reqs.append(ret)
            return reqs, None
        if kind == "abort":
            reqs = []
            for capability, operation in exp.started_steps:
                comp = self._compensation(capability, operation)
                if comp is None:
                    continue
                if (capability, operation) == ("security_patrol", "start") and not self._security_running(
                    exp
                ):
                    continue
                step_id = f"sup_compensate_{capability}_{operation}"
                if any(r["step_id"] == step_id for r in reqs):
                    continue
                reqs.append(_req(step_id, capability, comp))
            ret = _req("sup_return_home", "movement", "return_to_station")
            if reqs:
                ret["depends_on"] = [r["step_id"] for r in reqs]
            reqs.append(ret)
            return reqs, None
        if kind == "ask_user":
            area = trigger.facts.get("area_id")
            name = exp.area_name(area if isinstance(area, str) else exp.current_area)
            text = user_question(verdict.reason_code, name, self.language)
            return [_req("sup_ask_user", "voice_content", "speak", {"text": text})], text
        if kind == "replan":
            if verdict.replan_steps:
                return [dict(s) for s in verdict.replan_steps], None
            reqs = []
            previous: str | None = None
            for area in exp.remaining_areas():
                step_id = f"sup_replan_move_{area}"
                r = _req(step_id, "movement", "move_to_room", {"area_id": area})
                if previous:
                    r["depends_on"] = [previous]
                reqs.append(r)
                previous = step_id
            return reqs, None
        return [], None

    def _compensation(self, capability: str, operation: str) -> str | None:
        """The catalog's compensation of a started operation (``security_patrol.start`` ->
        ``stop``), or None."""
        cap = self.registry.capabilities.get(capability)
        return cap.compensation.get(operation) if cap is not None else None

    def safety_actions(self, exp: ExperienceState) -> set[str]:
        """§7: the compensation of every step the device reported started (any capability, even
        one outside ``allowed_action_contracts`` or ``NO_GO``) and ``movement.return_to_station``:
        never refused."""
        names = {"movement.return_to_station"}
        if exp.security_started:
            names.add("security_patrol.stop")
        for capability, operation in exp.started_steps:
            comp = self._compensation(capability, operation)
            if comp is not None:
                names.add(f"{capability}.{comp}")
        return names

    def check_requests(self, exp: ExperienceState, requests: list[dict[str, Any]]) -> str | None:
        """Why a dispatch may not be published (catalog, allowed_action_contracts), or None."""
        allowed = set(exp.plan.get("allowed_action_contracts") or ())
        safe = self.safety_actions(exp)
        step_ids = {r.get("step_id") for r in requests}
        cameras = 0
        for r in requests:
            capability, operation = r.get("capability"), r.get("operation")
            cap = self.registry.capabilities.get(str(capability))
            if cap is None or operation not in cap.operations:
                return f"{capability}.{operation} is not in the capability catalog"
            name = f"{capability}.{operation}"
            safety = name in safe
            if cap.exposure == "NO_GO" and not safety:
                return f"{capability} is never exposed to a planner"
            missing = [a for a in cap.operations[str(operation)] if a not in (r.get("args") or {})]
            if missing:
                return f"{capability}.{operation} misses args {', '.join(missing)}"
            for dep in r.get("depends_on") or ():
                if dep not in step_ids:
                    return f"{r.get('step_id')} depends on unknown step {dep}"
            if name not in allowed and not safety:
                return f"{name} is outside allowed_action_contracts"
            if "camera" in cap.resources and operation == "start":
                cameras += 1
        if cameras > 1:
            return "resource_conflict: the dispatch would hold the camera twice"
        return None

    def _publish_dispatch(
        self,
        dev: DeviceState,
        exp: ExperienceState,
        res: Result,
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
        if check:
            problem = self.check_requests(exp, requests)
            if problem is not None:
                self._drop(
                    dev,
                    res,
                    "plan_rejected",
                    dispatch_id,
                    at_ms,
                    f"dispatch not published: {problem}",
                    experience_id=exp.experience_id,
                )
                return False
            requests = context_steps.passing_requests(self, dev, exp, res, dispatch_id, requests, at_ms)
            if not requests:
                return False
        kind = (
            "device_workflow_requests"
            if any(r.get("depends_on") for r in requests)
            else "device_task_requests"
        )
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
        res.outs.append(Out("dispatch", dev.device_id, dispatch))
        names = ", ".join(f"{r['capability']}.{r['operation']}" for r in requests)
        self._timeline(
            dev,
            res,
            experience_id=exp.experience_id,
            at_ms=at_ms,
            stage="act",
            ref_id=dispatch_id,
            summary=f"dispatch: {names}" + (f"; {note}" if note else ""),
        )
        return True

    # ------------------------------------------------------------------------------------------
    # §6.3 local decisions: voice pause / resume
    # ------------------------------------------------------------------------------------------
    def _voice(self, dev: DeviceState, exp: ExperienceState | None, res: Result, trigger: Trigger) -> None:
        active = trigger.facts.get("voice_session_active")
        if not isinstance(active, bool):
            return
        previous = dev.voice_session_active
        dev.voice_session_active = active
        exp = self._active(dev, exp)
        if exp is None or active == previous:
            return
        at_ms = trigger.received_at_ms
        if active:
            if not self._security_running(exp) or exp.security == "paused":
                return
            if exp.winding_down:
                self._drop(dev, res, "winding_down", trigger.event_id, at_ms, "voice session: winding down")
                return
            exp.voice_paused = True
            self._local_action(dev, exp, res, trigger, "pause", at_ms)
            return
        if not exp.voice_paused:
            return
        exp.voice_paused = False
        if exp.winding_down:
            self._drop(dev, res, "winding_down", trigger.event_id, at_ms, "voice session ended: winding down")
            return
        if exp.budgets.local_retry <= 0:
            self._drop(
                dev,
                res,
                "budget_exhausted",
                trigger.event_id,
                at_ms,
                "no local retry left: patrol stays paused",
            )
            return
        exp.budgets.local_retry -= 1
        self._local_action(dev, exp, res, trigger, "resume", at_ms)

    def _local_action(
        self,
        dev: DeviceState,
        exp: ExperienceState,
        res: Result,
        trigger: Trigger,
        operation: str,
        at_ms: int,
    ) -> None:
        self._publish_dispatch(
            dev,
            exp,
            res,
            dispatch_id=ids.local_dispatch_id(dev.device_id, trigger.event_id),
            decision_id=None,
            trigger_event_id=trigger.event_id,
            requests=[_req(f"local_{operation}_security", "security_patrol", operation)],
            tts=None,
            at_ms=at_ms,
            check=True,
        )

    # ------------------------------------------------------------------------------------------
    # task events (§5)
    # ------------------------------------------------------------------------------------------
    def on_task_event(
        self,
        dev: DeviceState,
        exp: ExperienceState | None,
        event: TaskEvent,
        received_at_ms: int,
        *,
        seen_at: int | None,
        owner_of: OwnerOf,
        decide: Decider | None,
    ) -> Result:
        res = Result(experience=exp)
        dev.last_received_ms = max(dev.last_received_ms, received_at_ms)
        if self.is_duplicate(seen_at, received_at_ms):
            self._drop(
                dev,
                res,
                "duplicate",
                event.event_id,
                received_at_ms,
                f"duplicate task event {event.sequence}",
            )
            return res
        res.mark_seen = True
        context_steps.deadline_due(self, dev, exp, res, received_at_ms)
        self._confirm_due(dev, exp, res, received_at_ms, owner_of, decide)
        if dev.last_task_sequence is not None and event.sequence <= dev.last_task_sequence:
            self._drop(
                dev,
                res,
                "out_of_order",
                event.event_id,
                received_at_ms,
                f"task event sequence {event.sequence} <= {dev.last_task_sequence}",
            )
            return res
        dev.last_task_sequence = event.sequence
        exp = self._active(dev, res.experience)
        if exp is None or event.experience_id != exp.experience_id:
            return res
        step = (event.capability, event.operation)
        if (
            event.status in ("started", "progress", "paused", "resumed", "completed")
            and step not in exp.started_steps
            and self._compensation(*step) is not None
        ):
            # §2 rule 8: tracked per compensable catalog operation, never per event or step ID
            exp.started_steps.append(step)
        evidence = event.evidence
        if evidence is not None and evidence.kind == "physical" and evidence.signal:
            self._evidence(dev, exp, res, event, evidence.signal, evidence.area_id, received_at_ms)
        if event.status == "aborted" and not exp.winding_down:
            reason = event.reason_code or "aborted"
            self._end(
                dev,
                exp,
                res,
                "failed",
                received_at_ms,
                f"device aborted {event.capability}.{event.operation}: {reason}",
            )
            return res
        self._check_end(dev, exp, res, received_at_ms)
        return res

    def _evidence(
        self,
        dev: DeviceState,
        exp: ExperienceState,
        res: Result,
        event: TaskEvent,
        signal: str,
        area_id: str | None,
        at_ms: int,
    ) -> None:
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
        self._timeline(
            dev,
            res,
            experience_id=exp.experience_id,
            at_ms=at_ms,
            stage="evidence",
            ref_id=event.event_id,
            summary=f"evidence: {signal}{where}",
        )

    def _check_end(self, dev: DeviceState, exp: ExperienceState, res: Result, at_ms: int) -> None:
        if exp.phase == "ended":
            return
        if exp.phase == "winding_down":
            if exp.docked and (not exp.security_started or exp.security == "stopped"):
                status = "aborted" if exp.wind_down == "abort" else "returned"
                self._end(
                    dev,
                    exp,
                    res,
                    status,
                    at_ms,
                    "docked" + (", security stopped" if exp.security_started else ""),
                )
            return
        if exp.success_met():
            self._end(dev, exp, res, "completed", at_ms, "every success condition has physical evidence")

    def _end(
        self, dev: DeviceState, exp: ExperienceState, res: Result, status: str, at_ms: int, why: str
    ) -> None:
        exp.phase, exp.status = "ended", status
        exp.etag += 1
        self._timeline(
            dev,
            res,
            experience_id=exp.experience_id,
            at_ms=at_ms,
            stage="end",
            ref_id=exp.experience_id,
            summary=f"end: {status} ({why})",
            status=status,
        )
        if dev.active_experience_id == exp.experience_id:
            dev.active_experience_id = None
            dev.precondition_due_ms = None
        dev.remember_ended(exp.experience_id, status)


def _req(step_id: str, capability: str, operation: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"step_id": step_id, "capability": capability, "operation": operation, "args": args or {}}
