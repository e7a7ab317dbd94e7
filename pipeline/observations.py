"""An admitted observation through docs/CONTRACTS.md §4.3 steps 5–7 (dedup, freshness, debounce),
with the ``cross_device`` part of step 8 checked first: a record correlated to another device's
experience is dead-lettered and, like every dead-lettered record (§10), changes no state."""

from __future__ import annotations

from typing import Any

import orjson

from pipeline import context_steps, debounce, decisions
from pipeline.step import RawRef, Step
from tables.state import SnapshotEntry, Trigger
from topics.envelope import Out
from topics.gate import dead_letter_json
from topics.records import Observation

#: §4.3 step 6: an observation more than 5 s in the future is clock skew.
MAX_CLOCK_SKEW_MS = 5_000

VOICE_PIPELINE_CONTRACT = "voice_llm.pipeline_state_changed"


def on_observation(
    s: Step, obs: Observation, received_at_ms: int, seen_at: int | None, raw: RawRef | None
) -> None:
    dev, res = s.dev, s.res
    core = s.core
    spec = core.registry.contracts[obs.type]
    # cross_device (step 8, checked first: a dead-lettered record changes no state, §10)
    corr = obs.correlation
    if spec.scope == "scoped" and corr is not None:
        owner = s.owner_of(corr.experience_id) if s.owner_of is not None else None
        if owner is not None and owner != dev.device_id:
            dead_letter(
                s,
                "observations",
                obs.model_dump(mode="json"),
                raw,
                received_at_ms,
                event_id=obs.event_id,
                detail="correlation names an experience of another device",
                path="correlation.experience_id",
            )
            return
    dev.last_received_ms = max(dev.last_received_ms, received_at_ms)
    # 5. deduplication
    if core.is_duplicate(seen_at, received_at_ms):
        s.drop("duplicate", obs.event_id, received_at_ms, f"duplicate {obs.type}")
        return
    res.mark_seen = True
    # pending debounce changes (and a precondition deadline) passed on the receive-time clock
    context_steps.deadline_due(s, res.experience, received_at_ms)
    debounce.confirm_due(s, received_at_ms)
    # 6. freshness
    ttl = spec.effective_ttl_ms(obs.ttl_ms)
    if obs.observed_at_ms > received_at_ms + MAX_CLOCK_SKEW_MS:
        s.drop(
            "clock_skew",
            obs.event_id,
            received_at_ms,
            f"{obs.type} observed {obs.observed_at_ms - received_at_ms} ms in the future",
        )
        return
    age = max(obs.freshness_ms, received_at_ms - obs.observed_at_ms)
    fresh = age <= ttl
    facts = dict(obs.facts)
    current = dev.snapshot.get(obs.type)
    if current is None or obs.observed_at_ms > current.observed_at_ms:
        dev.snapshot[obs.type] = SnapshotEntry(
            obs.event_id, obs.observed_at_ms, received_at_ms, facts, stale=not fresh
        )
    if not fresh:
        s.drop("stale", obs.event_id, received_at_ms, f"{obs.type} age {age} ms > ttl {ttl} ms")
        return
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
    debounce.confirm_due(s, obs.observed_at_ms, by_observed=True)
    if obs.type == VOICE_PIPELINE_CONTRACT:
        decisions.voice(s, res.experience, trigger)
        return
    # 7. debounce (and on to steps 8–11)
    debounce.step(s, spec, trigger, facts, received_at_ms)


def dead_letter(
    s: Step,
    kind: str,
    record: dict[str, Any],
    raw: RawRef | None,
    received_at_ms: int,
    *,
    event_id: str,
    detail: str,
    path: str,
) -> None:
    """A ``cross_device`` dead letter of an admitted record (its redacted copy, §10)."""
    device_id = s.dev.device_id
    value = raw.value if raw is not None else orjson.dumps(record)
    letter = dead_letter_json(
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
        payload=s.core.redactor.payload(kind, record),
    )
    s.res.outs.append(Out("deadletter", device_id, letter))
