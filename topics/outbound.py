"""The last check of an output record before it goes to Kafka (docs/CONTRACTS.md §10).

Kafka refuses a record over the broker's ``message.max.bytes`` (1,048,588 bytes by default), and a
worker whose output is refused stops; restarted, it reads the same record again, builds the same
output and stops again: the partition never moves. Every output Guardian builds is bounded by
construction (inputs are at most 16 KiB, a dead letter shows a bounded key, ``detail``, paths and
payload copy), so this check is the last resort for an output that is not: :func:`encode_output`
encodes each output and, if it cannot be encoded or its key and value are over
:data:`OUTPUT_MAX_BYTES`, gives in its place a small ``output_invalid`` dead letter about the input
record that caused it. Whatever reaches the producer fits Kafka's default limit with room to spare.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import orjson

from topics.envelope import Out
from topics.gate import dead_letter_json

#: Kafka's default limit on one record batch (the broker's ``message.max.bytes``).
KAFKA_DEFAULT_MESSAGE_BYTES = 1_048_588
#: The most bytes (Kafka key and value) of one output record: a record batch holding it stays well
#: below :data:`KAFKA_DEFAULT_MESSAGE_BYTES`.
OUTPUT_MAX_BYTES = 900_000


@dataclass(frozen=True, slots=True)
class Cause:
    """The input record (or control record) whose processing built the outputs."""

    source_topic: str
    partition: int
    offset: int
    value: bytes | None = field(repr=False)
    received_at_ms: int


@dataclass(frozen=True, slots=True)
class Encoded:
    """An output ready for the producer: the record (the original, or the ``output_invalid`` dead
    letter in its place), its Kafka key and value, and why it was replaced (None: it was not)."""

    out: Out
    key: bytes | None
    value: bytes
    refused: str | None = None


def encode_output(out: Out, cause: Cause | None) -> Encoded:
    """``out`` encoded for Kafka, or its ``output_invalid`` dead letter when it cannot be encoded
    or is over :data:`OUTPUT_MAX_BYTES` (``cause``: the record it was built from; None: unknown,
    the dead letter then points at nothing)."""
    try:
        key = out.key.encode("utf-8") if out.key is not None else None
        value = orjson.dumps(out.value)
    except (UnicodeEncodeError, orjson.JSONEncodeError):
        return _refused(out, cause, f"its {out.kind} output cannot be encoded as JSON")
    size = len(value) + (len(key) if key is not None else 0)
    if size > OUTPUT_MAX_BYTES:
        return _refused(out, cause, f"its {out.kind} output of {size} bytes is over {OUTPUT_MAX_BYTES}")
    return Encoded(out, key, value)


def _refused(out: Out, cause: Cause | None, why: str) -> Encoded:
    if cause is None:
        cause = Cause("", 0, 0, None, 0)
    letter = dead_letter_json(
        "output_invalid",
        cause.value or b"",
        source_topic=cause.source_topic,
        partition=cause.partition,
        offset=cause.offset,
        key=out.key,
        received_at_ms=cause.received_at_ms,
        event_id=None,
        detail=why,
    )
    replaced = Out("deadletter", letter["key"], letter)
    key = letter["key"].encode("utf-8") if letter["key"] is not None else None
    return Encoded(replaced, key, orjson.dumps(letter), why)


__all__ = ["KAFKA_DEFAULT_MESSAGE_BYTES", "OUTPUT_MAX_BYTES", "Cause", "Encoded", "encode_output"]
