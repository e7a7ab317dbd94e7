"""At-least-once delivery, as the fleet sees the pipeline's outputs.

Guardian delivers its outputs at least once: after a worker crash or a rebalance, records whose
outputs went out but whose offsets were not committed yet are read again, and their outputs go out
again, identical (same ID, same contents; docs/CONTRACTS.md §7, §8, §10). A device, and the fleet
checking the outcome, must take such a copy for the delivery it is: counted, not obeyed twice, not
a second decision or dispatch of the experience. A copy with the same identity and *other*
contents is a real failure (an ID must never name two different records) and is reported as one.

Identity per output topic: a decision by its ``decision_id``, a dispatch by its ``dispatch_id``, a
timeline entry by its device and ``seq``, a dead letter by the record it is about (``source_topic``,
``partition``, ``offset``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Verdict = Literal["first", "again", "conflict"]

#: the fields naming an output record, per output topic suffix
IDENTITY_FIELDS: dict[str, tuple[str, ...]] = {
    "decisions": ("decision_id",),
    "dispatch": ("dispatch_id",),
    "timeline": ("device_id", "seq"),
    "deadletter": ("source_topic", "partition", "offset"),
}


def identity(suffix: str, record: dict[str, Any]) -> tuple[Any, ...] | None:
    """What names ``record`` among the outputs of ``suffix`` (None: it has no usable identity)."""
    fields = IDENTITY_FIELDS.get(suffix)
    if fields is None:
        return None
    values = tuple(record.get(f) for f in fields)
    if any(v is None for v in values):
        return None
    return (suffix, *values)


@dataclass
class Deliveries:
    """Every output record delivered so far, by identity."""

    seen: dict[tuple[Any, ...], dict[str, Any]] = field(default_factory=dict)

    def judge(self, suffix: str, record: dict[str, Any]) -> Verdict:
        """``first`` (new), ``again`` (an identical copy of one delivered before) or ``conflict``
        (the same identity with other contents)."""
        key = identity(suffix, record)
        if key is None:
            return "first"
        before = self.seen.get(key)
        if before is None:
            self.seen[key] = record
            return "first"
        return "again" if before == record else "conflict"

    @staticmethod
    def describe(suffix: str, record: dict[str, Any]) -> str:
        """A conflict, in one line for the fleet's report."""
        key = identity(suffix, record)
        named = ", ".join(f"{f}={v}" for f, v in zip(IDENTITY_FIELDS[suffix], (key or ())[1:], strict=False))
        return f"{suffix} record ({named}) delivered twice with different contents"
