"""Debounce (docs/CONTRACTS.md §4.3 step 7): a change of a debounced fact waits for its window; a
change back within the window suppresses it (``debounced``); a change confirmed — by a later
record's receive time or ``observed_at_ms``, a quiet device's timer, or the end of a replay's
input — is promoted to steps 8–11."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pipeline import decisions
from pipeline.step import Step, active
from tables.state import DebounceState, DeviceState, ExperienceState, Trigger
from topics.records import Observation
from topics.registry import ContractSpec, Registry


def trigger_of(obs: Observation, facts: dict[str, Any], received_at_ms: int) -> Trigger:
    """The trigger of a fresh observation (``facts``: its facts, as the device's snapshot keeps
    them)."""
    corr = obs.correlation
    return Trigger(
        obs.event_id,
        obs.type,
        obs.observed_at_ms,
        received_at_ms,
        facts,
        (corr.experience_id, corr.workflow_id, corr.step_id) if corr is not None else None,
        obs.requires_cloud_decision,
    )


def promoted_at(registry: Registry, trigger: Trigger) -> int:
    """When ``trigger`` reached the supervisor on the receive-time clock: its receive time, or for
    a contract with a debounce window the end of the window (as :func:`step` and :func:`confirm`
    promote it); a decision reached asynchronously in replay is dated so."""
    spec = registry.contracts.get(trigger.type)
    if spec is None or spec.debounce is None or spec.debounce_ms <= 0:
        return trigger.received_at_ms
    return trigger.received_at_ms + spec.debounce_ms


def step(s: Step, spec: ContractSpec, obs: Observation, facts: dict[str, Any], received_at_ms: int) -> None:
    """Step 7 for a fresh observation of a contract with a debounce: hold, suppress or promote
    (its trigger is built only then: most observations repeat the stable value).

    This module is the only writer of a debounce state's pending change: each write keeps the
    device's ``pending_changes`` count."""
    dev = s.dev
    debounce = spec.debounce
    if debounce is None or spec.debounce_ms <= 0:
        decisions.promote(s, trigger_of(obs, facts, received_at_ms), received_at_ms)
        return
    value = facts.get(debounce.fact)
    key = type_ = obs.type
    if debounce.per_fact:
        # §2 rule 8: a state per area only for the areas of the active plan
        which = facts.get(debounce.per_fact)
        running = active(dev, s.res.experience)
        if running is None or which not in running.plan_areas:
            why = "no active experience" if running is None else "an area outside the active plan"
            s.drop("uncorrelated", obs.event_id, received_at_ms, f"{type_}: {why}")
            return
        key = f"{type_}/{which}"
    st = dev.debounce.get(key)
    if st is None:
        st = DebounceState(stable=debounce.resting)
        dev.debounce[key] = st
    if st.pending is None:
        if value == st.stable:
            return
        st.pending = trigger_of(obs, facts, received_at_ms)
        st.pending_value, st.window_ms = value, spec.debounce_ms
        dev.pending_changes += 1
        return
    if value == st.pending_value:
        return
    suppressed = st.pending
    s.drop(
        "debounced",
        suppressed.event_id,
        received_at_ms,
        f"{type_} change to {st.pending_value} reverted within {spec.debounce_ms} ms",
    )
    if value == st.stable:
        st.pending, st.pending_value = None, None
        dev.pending_changes -= 1
    else:
        st.pending = trigger_of(obs, facts, received_at_ms)
        st.pending_value, st.window_ms = value, spec.debounce_ms


def confirm(s: Step, due: Callable[[DebounceState], bool]) -> None:
    """Confirm the pending changes ``due`` says have passed their window, oldest first; a change
    to the alert value is promoted at the end of its window."""
    dev = s.dev
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
        dev.pending_changes -= 1
        spec = s.core.registry.contracts[trigger.type]
        if spec.debounce is None or value != spec.debounce.alert:
            continue
        decisions.promote(s, trigger, trigger.received_at_ms + st.window_ms)


def confirm_due(s: Step, now_ms: int, *, by_observed: bool = False) -> None:
    """Confirm the pending changes whose window has passed at ``now_ms``: on the receive-time
    clock, or (``by_observed``) by a later record's ``observed_at_ms``."""
    if not s.dev.has_pending():
        return

    def due(st: DebounceState) -> bool:
        assert st.pending is not None
        start = st.pending.observed_at_ms if by_observed else st.pending.received_at_ms
        return start + st.window_ms <= now_ms

    confirm(s, due)


def prune(registry: Registry, dev: DeviceState, exp: ExperienceState) -> None:
    """Drop the per-area debounce states of areas outside the new plan (§2 rule 8)."""
    areas = exp.plan_areas
    for key in list(dev.debounce):
        contract, sep, which = key.partition("/")
        spec = registry.contracts.get(contract)
        per_area = sep and spec is not None and spec.debounce is not None and spec.debounce.per_fact
        if per_area and which not in areas:
            dropped = dev.debounce.pop(key)
            if dropped.pending is not None:
                dev.pending_changes -= 1
