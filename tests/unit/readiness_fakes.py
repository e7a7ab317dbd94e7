"""A fake faust app as readiness reads it: table recovery, producer, flow control, assignment."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from faust.types import TP


class FakeEvent:
    def __init__(self, value: bool = False) -> None:
        self.value = value

    def is_set(self) -> bool:
        return self.value


def fake_app(*, completed: bool, remaining: int = 0, producer: bool = True, flowing: bool = True) -> Any:
    tp = TP("p.worker-devices-changelog", 0)
    recovery = SimpleNamespace(
        completed=FakeEvent(completed),
        active_highwaters={tp: 99},
        active_offsets={tp: 99 - remaining},
        _generation_id=1,
        signal_recovery_start=FakeEvent(False),
    )
    return SimpleNamespace(
        consumer_generation_id=1,
        tables=SimpleNamespace(recovery=recovery),
        producer=SimpleNamespace(_producer=SimpleNamespace(_closed=False) if producer else None),
        flow_control=SimpleNamespace(is_active=lambda: flowing),
        consumer=SimpleNamespace(
            assignment=lambda: {TP("p.plans", 0), TP("p.worker-owners-changelog", 0), TP("p.plans", 1)}
        ),
    )
