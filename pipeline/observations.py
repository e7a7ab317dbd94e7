"""An admitted observation through docs/CONTRACTS.md §4.3 steps 5–7 (dedup, freshness, debounce),
with the ``cross_device`` part of step 8 checked first: a record correlated to another device's
experience is dead-lettered and, like every dead-lettered record (§10), changes no state."""

from __future__ import annotations

from typing import Any

import orjson
from pydantic import BaseModel

from pipeline import context_steps, debounce, decisions
from pipeline.step import RawRef, Step
from tables.state import SnapshotEntry
from topics.envelope import Out
from topics.gate import dead_letter_json
from topics.records import DeadLetterReason, Observation

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
    if (
        corr is not None
        and spec.scope == "scoped"
        and (owner := s.owner(corr.experience_id)) is not None
        and owner != dev.device_id  # (the common case: its own experience, no call below)
        and refused_cross_device(
            s,
            owner,
            "observations",
            obs,
            raw,
            received_at_ms,
            event_id=obs.event_id,
            detail="correlation names an experience of another device",
            path="correlation.experience_id",
        )
    ):
        return
    if received_at_ms > dev.last_received_ms:
        dev.last_received_ms = received_at_ms
    event_id, type_, observed_at_ms = obs.event_id, obs.type, obs.observed_at_ms
    # 5. deduplication (Pipeline.is_duplicate, inlined: once per observation)
    if seen_at is not None and received_at_ms - seen_at <= core.dedup_window_ms:
        s.drop("duplicate", event_id, received_at_ms, f"duplicate {type_}")
        return
    res.mark_seen = True
    # pending debounce changes (and a precondition deadline) passed on the receive-time clock; with
    # nothing pending now, nothing becomes pending before the second confirmation below
    if dev.precondition_due_ms is not None:
        context_steps.deadline_due(s, res.experience, received_at_ms)
    pending = dev.has_pending()
    if pending:
        debounce.confirm_due(s, received_at_ms)
    # 6. freshness
    ttl = spec.effective_ttl_ms(obs.ttl_ms)
    if observed_at_ms > received_at_ms + MAX_CLOCK_SKEW_MS:
        s.drop(
            "clock_skew",
            event_id,
            received_at_ms,
            f"{type_} observed {observed_at_ms - received_at_ms} ms in the future",
        )
        return
    age = max(obs.freshness_ms, received_at_ms - observed_at_ms)
    fresh = age <= ttl
    facts = dict(obs.facts)
    snapshot = dev.snapshot
    current = snapshot.get(type_)
    if current is None or observed_at_ms > current.observed_at_ms:
        snapshot[type_] = SnapshotEntry(event_id, observed_at_ms, received_at_ms, facts, not fresh)
    if not fresh:
        s.drop("stale", event_id, received_at_ms, f"{type_} age {age} ms > ttl {ttl} ms")
        return
    # confirmation by a later record's observed_at_ms
    if pending:
        debounce.confirm_due(s, observed_at_ms, by_observed=True)
    if type_ == VOICE_PIPELINE_CONTRACT:
        decisions.voice(s, res.experience, debounce.trigger_of(obs, facts, received_at_ms))
        return
    # 7. debounce (and on to steps 8–11; the trigger is built there, when it is kept or promoted)
    debounce.step(s, spec, obs, facts, received_at_ms)


def refused_cross_device(
    s: Step,
    owner: str | None,
    kind: str,
    record: BaseModel | dict[str, Any],
    raw: RawRef | None,
    received_at_ms: int,
    *,
    event_id: str,
    detail: str,
    path: str,
) -> bool:
    """Whether an admitted record names an experience that ``owner``, another device, owns (§2
    rule 9); if so it is refused with a ``cross_device`` dead letter (its redacted copy, §10)."""
    if owner is None or owner == s.dev.device_id:
        return False
    refuse(s, "cross_device", kind, record, raw, received_at_ms, event_id=event_id, detail=detail, path=path)
    return True


def refuse(
    s: Step,
    reason: DeadLetterReason,
    kind: str,
    record: BaseModel | dict[str, Any],
    raw: RawRef | None,
    received_at_ms: int,
    *,
    event_id: str,
    detail: str,
    path: str,
) -> None:
    """Refuse an admitted record with a ``reason`` dead letter (its redacted copy, §10)."""
    dumped = record if isinstance(record, dict) else record.model_dump(mode="json")
    device_id = s.dev.device_id
    value = raw.value if raw is not None else orjson.dumps(dumped)
    letter = dead_letter_json(
        reason,
        value,
        source_topic=raw.source_topic if raw else "",
        partition=raw.partition if raw else 0,
        offset=raw.offset if raw else 0,
        key=device_id,
        received_at_ms=received_at_ms,
        event_id=event_id,
        detail=detail,
        offending_paths=(path,),
        payload=s.core.redactor.payload(kind, dumped),
    )
    s.res.outs.append(Out("deadletter", device_id, letter))
