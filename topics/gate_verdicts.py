"""The gate's input kinds (:data:`GateKind`) and its two verdicts: :class:`Admitted`, a typed
record, and :class:`Rejected`, a record refused with its dead letter."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, get_args

from topics.records import DeadLetter, DeviceContext, ExperiencePlan, Observation, TaskEvent

GateKind = Literal["observations", "task-events", "plans", "device-context"]
GATE_KINDS: tuple[str, ...] = get_args(GateKind)


@dataclass(frozen=True, slots=True)
class Admitted:
    """A record that passed the gate, with the size in bytes of its value."""

    record: Observation | TaskEvent | ExperiencePlan | DeviceContext
    size: int
    #: a plan's JSON form (``model_dump(mode="json")``), made once by the gate's checks and kept
    #: by the core as the experience's plan; None for the other kinds
    json: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Rejected:
    """A record the gate refused; ``event_id`` is the record's ID when it could be read safely.
    ``value`` is its dead letter's JSON form (what the pipeline writes), ``dead_letter`` the same
    as a model."""

    value: dict[str, Any]
    event_id: str | None

    @property
    def dead_letter(self) -> DeadLetter:
        return DeadLetter.model_validate(self.value)
