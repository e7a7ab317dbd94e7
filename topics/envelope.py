"""Where a record comes from and where an output goes: small envelopes shared by every layer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

OutKind = Literal["decisions", "dispatch", "timeline", "deadletter"]


@dataclass(slots=True)
class Out:
    """One output record: its topic kind (decisions, dispatch, timeline, deadletter), key and value."""

    kind: OutKind
    #: the Kafka key (None: a dead letter of a record whose key was null)
    key: str | None
    value: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Coords:
    """Where an input record sits in Kafka: (topic suffix, partition, offset)."""

    suffix: str
    partition: int
    offset: int

    @property
    def stream(self) -> str:
        return f"{self.suffix}:{self.partition}"

    def __str__(self) -> str:
        return f"{self.suffix}:{self.partition}:{self.offset}"
