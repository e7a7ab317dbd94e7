"""Task events (docs/CONTRACTS.md §5): dedup, sequence order, the started steps to compensate, the
physical evidence, and the end of an experience."""

from __future__ import annotations

from typing import Literal

from pipeline import context_steps, debounce, dispatch, lifecycle
from pipeline.step import Step, active
from tables.state import DeviceState
from topics.records import TaskEvent

#: statuses that mean a step has started on the device (it may need compensating)
STARTED = ("started", "progress", "paused", "resumed", "completed")
#: How far a task event's sequence may move from the last one applied (§5). Further, either way, is
#: a jump: refused, unless the event continues a jump the device's previous event made (its counter
#: did move). So no single sequence, 2^63 - 1 included, can make every later event look old.
MAX_SEQUENCE_JUMP = 1_000_000


def sequence_order(dev: DeviceState, sequence: int) -> Literal["apply", "out_of_order", "sequence_jump"]:
    """Where ``sequence`` stands against the device's last applied task event (§5)."""
    last = dev.last_task_sequence
    if last is None or last < sequence <= last + MAX_SEQUENCE_JUMP:
        return "apply"
    jump = dev.sequence_jump
    if jump is not None and jump < sequence <= jump + MAX_SEQUENCE_JUMP:
        return "apply"  # it follows the jump refused before it: the device's counter did move
    if last - MAX_SEQUENCE_JUMP <= sequence <= last:
        return "out_of_order"
    return "sequence_jump"


def on_task_event(s: Step, event: TaskEvent, received_at_ms: int, seen_at: int | None) -> None:
    dev, res = s.dev, s.res
    dev.last_received_ms = max(dev.last_received_ms, received_at_ms)
    if s.core.is_duplicate(seen_at, received_at_ms):
        s.drop("duplicate", event.event_id, received_at_ms, f"duplicate task event {event.sequence}")
        return
    res.mark_seen = True
    context_steps.deadline_due(s, res.experience, received_at_ms)
    debounce.confirm_due(s, received_at_ms)
    order = sequence_order(dev, event.sequence)
    if order == "out_of_order":
        s.drop(
            "out_of_order",
            event.event_id,
            received_at_ms,
            f"task event sequence {event.sequence} <= {dev.last_task_sequence}",
        )
        return
    if order == "sequence_jump":
        dev.sequence_jump = event.sequence
        s.drop(
            "sequence_jump",
            event.event_id,
            received_at_ms,
            f"task event sequence {event.sequence} more than {MAX_SEQUENCE_JUMP} from the last applied "
            f"{dev.last_task_sequence}: not applied (the device's next event confirms a jump it follows)",
        )
        return
    dev.last_task_sequence = event.sequence
    dev.sequence_jump = None
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
