"""The §10 dead letter of a record the gate refuses: :func:`dead_letter_json` (its JSON form,
built directly; ``DeadLetter.model_validate`` of it is the same as a model) and
:data:`PAYLOAD_REASONS` (the reasons whose dead letter may carry a redacted copy of the record)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any

from topics.gate_checks import ID_FULLMATCH, cut
from topics.kafka_key import shown_key
from topics.records import DeadLetterReason

#: Reason codes whose dead letter may carry a copy of the payload (§10).
PAYLOAD_REASONS: frozenset[str] = frozenset(
    {
        "schema_invalid",
        "key_mismatch",
        "unknown_contract",
        "cross_device",
        "plan_invalid",
        "clock_skew",
        "experience_rate",
    }
)

_MAX_PATHS = 32
_MAX_PATH_LEN = 200
_MAX_DETAIL_LEN = 500


def dead_letter_json(
    reason_code: DeadLetterReason,
    raw: bytes,
    *,
    source_topic: str,
    partition: int,
    offset: int,
    key: bytes | str | None,
    received_at_ms: int,
    event_id: str | None,
    detail: str,
    offending_paths: Iterable[str] = (),
    payload: str | None = None,
) -> dict[str, Any]:
    """The §10 dead letter of ``raw`` (the original record value) in its JSON form, built directly:
    exactly :class:`~topics.records.DeadLetter`'s ``model_dump(mode="json")`` (tests compare the
    two), without a pydantic round trip per rejected record.

    ``payload`` is the redacted copy of the parsed record (:class:`topics.hostile.Redactor`), kept
    only for the reasons that carry one: the raw bytes are never copied. An ``event_id`` that is
    not a valid ID is left out. ``detail`` and ``offending_paths`` must name keys by
    :func:`topics.hostile.safe_key` only, never values. ``key`` (the record's Kafka key) is shown
    by :func:`topics.kafka_key.shown_key`: itself, or a bounded form of a key over 256 bytes or not
    UTF-8 text."""
    if reason_code not in PAYLOAD_REASONS:
        payload = None
    if event_id is not None and ID_FULLMATCH(event_id) is None:
        event_id = None
    return {
        "reason_code": reason_code,
        "source_topic": source_topic,
        "partition": partition,
        "offset": offset,
        "key": shown_key(key),
        "event_id": event_id,
        "detail": cut(detail, _MAX_DETAIL_LEN),
        "offending_paths": [cut(p, _MAX_PATH_LEN) for p in offending_paths][:_MAX_PATHS],
        "payload_sha256": hashlib.sha256(raw).hexdigest(),
        "payload_size": len(raw),
        "payload": payload,
        "received_at_ms": received_at_ms,
    }
