"""What the gate tests share: the device key, the ``gate`` fixture, ``admit`` with a fixed source,
and the ``rejected`` check of a dead letter's reason and JSON form."""

from __future__ import annotations

from typing import Any

import pytest

from topics.gate import Admitted, Gate, GateKind, Rejected
from topics.registry import load_registry

KEY = b"airbot-0001"


@pytest.fixture(scope="module")
def gate() -> Gate:
    return Gate(load_registry())


def admit(
    gate: Gate, value: bytes | None, kind: GateKind = "observations", key: Any = KEY
) -> Admitted | Rejected:
    return gate.admit(kind, key, value, source_topic="guardian.observations", partition=3, offset=1200,
                      received_at_ms=1785400000100)  # fmt: skip


def rejected(result: Admitted | Rejected, reason: str) -> Rejected:
    assert isinstance(result, Rejected), result
    assert result.dead_letter.reason_code == reason, result.dead_letter
    # the gate builds the dead letter's JSON form directly: exactly the model's, field for field
    assert result.dead_letter.model_dump(mode="json") == result.value
    assert list(result.value) == list(result.dead_letter.model_dump(mode="json"))
    return result
