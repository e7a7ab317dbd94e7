"""Task events (docs/CONTRACTS.md §5): dedup, sequence order, the started steps to compensate, the
physical evidence, and the end of an experience."""

from __future__ import annotations

from pipeline import context_steps, debounce, dispatch, lifecycle
from pipeline.step import Step, active
from topics.records import TaskEvent

#: statuses that mean a step has started on the device (it may need compensating)
STARTED = ("started", "progress", "paused", "resumed", "completed")


def on_task_event(s: Step, event: TaskEvent, received_at_ms: int, seen_at: int | None) -> None:
    dev, res = s.dev, s.res
    dev.last_received_ms = max(dev.last_received_ms, received_at_ms)
    if s.core.is_duplicate(seen_at, received_at_ms):
        s.drop("duplicate", event.event_id, received_at_ms, f"duplicate task event {event.sequence}")
        return
    res.mark_seen = True
    context_steps.deadline_due(s, res.experience, received_at_ms)
    debounce.confirm_due(s, received_at_ms)
    if dev.last_task_sequence is not None and event.sequence <= dev.last_task_sequence:
        s.drop(
            "out_of_order",
            event.event_id,
            received_at_ms,
            f"task event sequence {event.sequence} <= {dev.last_task_sequence}",
        )
        return
    dev.last_task_sequence = event.sequence
    exp = active(dev, res.experience)
    if exp is None or event.experience_id != exp.experience_id:
        return
    step = (event.capability, event.operation)
    if (
        event.status in STARTED
        and step not in exp.started_steps
        and dispatch.compensation(s.core.registry, *step) is not None
    ):
        # §2 rule 8: tracked per compensable catalog operation, never per event or step ID
        exp.started_steps.append(step)
    evidence = event.evidence
    if evidence is not None and evidence.kind == "physical" and evidence.signal:
        lifecycle.evidence(s, exp, event, evidence.signal, evidence.area_id, received_at_ms)
    if event.status == "aborted" and not exp.winding_down:
        reason = event.reason_code or "aborted"
        s.end(exp, "failed", received_at_ms, f"device aborted {event.capability}.{event.operation}: {reason}")
        return
    lifecycle.check_end(s, exp, received_at_ms)
