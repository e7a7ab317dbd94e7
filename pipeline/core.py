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

This module is the facade the shell and replay call; the steps live in modules of their own, each
taking the step context (:class:`pipeline.step.Step`, which owns ``drop()``, ``timeline()`` and
``end()``):

- :mod:`pipeline.plans` — plans (§3) and device context snapshots (§9);
- :mod:`pipeline.observations` — steps 5–7 and the ``cross_device`` dead letter;
- :mod:`pipeline.debounce` — step 7: hold, suppress, confirm;
- :mod:`pipeline.decisions` — steps 8–11, decisions applied, user cancel, §6.3 local decisions;
- :mod:`pipeline.dispatch` — §7 requests, checks and the dispatch record;
- :mod:`pipeline.task_events` and :mod:`pipeline.lifecycle` — §5 task events, evidence, the end;
- :mod:`pipeline.context_steps` — device context v2 (§9): the kept snapshot, plan preconditions (an
  experience may wait, phase ``pending``, for a refresh until a deadline decided like a debounce
  window), and ``requires`` on requests before a dispatch goes.
"""

from __future__ import annotations

from typing import Any

from pipeline import context_steps, debounce, decisions, dispatch, observations, plans, task_events
from pipeline.step import ClaimOf, Decider, OwnerOf, RawRef, Result, Step
from supervisor.presenter import Language
from supervisor.verdict import Verdict
from tables.state import DeviceState, ExperienceState, Trigger
from topics.hostile import Redactor
from topics.records import DeviceContext, ExperiencePlan, Observation, TaskEvent
from topics.registry import Registry

#: §4.3 step 5: at least 10 minutes, and never shorter than the longest TTL.
MIN_DEDUP_WINDOW_MS = 600_000


class Pipeline:
    """The judgement of the pipeline over one device's state; registries and language are fixed.

    Each method takes the device's state (updated in place) and one admitted record and returns a
    :class:`~pipeline.step.Result`."""

    def __init__(self, registry: Registry, *, language: Language = "ko") -> None:
        self.registry = registry
        self.language: Language = language
        self.dedup_window_ms = max(MIN_DEDUP_WINDOW_MS, registry.max_ttl_ms)
        self.redactor = Redactor(
            {name for spec in registry.contracts.values() for name in spec.facts}, registry.arg_types
        )

    def is_duplicate(self, seen_at: int | None, received_at_ms: int) -> bool:
        """A seen event within the dedup window (receive-time clock)."""
        return seen_at is not None and received_at_ms - seen_at <= self.dedup_window_ms

    def on_plan(
        self,
        dev: DeviceState,
        exp: ExperienceState | None,
        plan: ExperiencePlan,
        received_at_ms: int,
        *,
        owner_of: OwnerOf | None = None,
        raw: RawRef | None = None,
        plan_json: dict[str, Any] | None = None,
        claim_of: ClaimOf | None = None,
    ) -> Result:
        """``plan_json``: the plan's ``model_dump(mode="json")`` when the caller has it (the gate's)."""
        s = Step(self, dev, Result(), owner_of=owner_of, claim_of=claim_of)
        plans.on_plan(s, exp, plan, received_at_ms, raw, plan_json)
        return s.done()

    def on_device_context(
        self, dev: DeviceState, exp: ExperienceState | None, ctx: DeviceContext, received_at_ms: int
    ) -> Result:
        s = Step(self, dev, Result(experience=exp))
        plans.on_device_context(s, ctx, received_at_ms)
        return s.done()

    def on_observation(
        self,
        dev: DeviceState,
        exp: ExperienceState | None,
        obs: Observation,
        received_at_ms: int,
        seen_at: int | None,
        owner_of: OwnerOf,
        decide: Decider | None,
        raw: RawRef | None = None,
    ) -> Result:
        """(Called with positional arguments: once per observation.)"""
        s = Step(self, dev, Result([], exp), decide, owner_of)
        observations.on_observation(s, obs, received_at_ms, seen_at, raw)
        return s.done()

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
        s = Step(self, dev, Result(experience=exp), decide=decide, owner_of=owner_of)
        task_events.on_task_event(s, event, received_at_ms, seen_at)
        return s.done()

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
        s = Step(self, dev, Result(experience=exp), decide=decide, owner_of=owner_of)
        context_steps.deadline_due(s, exp, now_ms)
        if now_ms is None:
            debounce.confirm(s, lambda st: True)
        else:
            debounce.confirm_due(s, now_ms)
        return s.done()

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
        s = Step(self, dev, Result(experience=exp))
        decisions.apply_verdict(s, exp, trigger, verdict, decided_on_etag, at_ms)
        return s.done()

    def safety_actions(self, exp: ExperienceState) -> set[str]:
        """§7: the actions never refused (see :func:`pipeline.dispatch.safety_actions`)."""
        return dispatch.safety_actions(self.registry, exp)

    def check_requests(self, exp: ExperienceState, requests: list[dict[str, Any]]) -> str | None:
        """Why a dispatch may not be published (catalog, allowed_action_contracts), or None."""
        return dispatch.check_requests(self.registry, exp, requests)
